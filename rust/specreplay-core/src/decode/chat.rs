//! OpenAI Chat Completions chunks, as sent by vLLM, SGLang, llama.cpp,
//! Ollama, DeepSeek, OpenRouter and OpenAI itself.
//!
//! The envelope (error, choices, usage, timings) is shared with the legacy
//! Completions dialect, which differs only in where a choice keeps its text.

use std::fmt;

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;

use super::json::{self, count, ApiError};
use super::{Channel, DecodeError, Record, StreamDecoder, Timings, Usage};
use crate::sse::SseEvent;

pub(super) struct ChatDecoder;

impl StreamDecoder for ChatDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<Record>) -> Result<(), DecodeError> {
        if json::is_done(&event.data) {
            out.push(Record::Done);
            return Ok(());
        }
        decode_envelope(&event.data, out, chat_texts)
    }
}

pub(super) fn decode_body(body: &str, out: &mut Vec<Record>) -> Result<(), DecodeError> {
    decode_envelope(body, out, chat_texts)
}

/// A streamed `delta` and a whole-body `message` have the same fields.
fn chat_texts(choice: Choice, out: &mut Vec<Record>) {
    let Some(m) = choice.delta.or(choice.message) else {
        return;
    };
    // vLLM sent the same text under both names while renaming
    // `reasoning_content` to `reasoning`; counting it twice would double
    // the reasoning tokens. Different texts are both real output.
    let reasoning = match (m.reasoning_content, m.reasoning) {
        (Some(a), Some(b)) if a == b => [Some(a), None],
        (a, b) => [a, b],
    };
    for text in reasoning {
        json::push_text(out, Channel::Reasoning, text);
    }
    json::push_text(out, Channel::Content, m.content);
    for call in m.tool_calls.into_iter().flatten() {
        let (name, arguments) = call
            .function
            .map_or((None, None), |f| (f.name, f.arguments));
        json::push_tool_call(out, call.id, name);
        json::push_text(out, Channel::Tool, arguments);
    }
}

/// Decodes one OpenAI-style payload; `texts` pulls the text out of a choice.
pub(super) fn decode_envelope(
    payload: &str,
    out: &mut Vec<Record>,
    texts: fn(Choice, &mut Vec<Record>),
) -> Result<(), DecodeError> {
    let chunk: Chunk = json::parse(payload)?;
    if let Some(err) = chunk.error {
        out.push(err.into_record());
    } else if chunk.object.is_some_and(|o| o.0) {
        // Older vLLM streamed its ErrorResponse unwrapped.
        out.push(ApiError::new(chunk.message, chunk.kind, chunk.code).into_record());
    }
    for mut choice in chunk.choices.into_iter().flatten() {
        let finish = choice.finish_reason.take();
        texts(choice, out);
        if let Some(reason) = finish.filter(|r| !r.is_empty()) {
            out.push(Record::Finish { reason });
        }
    }
    if let Some(usage) = chunk.usage {
        out.push(Record::Usage(usage.into()));
    }
    if let Some(t) = chunk.timings {
        out.push(Record::Timings(Timings {
            prompt_n: t.prompt_n,
            prompt_ms: t.prompt_ms,
            predicted_n: t.predicted_n,
            predicted_ms: t.predicted_ms,
        }));
    }
    Ok(())
}

#[derive(Deserialize)]
pub(super) struct Chunk {
    #[serde(default)]
    error: Option<ApiError>,
    /// On every chunk, and only compared: read without allocating.
    #[serde(default)]
    object: Option<IsErrorObject>,
    #[serde(default, deserialize_with = "json::scalar")]
    message: Option<String>,
    #[serde(default, rename = "type", deserialize_with = "json::scalar")]
    kind: Option<String>,
    #[serde(default, deserialize_with = "json::scalar")]
    code: Option<String>,
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    timings: Option<WireTimings>,
}

/// Whether `object` is `"error"`. serde's `Option<Cow<str>>` allocates the
/// string even with `borrow` (serde borrows a `Cow` only when it is not
/// inside an `Option`), and this field is on every chunk; any string is
/// accepted, anything else is the same shape error a `String` gives.
struct IsErrorObject(bool);

impl<'de> Deserialize<'de> for IsErrorObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IsErrorObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E>(self, v: &str) -> Result<IsErrorObject, E> {
                Ok(IsErrorObject(v == "error"))
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Deserialize)]
pub(super) struct Choice {
    #[serde(default)]
    delta: Option<Message>,
    #[serde(default)]
    message: Option<Message>,
    /// Completions dialect only.
    #[serde(default)]
    pub(super) text: Option<String>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
}

#[derive(Deserialize)]
struct ToolCall {
    #[serde(default, deserialize_with = "json::scalar")]
    id: Option<String>,
    #[serde(default)]
    function: Option<Function>,
}

#[derive(Deserialize)]
struct Function {
    #[serde(default, deserialize_with = "json::scalar")]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "count")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    completion_tokens: Option<u64>,
    /// SGLang reports reasoning tokens at the top level.
    #[serde(default, deserialize_with = "count")]
    reasoning_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    /// DeepSeek's name for cached prompt tokens.
    #[serde(default, deserialize_with = "count")]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default, deserialize_with = "count")]
    reasoning_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default, deserialize_with = "count")]
    cached_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            reasoning_tokens: u
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens)
                .or(u.reasoning_tokens),
            cached_tokens: u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .or(u.prompt_cache_hit_tokens),
        }
    }
}

#[derive(Deserialize)]
struct WireTimings {
    #[serde(default, deserialize_with = "count")]
    prompt_n: Option<u64>,
    #[serde(default)]
    prompt_ms: Option<f64>,
    #[serde(default, deserialize_with = "count")]
    predicted_n: Option<u64>,
    #[serde(default)]
    predicted_ms: Option<f64>,
}

#[cfg(test)]
mod tests;
