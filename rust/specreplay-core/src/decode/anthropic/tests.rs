use crate::decode::test_util::*;
use crate::decode::{decode_all, decode_body, DecodeError, Dialect, Record, Usage};

#[test]
fn thinking_text_tool_stream() {
    assert_eq!(
        decode_vector(Dialect::Anthropic, "anthropic_thinking.sse"),
        vec![
            usage(Some(472), Some(3), None, Some(256)),
            reasoning("I need to find the GCD"),
            reasoning(" of 1071 and 462."),
            content("The GCD is 21"),
            content(" — voilà ✓"),
            call("toolu_01", "verify"),
            tool("{\"gcd\": 21}"),
            finish("tool_use"),
            usage(None, Some(89), None, None),
            Record::Done,
        ]
    );
}

#[test]
fn usage_records_merge_into_totals() {
    let mut total = Usage::default();
    for r in decode_vector(Dialect::Anthropic, "anthropic_thinking.sse") {
        if let Record::Usage(u) = r {
            total.merge(&u);
        }
    }
    assert_eq!(
        total,
        Usage {
            prompt_tokens: Some(472),
            completion_tokens: Some(89),
            reasoning_tokens: None,
            cached_tokens: Some(256)
        }
    );
}

#[test]
fn error_event_mid_stream() {
    assert_eq!(
        decode_vector(Dialect::Anthropic, "anthropic_error.sse"),
        vec![
            usage(Some(25), Some(1), None, None),
            content("Hi"),
            error("Overloaded", Some("overloaded_error"))
        ]
    );
}

#[test]
fn max_tokens_with_input_in_message_delta() {
    assert_eq!(
        decode_vector(Dialect::Anthropic, "anthropic_max_tokens.sse"),
        vec![
            usage(Some(40), Some(1), None, None),
            reasoning("Long thought"),
            finish("max_tokens"),
            usage(Some(40), Some(1024), None, Some(0)),
            Record::Done,
        ]
    );
}

#[test]
fn unknown_delta_and_event_types_ignored() {
    let s = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"citations_delta\",\"citation\":{}}}\n\nevent: brand_new\ndata: {\"type\":\"brand_new\"}\n\n";
    assert_eq!(decode_all(Dialect::Anthropic, s).unwrap(), vec![]);
}

#[test]
fn bad_json() {
    let s = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":\n\n";
    assert!(matches!(
        decode_all(Dialect::Anthropic, s),
        Err(crate::decode::StreamError::Decode(
            DecodeError::InvalidJson { .. }
        ))
    ));
}

#[test]
fn body() {
    let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"thinking","thinking":"Hmm","signature":"sig"},{"type":"redacted_thinking","data":"xx"},{"type":"text","text":"Yes"},{"type":"tool_use","id":"t","name":"f","input":{"a":1}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"cache_read_input_tokens":4,"output_tokens":20}}"#;
    assert_eq!(
        decode_body(Dialect::Anthropic, body).unwrap(),
        vec![
            reasoning("Hmm"),
            content("Yes"),
            call("t", "f"),
            tool(r#"{"a":1}"#),
            finish("end_turn"),
            usage(Some(10), Some(20), None, Some(4))
        ]
    );
    let err = br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}"#;
    assert_eq!(
        decode_body(Dialect::Anthropic, err).unwrap(),
        vec![error(
            "max_tokens: field required",
            Some("invalid_request_error")
        )]
    );
}
