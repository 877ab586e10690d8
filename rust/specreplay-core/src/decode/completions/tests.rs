use crate::decode::test_util::*;
use crate::decode::{decode_body, Dialect, Record};

#[test]
fn vllm_completions_stream() {
    assert_eq!(
        decode_vector(Dialect::Completions, "completions_vllm.sse"),
        vec![
            content(" Once"),
            content(" upon a"),
            content(" time…"),
            finish("length"),
            usage(Some(3), Some(4), None, None),
            Record::Done,
        ]
    );
}

#[test]
fn completions_error_mid_stream() {
    let stream = b"data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n\
data: {\"error\":{\"message\":\"engine dead\",\"type\":\"InternalServerError\",\"code\":500}}\n\n\
data: [DONE]\n\n";
    assert_eq!(
        crate::decode::decode_all(Dialect::Completions, stream).unwrap(),
        vec![
            content("a"),
            error("engine dead", Some("500")),
            Record::Done
        ]
    );
}

#[test]
fn completions_ignores_chat_fields() {
    // Text in a chat-shaped delta is not completions output.
    let stream =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"text\":\"\"}]}\n\n";
    assert_eq!(
        crate::decode::decode_all(Dialect::Completions, stream).unwrap(),
        vec![]
    );
}

#[test]
fn completions_body() {
    let body = br#"{"id":"cmpl-2","object":"text_completion","choices":[{"index":0,"text":" world","logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#;
    assert_eq!(
        decode_body(Dialect::Completions, body).unwrap(),
        vec![
            content(" world"),
            finish("stop"),
            usage(Some(1), Some(2), None, None)
        ]
    );
}
