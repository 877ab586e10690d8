//! What one whole response said, from its bytes: the server's usage (merged
//! over every report), the last finish reason and error, whether a stream
//! ended with its end marker, llama.cpp's own token count, and the answer's
//! text (the capture proxy finds conversations by it; it is never written). One function
//! for the capture proxy's records and the target probe (through the
//! binding's `decode_response`), so neither parses a response by hand.

use super::{decode_all, decode_body, Channel, Dialect, Record, StreamError, Usage};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResponseSummary {
    /// The usage reports merged (fields never reported stay `None`).
    pub usage: Usage,
    /// The last finish reason.
    pub finish_reason: Option<String>,
    /// The last error the response carried (an error event or body).
    pub error: Option<String>,
    /// A stream ended with its end marker; always true for a JSON body.
    pub complete: bool,
    /// llama.cpp's cumulative `timings.predicted_n`, as last reported (None:
    /// the server sent no `timings`, so it is not llama.cpp).
    pub predicted_tokens: Option<u64>,
    /// The answer as a client puts it back into the conversation: the
    /// content text, then the tool calls' argument text, each in stream
    /// order (reasoning left out, as clients leave it out of the history).
    pub answer: String,
}

/// Whether a `Content-Type` is an SSE stream (else the body is one JSON document).
pub fn is_event_stream(content_type: &str) -> bool {
    content_type
        .to_ascii_lowercase()
        .contains("text/event-stream")
}

/// Decodes a whole response of `dialect`: an SSE stream when `content_type`
/// says so, else a JSON body. Bytes that do not decode are an error
/// (`StreamError`: `CoreError::Sse` or `CoreError::Decode` in the binding).
pub fn summarize(
    dialect: Dialect,
    body: &[u8],
    content_type: &str,
) -> Result<ResponseSummary, StreamError> {
    let streamed = is_event_stream(content_type);
    let records = if streamed {
        decode_all(dialect, body)?
    } else {
        decode_body(dialect, body)?
    };
    let mut out = ResponseSummary {
        complete: !streamed,
        ..ResponseSummary::default()
    };
    let mut tool_text = String::new();
    for record in records {
        match record {
            Record::Usage(u) => out.usage.merge(&u),
            Record::Finish { reason } => out.finish_reason = Some(reason),
            Record::Error { message, .. } => out.error = Some(message),
            Record::Done => out.complete = true,
            Record::Timings(t) => {
                if t.predicted_n.is_some() {
                    out.predicted_tokens = t.predicted_n;
                }
            }
            Record::Text {
                channel: Channel::Content,
                text,
            } => out.answer.push_str(&text),
            Record::Text {
                channel: Channel::Tool,
                text,
            } => tool_text.push_str(&text),
            Record::Text { .. } | Record::ToolCall { .. } | Record::Items(_) => {}
        }
    }
    out.answer.push_str(&tool_text);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"timings\":{\"predicted_n\":1}}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n\
data: [DONE]\n\n";

    #[test]
    fn a_stream_merges_usage_and_keeps_the_last_finish_and_timings() {
        let got = summarize(Dialect::Chat, CHAT, "text/event-stream; charset=utf-8").unwrap();
        assert_eq!(got.usage.prompt_tokens, Some(3));
        assert_eq!(got.usage.completion_tokens, Some(1));
        assert_eq!(got.usage.reasoning_tokens, None);
        assert_eq!(got.finish_reason.as_deref(), Some("stop"));
        assert_eq!(got.predicted_tokens, Some(1));
        assert!(got.complete && got.error.is_none());
        assert_eq!(got.answer, "hi");
    }

    #[test]
    fn the_answer_is_the_content_then_the_tool_arguments_without_reasoning() {
        let stream = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hmm\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\"}}]}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" check.\"}}]}\n\n\
data: [DONE]\n\n";
        let got = summarize(Dialect::Chat, stream, "text/event-stream").unwrap();
        assert_eq!(got.answer, "Let me check.{\"a\":1}");
    }

    #[test]
    fn a_stream_without_its_end_marker_is_incomplete() {
        let cut = &CHAT[..CHAT.len() - b"data: [DONE]\n\n".len()];
        let got = summarize(Dialect::Chat, cut, "text/event-stream").unwrap();
        assert!(!got.complete);
        assert_eq!(got.usage.completion_tokens, Some(1));
    }

    #[test]
    fn a_json_body_is_complete_and_bad_bytes_are_an_error() {
        let body = br#"{"type":"message","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2}}"#;
        let got = summarize(Dialect::Anthropic, body, "application/json").unwrap();
        assert_eq!(
            (got.usage.prompt_tokens, got.usage.completion_tokens),
            (Some(5), Some(2))
        );
        assert_eq!(got.finish_reason.as_deref(), Some("end_turn"));
        assert!(got.complete && got.predicted_tokens.is_none());
        assert!(summarize(Dialect::Chat, b"{not json", "application/json").is_err());
    }
}
