use crate::decode::test_util::*;
use crate::decode::{decode_all, decode_body, decoder_for, DecodeError, Dialect, Record};
use crate::sse::SseEvent;

#[test]
fn full_stream_with_summary_text_and_function_call() {
    assert_eq!(
        decode_vector(Dialect::Responses, "responses_full.sse"),
        vec![
            reasoning("**Greeting in French**"),
            reasoning("\n\nThe user wants a greeting."),
            content("Bonjour"),
            content(" à tous — 🙂"),
            call("call_01", "log"),
            tool("{\"level\":"),
            tool("\"info\"}"),
            usage(Some(21), Some(180), Some(128), Some(16)),
            finish("tool_calls"),
            Record::Done,
        ]
    );
}

#[test]
fn incomplete_reports_reason() {
    assert_eq!(
        decode_vector(Dialect::Responses, "responses_incomplete.sse"),
        vec![
            reasoning("We need"),
            reasoning(" to count"),
            usage(Some(70), Some(4), Some(4), Some(0)),
            finish("max_output_tokens"),
            Record::Done,
        ]
    );
}

#[test]
fn failed_reports_error() {
    assert_eq!(
        decode_vector(Dialect::Responses, "responses_failed.sse"),
        vec![
            content("Hal"),
            error(
                "The model failed to generate a response.",
                Some("server_error")
            ),
            Record::Done
        ]
    );
}

#[test]
fn error_event() {
    assert_eq!(
        decode_vector(Dialect::Responses, "responses_error_event.sse"),
        vec![
            error(
                "Rate limit reached for requests",
                Some("rate_limit_exceeded")
            ),
            Record::Done
        ]
    );
    // Some gateways nest the error object.
    let nested = b"data: {\"type\":\"error\",\"error\":{\"type\":\"server_error\",\"message\":\"boom\"}}\n\n";
    assert_eq!(
        decode_all(Dialect::Responses, nested).unwrap(),
        vec![error("boom", Some("server_error")), Record::Done]
    );
}

#[test]
fn type_falls_back_to_sse_event_name() {
    let ev = SseEvent {
        event: Some("response.output_text.delta".into()),
        data: r#"{"delta":"x"}"#.into(),
        ..Default::default()
    };
    let mut out = Vec::new();
    decoder_for(Dialect::Responses)
        .decode(&ev, &mut out)
        .unwrap();
    assert_eq!(out, vec![content("x")]);
}

#[test]
fn data_type_wins_over_event_name() {
    let ev = SseEvent {
        event: Some("response.output_text.delta".into()),
        data: r#"{"type":"response.refusal.delta","delta":"no"}"#.into(),
        ..Default::default()
    };
    let mut out = Vec::new();
    decoder_for(Dialect::Responses)
        .decode(&ev, &mut out)
        .unwrap();
    assert_eq!(out, vec![]);
}

#[test]
fn ignored_events_tolerate_odd_shapes() {
    // vLLM once sent an object as `delta` for an event type we do not read.
    let s = b"data: {\"type\":\"response.reasoning.delta\",\"delta\":{\"content\":\"We\"}}\n\n";
    assert_eq!(decode_all(Dialect::Responses, s).unwrap(), vec![]);
}

#[test]
fn bad_json() {
    let s = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\n\n";
    assert!(matches!(
        decode_all(Dialect::Responses, s),
        Err(crate::decode::StreamError::Decode(
            DecodeError::InvalidJson { .. }
        ))
    ));
}

#[test]
fn body() {
    let body = br#"{"id":"resp_1","object":"response","status":"completed","output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"Plan"}],"content":[{"type":"reasoning_text","text":"Think"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done.","annotations":[]}]},{"type":"function_call","arguments":"{}","name":"f","call_id":"c"}],"usage":{"input_tokens":3,"output_tokens":9,"output_tokens_details":{"reasoning_tokens":6},"input_tokens_details":{"cached_tokens":0}}}"#;
    assert_eq!(
        decode_body(Dialect::Responses, body).unwrap(),
        vec![
            reasoning("Think"),
            reasoning("Plan"),
            content("Done."),
            call("c", "f"),
            tool("{}"),
            usage(Some(3), Some(9), Some(6), Some(0)),
            finish("tool_calls"),
        ]
    );
    let text_only = br#"{"status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}]}"#;
    assert_eq!(
        decode_body(Dialect::Responses, text_only).unwrap(),
        vec![content("Hi"), finish("stop")]
    );
    let incomplete = br#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}"#;
    assert_eq!(
        decode_body(Dialect::Responses, incomplete).unwrap(),
        vec![finish("max_output_tokens")]
    );
    let err = br#"{"error":{"message":"Invalid model","type":"invalid_request_error","param":"model","code":"model_not_found"}}"#;
    assert_eq!(
        decode_body(Dialect::Responses, err).unwrap(),
        vec![error("Invalid model", Some("model_not_found"))]
    );
}
