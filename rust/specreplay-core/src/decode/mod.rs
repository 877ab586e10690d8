//! Decoders that turn SSE events of one API dialect into typed [`Record`]s.
//!
//! Each dialect lives in its own file behind [`StreamDecoder`]; the JSON
//! plumbing they share (error mapping, lenient numbers, error payloads) is in
//! `json.rs`. Records carry only what a benchmark measures: text per channel,
//! token counts, server timings, finish reason, errors, and the end marker.

mod anthropic;
mod chat;
mod completions;
mod json;
mod responses;
mod retrieval;
pub mod summary;

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;
use thiserror::Error;

use crate::sse::{SseError, SseEvent, SseParser};

/// Also a configuration value (e.g. the capture proxy's `apis`), by the
/// names [`Dialect::as_str`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    Chat,
    Completions,
    Responses,
    Anthropic,
    /// `/v1/embeddings`: one JSON answer, never streamed.
    Embeddings,
    /// `/v1/rerank` (vLLM, Jina, Cohere shapes): one JSON answer, never streamed.
    Rerank,
}

impl Dialect {
    pub const ALL: [Dialect; 6] = [
        Dialect::Chat,
        Dialect::Completions,
        Dialect::Responses,
        Dialect::Anthropic,
        Dialect::Embeddings,
        Dialect::Rerank,
    ];

    /// Whether the API answers with one JSON body and no output tokens
    /// (embeddings, rerank): no TTFT or TPOT to measure.
    pub fn is_retrieval(&self) -> bool {
        matches!(self, Dialect::Embeddings | Dialect::Rerank)
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Dialect::Chat => "chat",
            Dialect::Completions => "completions",
            Dialect::Responses => "responses",
            Dialect::Anthropic => "anthropic",
            Dialect::Embeddings => "embeddings",
            Dialect::Rerank => "rerank",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("unknown dialect {name:?}: expected one of chat, completions, responses, anthropic, embeddings, rerank")]
pub struct UnknownDialect {
    pub name: String,
}

impl FromStr for Dialect {
    type Err = UnknownDialect;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| UnknownDialect { name: s.to_owned() })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    Reasoning,
    Content,
    Tool,
}

/// Token counts as the server reported them in one payload.
///
/// Every field is the server's cumulative count so far, and a payload may
/// carry only some of them (Anthropic's `message_delta` has output tokens
/// only), so consumers combine records with [`Usage::merge`] rather than
/// keeping only the last one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    /// Output tokens including reasoning tokens.
    pub completion_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
}

impl Usage {
    /// Overlays a later report: fields it has replace ours, fields it lacks keep ours.
    pub fn merge(&mut self, newer: &Usage) {
        fn take(old: &mut Option<u64>, new: Option<u64>) {
            if new.is_some() {
                *old = new;
            }
        }
        take(&mut self.prompt_tokens, newer.prompt_tokens);
        take(&mut self.completion_tokens, newer.completion_tokens);
        take(&mut self.reasoning_tokens, newer.reasoning_tokens);
        take(&mut self.cached_tokens, newer.cached_tokens);
    }
}

/// llama.cpp's server-side `timings` object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timings {
    pub prompt_n: Option<u64>,
    pub prompt_ms: Option<f64>,
    pub predicted_n: Option<u64>,
    pub predicted_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Text {
        channel: Channel,
        text: String,
    },
    Usage(Usage),
    Timings(Timings),
    Finish {
        reason: String,
    },
    /// An error payload inside a stream (or an error body).
    Error {
        message: String,
        code: Option<String>,
    },
    /// A tool call starts (its id and function name, as far as the server
    /// gave them); the `Tool` text records after it are its arguments.
    ToolCall {
        id: Option<String>,
        name: Option<String>,
    },
    /// How many items a non-streamed answer carries: embeddings returned,
    /// documents scored.
    Items(u64),
    /// The server said the stream is complete. Its absence at EOF means the
    /// stream was cut short.
    Done,
}

pub trait StreamDecoder: Send {
    /// Appends the records carried by one event, in payload order.
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<Record>) -> Result<(), DecodeError>;
}

#[derive(Debug, Error, Clone, PartialEq)]
pub enum DecodeError {
    #[error("invalid JSON in stream event: {message} (payload starts {snippet:?})")]
    InvalidJson { message: String, snippet: String },
    #[error("unexpected payload shape: {message}")]
    UnexpectedShape { message: String },
}

/// A whole recorded stream that did not decode: its SSE framing, or an
/// event's payload. Its own type, not `CoreError`, so that this module needs
/// nothing above it (`error.rs` turns it into `CoreError::Sse` or
/// `CoreError::Decode`).
#[derive(Debug, Error, Clone, PartialEq)]
pub enum StreamError {
    #[error(transparent)]
    Sse(#[from] SseError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

pub fn decoder_for(dialect: Dialect) -> Box<dyn StreamDecoder> {
    match dialect {
        Dialect::Chat => Box::new(chat::ChatDecoder),
        Dialect::Completions => Box::new(completions::CompletionsDecoder),
        Dialect::Responses => Box::<responses::ResponsesDecoder>::default(),
        Dialect::Anthropic => Box::new(anthropic::AnthropicDecoder),
        Dialect::Embeddings | Dialect::Rerank => Box::new(retrieval::NotStreamed),
    }
}

/// Decode a whole non-streaming JSON response body of that dialect into the same records (text, usage, finish).
///
/// No `Done` is emitted: a body that parsed is complete by construction.
pub fn decode_body(dialect: Dialect, body: &[u8]) -> Result<Vec<Record>, DecodeError> {
    let body = json::body_str(body)?;
    let mut out = Vec::new();
    match dialect {
        Dialect::Chat => chat::decode_body(body, &mut out)?,
        Dialect::Completions => completions::decode_body(body, &mut out)?,
        Dialect::Responses => responses::decode_body(body, &mut out)?,
        Dialect::Anthropic => anthropic::decode_body(body, &mut out)?,
        Dialect::Embeddings | Dialect::Rerank => retrieval::decode_body(body, &mut out)?,
    }
    Ok(out)
}

/// Parses and decodes a complete recorded stream, including an unterminated
/// last event (so a truncated stream shows as records without `Done`).
pub fn decode_all(dialect: Dialect, bytes: &[u8]) -> Result<Vec<Record>, StreamError> {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    parser.feed(bytes, &mut events)?;
    events.extend(parser.finish()?);
    let mut decoder = decoder_for(dialect);
    let mut records = Vec::new();
    for event in &events {
        decoder.decode(event, &mut records)?;
    }
    Ok(records)
}

#[cfg(test)]
pub(crate) mod test_util;
