//! Anthropic Messages API stream events.
//!
//! Usage arrives in two parts: `message_start` has the input side (and an
//! early output count), each `message_delta` the cumulative output count, so
//! both are emitted as they come and consumers merge them.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::json::{self, count, ApiError};
use super::{Channel, DecodeError, Record, StreamDecoder, Usage};
use crate::sse::SseEvent;

pub(super) struct AnthropicDecoder;

impl StreamDecoder for AnthropicDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<Record>) -> Result<(), DecodeError> {
        let ev: Event = json::parse(&event.data)?;
        let kind = ev.kind.as_deref().or(event.event.as_deref()).unwrap_or("");
        match kind {
            "message_start" => {
                if let Some(raw) = ev.message {
                    let msg: Message = json::parse(raw.get())?;
                    push_usage(msg.usage, out);
                }
            }
            "content_block_delta" => {
                let Some(d) = ev.delta else { return Ok(()) };
                match d.kind.as_deref() {
                    Some("text_delta") => json::push_text(out, Channel::Content, d.text),
                    Some("thinking_delta") => json::push_text(out, Channel::Reasoning, d.thinking),
                    Some("input_json_delta") => json::push_text(out, Channel::Tool, d.partial_json),
                    // signature_delta closes a thinking block: no generated text.
                    _ => {}
                }
            }
            "content_block_start" => {
                if let Some(block) = ev
                    .content_block
                    .filter(|b| b.kind.as_deref() == Some("tool_use"))
                {
                    json::push_tool_call(out, block.id, block.name);
                }
            }
            "message_delta" => {
                push_finish(ev.delta.and_then(|d| d.stop_reason), out);
                push_usage(ev.usage, out);
            }
            "message_stop" => out.push(Record::Done),
            "error" => {
                let err = ev
                    .error
                    .unwrap_or_else(|| ApiError::new(Some("error event".into()), None, None));
                out.push(err.into_record());
            }
            _ => {} // ping, content_block_stop, and future event types
        }
        Ok(())
    }
}

pub(super) fn decode_body(body: &str, out: &mut Vec<Record>) -> Result<(), DecodeError> {
    let msg: Message = json::parse(body)?;
    if let Some(err) = msg.error {
        out.push(err.into_record());
        return Ok(());
    }
    for block in msg.content.into_iter().flatten() {
        match block.kind.as_deref() {
            Some("text") => json::push_text(out, Channel::Content, block.text),
            Some("thinking") => json::push_text(out, Channel::Reasoning, block.thinking),
            // A body carries the tool input whole, as the JSON the stream would have spelled out.
            Some("tool_use") => {
                json::push_tool_call(out, block.id, block.name);
                json::push_text(
                    out,
                    Channel::Tool,
                    block.input.map(|raw| raw.get().to_owned()),
                )
            }
            _ => {}
        }
    }
    push_finish(msg.stop_reason, out);
    push_usage(msg.usage, out);
    Ok(())
}

fn push_finish(reason: Option<String>, out: &mut Vec<Record>) {
    if let Some(reason) = reason.filter(|r| !r.is_empty()) {
        out.push(Record::Finish { reason });
    }
}

fn push_usage(usage: Option<WireUsage>, out: &mut Vec<Record>) {
    if let Some(u) = usage {
        out.push(Record::Usage(Usage {
            prompt_tokens: u.input_tokens,
            completion_tokens: u.output_tokens,
            reasoning_tokens: None,
            cached_tokens: u.cache_read_input_tokens,
        }));
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    /// Only `message_start` has it; parsed there alone.
    #[serde(default, borrow)]
    message: Option<&'a RawValue>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<ApiError>,
    /// `content_block_start` only: a tool_use block names its call.
    #[serde(default, borrow)]
    content_block: Option<Block<'a>>,
}

/// Both delta kinds: a content block's (`type` + payload) and a message's (`stop_reason`).
#[derive(Deserialize)]
struct Delta<'a> {
    /// Only matched: borrowed, not allocated.
    #[serde(default, borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    partial_json: Option<String>,
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    content: Option<Vec<Block<'a>>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    error: Option<ApiError>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "json::scalar")]
    id: Option<String>,
    #[serde(default, deserialize_with = "json::scalar")]
    name: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "count")]
    input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    output_tokens: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    cache_read_input_tokens: Option<u64>,
}

#[cfg(test)]
mod tests;
