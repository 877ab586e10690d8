//! OpenAI Responses API stream events (`response.*`, `error`).
//!
//! Most events are bookkeeping (item added, part done, …) whose payloads vary
//! by type, so the nested `response` and `error` objects are kept as raw JSON
//! and only parsed for the few events that need them; a delta event, the hot
//! path, is read in one pass.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::json::{self, count, ApiError};
use super::{Channel, DecodeError, Record, StreamDecoder, Usage};
use crate::sse::SseEvent;

/// The Responses stream decoder. Its wire has no finish reason for a tool
/// call (the status is `completed` either way), so it remembers whether the
/// response made one: such a response finishes `tool_calls`, as chat's does.
#[derive(Default)]
pub(super) struct ResponsesDecoder {
    called: bool,
}

impl StreamDecoder for ResponsesDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<Record>) -> Result<(), DecodeError> {
        let ev: Event = json::parse(&event.data)?;
        let kind = ev.kind.as_deref().or(event.event.as_deref()).unwrap_or("");
        match kind {
            "response.output_text.delta" => json::push_text(out, Channel::Content, ev.delta),
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                json::push_text(out, Channel::Reasoning, ev.delta)
            }
            "response.output_item.added" => {
                if let Some(raw) = ev.item {
                    let item: OutputItem = json::parse(raw.get())?;
                    if item.kind.as_deref() == Some("function_call") {
                        self.called = true;
                        json::push_tool_call(out, item.call_id, item.name);
                    }
                }
            }
            "response.function_call_arguments.delta" => {
                json::push_text(out, Channel::Tool, ev.delta)
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let resp: Response = match ev.response {
                    Some(raw) => json::parse(raw.get())?,
                    None => Response::default(),
                };
                push_usage(&resp, out);
                let called = self.called || resp.has_function_call();
                push_outcome(&kind["response.".len()..], called, resp, out);
                out.push(Record::Done);
            }
            "error" => {
                let err = match ev.error {
                    Some(raw) => json::parse(raw.get())?,
                    None => ApiError::new(ev.message, None, ev.code),
                };
                out.push(err.into_record());
                out.push(Record::Done);
            }
            _ => {}
        }
        Ok(())
    }
}

pub(super) fn decode_body(body: &str, out: &mut Vec<Record>) -> Result<(), DecodeError> {
    let mut resp: Response = json::parse(body)?;
    let called = resp.has_function_call();
    for item in resp.output.take().into_iter().flatten() {
        let channel = match item.kind.as_deref() {
            Some("reasoning") => Channel::Reasoning,
            Some("message") => Channel::Content,
            Some("function_call") => {
                json::push_tool_call(out, item.call_id, item.name);
                json::push_text(out, Channel::Tool, item.arguments);
                continue;
            }
            _ => continue,
        };
        for part in item.content.into_iter().chain(item.summary).flatten() {
            if matches!(
                part.kind.as_deref(),
                Some("output_text" | "reasoning_text" | "summary_text")
            ) {
                json::push_text(out, channel, part.text);
            }
        }
    }
    push_usage(&resp, out);
    // An HTTP error body is `{"error": …}` with no status: report it as a failure.
    let status = match resp.status.take() {
        Some(s) => s,
        None if resp.error.is_some() => "failed".into(),
        None => String::new(),
    };
    push_outcome(&status, called, resp, out);
    Ok(())
}

fn push_usage(resp: &Response, out: &mut Vec<Record>) {
    if let Some(u) = &resp.usage {
        out.push(Record::Usage(Usage {
            prompt_tokens: u.input_tokens,
            completion_tokens: u.output_tokens,
            reasoning_tokens: u
                .output_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens),
            cached_tokens: u
                .input_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens),
        }));
    }
}

/// Finish or error for a terminal status, shared by streams (status from the
/// event name) and bodies (status from the object). A completed response
/// that `called` a function finishes `tool_calls`, else `stop`.
fn push_outcome(status: &str, called: bool, resp: Response, out: &mut Vec<Record>) {
    match status {
        "completed" => out.push(Record::Finish {
            reason: if called { "tool_calls" } else { "stop" }.into(),
        }),
        "incomplete" => {
            let reason = resp
                .incomplete_details
                .and_then(|d| d.reason)
                .filter(|r| !r.is_empty());
            out.push(Record::Finish {
                reason: reason.unwrap_or_else(|| "incomplete".into()),
            });
        }
        "failed" => {
            let err = resp
                .error
                .unwrap_or_else(|| ApiError::new(Some("response failed".into()), None, None));
            out.push(err.into_record());
        }
        _ => {}
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "json::scalar")]
    delta: Option<String>,
    #[serde(default, borrow)]
    response: Option<&'a RawValue>,
    /// `response.output_item.added` only: the item begun.
    #[serde(default, borrow)]
    item: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "json::scalar")]
    code: Option<String>,
    #[serde(default, deserialize_with = "json::scalar")]
    message: Option<String>,
}

#[derive(Deserialize, Default)]
struct Response {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    error: Option<ApiError>,
    #[serde(default)]
    output: Option<Vec<OutputItem>>,
}

impl Response {
    fn has_function_call(&self) -> bool {
        self.output
            .iter()
            .flatten()
            .any(|item| item.kind.as_deref() == Some("function_call"))
    }
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "count")]
    input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default, deserialize_with = "count")]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default, deserialize_with = "count")]
    reasoning_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
struct OutputItem {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    content: Option<Vec<Part>>,
    #[serde(default)]
    summary: Option<Vec<Part>>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default, deserialize_with = "json::scalar")]
    call_id: Option<String>,
    #[serde(default, deserialize_with = "json::scalar")]
    name: Option<String>,
}

#[derive(Deserialize)]
struct Part {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

#[cfg(test)]
mod tests;
