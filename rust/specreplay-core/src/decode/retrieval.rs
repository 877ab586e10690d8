//! Embeddings and rerank answers: one JSON body, no generated text. What a
//! benchmark takes from them is how many items came back (embeddings, scored
//! documents) and the input tokens the server counted.
//!
//! Shapes read: OpenAI/vLLM embeddings (`data`, `usage.prompt_tokens`), vLLM
//! and Jina rerank (`results`, `usage.total_tokens`), vLLM score (`data`),
//! Cohere rerank (`results`, `meta.billed_units.input_tokens`).

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::json::{self, count, ApiError};
use super::{DecodeError, Record, StreamDecoder, Usage};
use crate::sse::SseEvent;

/// These APIs answer with one body; a stream from one is not understood.
pub(super) struct NotStreamed;

impl StreamDecoder for NotStreamed {
    fn decode(&mut self, _event: &SseEvent, _out: &mut Vec<Record>) -> Result<(), DecodeError> {
        Err(DecodeError::UnexpectedShape {
            message: "an event stream from an embeddings or rerank endpoint (it answers with one JSON body)".into(),
        })
    }
}

pub(super) fn decode_body(body: &str, out: &mut Vec<Record>) -> Result<(), DecodeError> {
    let answer: Answer = json::parse(body)?;
    if let Some(err) = answer.error {
        out.push(err.into_record());
        return Ok(());
    }
    let items = answer.data.or(answer.results).map(|v| v.len() as u64);
    if let Some(n) = items {
        out.push(Record::Items(n));
    }
    let usage = answer.usage.unwrap_or_default();
    let billed = answer
        .meta
        .and_then(|m| m.billed_units)
        .and_then(|b| b.input_tokens);
    let prompt = usage.prompt_tokens.or(usage.total_tokens).or(billed);
    if prompt.is_some() {
        out.push(Record::Usage(Usage {
            prompt_tokens: prompt,
            ..Usage::default()
        }));
    }
    Ok(())
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    error: Option<ApiError>,
    #[serde(default)]
    data: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    results: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    meta: Option<Meta>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default, deserialize_with = "count")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    total_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    billed_units: Option<Billed>,
}

#[derive(Deserialize)]
struct Billed {
    #[serde(default, deserialize_with = "count")]
    input_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::super::{decode_body as decode, Dialect};
    use super::*;

    #[test]
    fn embeddings_give_items_and_prompt_tokens() {
        let body = br#"{"object":"list","data":[{"embedding":[0.1,0.2],"index":0},{"embedding":[0.3],"index":1}],"model":"m","usage":{"prompt_tokens":9,"total_tokens":9}}"#;
        let got = decode(Dialect::Embeddings, body).unwrap();
        assert_eq!(got[0], Record::Items(2));
        let Record::Usage(u) = &got[1] else {
            panic!("{got:?}")
        };
        assert_eq!(u.prompt_tokens, Some(9));
        assert_eq!(u.completion_tokens, None);
    }

    #[test]
    fn rerank_shapes_of_vllm_and_cohere() {
        let vllm = br#"{"id":"r","results":[{"index":1,"relevance_score":0.9},{"index":0,"relevance_score":0.1},{"index":2,"relevance_score":0.0}],"usage":{"total_tokens":31}}"#;
        let got = decode(Dialect::Rerank, vllm).unwrap();
        assert_eq!(got[0], Record::Items(3));
        assert!(matches!(&got[1], Record::Usage(u) if u.prompt_tokens == Some(31)));
        let cohere = br#"{"results":[{"index":0,"relevance_score":0.5}],"meta":{"billed_units":{"input_tokens":12,"search_units":1}}}"#;
        let got = decode(Dialect::Rerank, cohere).unwrap();
        assert!(matches!(&got[1], Record::Usage(u) if u.prompt_tokens == Some(12)));
    }

    #[test]
    fn an_error_body_is_an_error_and_a_stream_is_refused() {
        let got = decode(
            Dialect::Embeddings,
            br#"{"error":{"message":"too long","code":"400"}}"#,
        )
        .unwrap();
        assert!(matches!(&got[0], Record::Error { message, .. } if message.contains("too long")));
        let mut d = NotStreamed;
        let ev = SseEvent {
            event: None,
            data: "{}".into(),
            id: None,
            retry: None,
        };
        assert!(d.decode(&ev, &mut Vec::new()).is_err());
    }
}
