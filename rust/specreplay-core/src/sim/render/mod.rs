//! JSON of the answers in each dialect: `openai` (chat and completions,
//! shaped like vLLM's), `responses` (OpenAI's Responses API), `anthropic`
//! (the Messages API). Stream events are written straight into a reused
//! `BytesMut`. The `Renderer` is the one face the stream and the full answer
//! see; a dialect whose events open and close blocks (Responses items,
//! Anthropic content blocks) keeps where it is in a small `StreamState`.

mod anthropic;
mod blocks;
mod openai;
mod responses;

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use serde::Serialize;

use super::request::Endpoint;
use super::script::{Finish, TextLayout, Texts};
use super::structured::ToolCall;

/// Token counts, as in the OpenAI `usage` object (the other dialects
/// render the same numbers in their own fields).
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionDetails>,
    /// Prompt tokens served from the prefix cache, when the capacity model
    /// keeps one (vLLM's `--enable-prompt-tokens-details`): without it a
    /// client cannot tell a cache hit from a short prefill, and `calibrate`
    /// cannot fit what a hit costs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct CompletionDetails {
    pub reasoning_tokens: u32,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct PromptDetails {
    pub cached_tokens: u32,
}

impl Usage {
    /// Counts so far; `reasoning` adds `completion_tokens_details`.
    pub fn new(prompt: u32, completion: u32, reasoning: Option<u32>) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            completion_tokens_details: reasoning
                .map(|reasoning_tokens| CompletionDetails { reasoning_tokens }),
            prompt_tokens_details: None,
        }
    }

    /// With the prompt's cached tokens (`None`: no prefix cache, not reported).
    pub fn with_cached(self, cached: Option<u32>) -> Usage {
        Usage {
            prompt_tokens_details: cached.map(|cached_tokens| PromptDetails { cached_tokens }),
            ..self
        }
    }

    fn cached(&self) -> u32 {
        self.prompt_tokens_details.map_or(0, |d| d.cached_tokens)
    }

    fn reasoning(&self) -> u32 {
        self.completion_tokens_details
            .map_or(0, |d| d.reasoning_tokens)
    }
}

/// What an answer's stream is in the middle of (Responses output items,
/// Anthropic content blocks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Block {
    #[default]
    None,
    Reasoning,
    Text,
    Tool,
}

/// Where a stream is: the open block, how many were opened, the next
/// Responses `sequence_number`. `Copy`, so a fault can render a step twice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamState {
    open: Block,
    blocks: u32,
    seq: u64,
}

/// What stays the same over every chunk of one answer.
pub struct Renderer {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: Arc<str>,
    /// `Some(key)` streams chat reasoning under `key`; `None` folds it into content.
    pub reasoning_key: Option<&'static str>,
    pub send_timestamps: bool,
    /// The tool call the answer makes, if it does.
    pub tool: Option<ToolCall>,
    pub state: StreamState,
}

impl Renderer {
    /// Where the answer's text goes: apart for chat with a reasoning key and
    /// for the dialects with reasoning items or blocks, inline otherwise
    /// (with think tags in chat).
    pub fn layout(&self) -> TextLayout {
        match (self.endpoint, self.reasoning_key) {
            (Endpoint::Chat, Some(_)) | (Endpoint::Responses | Endpoint::Messages, _) => {
                TextLayout::Split
            }
            (Endpoint::Chat, None) => TextLayout::Inline { think_tags: true },
            (Endpoint::Completions, _) => TextLayout::Inline { think_tags: false },
        }
    }

    /// Whether usage reports reasoning tokens: only a server that tells
    /// reasoning from answer can.
    pub fn reports_reasoning(&self) -> bool {
        self.layout() == TextLayout::Split
    }

    /// The first events, before any token (chat's role chunk, Responses'
    /// `response.created`, Anthropic's `message_start`).
    pub fn open(&mut self, buf: &mut BytesMut, usage: Option<Usage>, prompt_tokens: u32) {
        match self.endpoint {
            Endpoint::Chat => self.role_chunk(buf, usage),
            Endpoint::Completions => {}
            Endpoint::Responses => self.responses_open(buf),
            Endpoint::Messages => self.anthropic_open(buf, prompt_tokens),
        }
    }

    /// One decode step's text; `finish` on the last step (chat and
    /// completions carry it there; the others in `close`).
    pub fn step(
        &mut self,
        buf: &mut BytesMut,
        text: &Texts,
        finish: Option<Finish>,
        usage: Option<Usage>,
    ) {
        match self.endpoint {
            Endpoint::Chat | Endpoint::Completions => {
                let finish = finish.map(Finish::as_str);
                self.text_chunk(buf, text, finish, usage);
            }
            Endpoint::Responses => self.block_step(buf, text, &responses::BLOCK_EVENTS),
            Endpoint::Messages => self.block_step(buf, text, &anthropic::BLOCK_EVENTS),
        }
    }

    /// The events after the last token: usage (chat only if asked), the end
    /// of the open block and the terminal event (`[DONE]`,
    /// `response.completed`, `message_stop`) unless `terminal` is off (the
    /// `missing_done` fault).
    pub fn close(
        &mut self,
        buf: &mut BytesMut,
        finish: Finish,
        usage: Usage,
        include_usage: bool,
        terminal: bool,
    ) {
        match self.endpoint {
            Endpoint::Chat | Endpoint::Completions => {
                if include_usage {
                    self.usage_chunk(buf, usage);
                }
                if terminal {
                    Renderer::done(buf);
                }
            }
            Endpoint::Responses => {
                self.responses_close(buf, finish_status(finish), usage, terminal)
            }
            Endpoint::Messages => {
                self.anthropic_close(buf, anthropic::stop_reason(finish), usage, terminal)
            }
        }
    }

    /// The server is going away: the stream ends with vLLM's `abort` as its
    /// finish reason (a Responses `incomplete` status with reason `abort`,
    /// an Anthropic `stop_reason` `abort`).
    pub fn abort(&mut self, buf: &mut BytesMut, usage: Usage, continuous: bool) {
        match self.endpoint {
            Endpoint::Chat | Endpoint::Completions => {
                let usage = continuous.then_some(usage);
                self.text_chunk(buf, &Texts::default(), Some("abort"), usage);
                Renderer::done(buf);
            }
            Endpoint::Responses => {
                self.responses_close(buf, ("incomplete", Some("abort")), usage, true)
            }
            Endpoint::Messages => self.anthropic_close(buf, "abort", usage, true),
        }
    }

    /// The event a server sends when it fails a stream it already started.
    pub fn error_event(&mut self, buf: &mut BytesMut) {
        let message = "simulated overload";
        match self.endpoint {
            Endpoint::Chat | Endpoint::Completions => {
                // vLLM's way.
                buf.put_slice(b"data: ");
                buf.put_slice(&error_body(message, "server_error", 503));
                buf.put_slice(b"\n\n");
                Renderer::done(buf);
            }
            Endpoint::Responses => {
                let seq = self.next_seq();
                let ev = serde_json::json!({"type": "error", "code": "server_error",
                    "message": message, "param": null, "sequence_number": seq});
                write_event(buf, "error", &ev);
            }
            Endpoint::Messages => {
                let ev = serde_json::json!({"type": "error",
                    "error": {"type": "overloaded_error", "message": message}});
                write_event(buf, "error", &ev);
            }
        }
    }

    /// A whole non-streaming answer.
    pub fn full_body(&self, text: &Texts, finish: Finish, usage: Usage) -> Vec<u8> {
        let body = match self.endpoint {
            Endpoint::Chat | Endpoint::Completions => self.openai_body(text, finish, usage),
            Endpoint::Responses => self.responses_body(text, finish, usage),
            Endpoint::Messages => self.anthropic_body(text, finish, usage),
        };
        serde_json::to_vec(&body).expect("serializing a response into memory cannot fail")
    }

    fn next_seq(&mut self) -> u64 {
        self.state.seq += 1;
        self.state.seq - 1
    }

    fn sent_us(&self) -> Option<i64> {
        self.send_timestamps.then(crate::clock::now_us)
    }
}

/// A Responses status and `incomplete_details.reason` for `finish`.
fn finish_status(finish: Finish) -> (&'static str, Option<&'static str>) {
    match finish {
        Finish::Stop | Finish::ToolCalls => ("completed", None),
        Finish::Length => ("incomplete", Some("max_output_tokens")),
    }
}

/// `event: NAME` and `data: JSON`, as the Responses and Anthropic streams send them.
fn write_event(buf: &mut BytesMut, name: &str, data: &serde_json::Value) {
    buf.put_slice(b"event: ");
    buf.put_slice(name.as_bytes());
    buf.put_slice(b"\ndata: ");
    serde_json::to_writer(buf.writer(), data)
        .expect("serializing an event into memory cannot fail");
    buf.put_slice(b"\n\n");
}

/// `{"error": {...}}` as OpenAI-compatible servers send it.
pub fn error_body(message: &str, kind: &str, code: u16) -> Vec<u8> {
    let body = serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    serde_json::to_vec(&body).expect("serializing an error into memory cannot fail")
}

/// `{"type": "error", "error": {...}}` as Anthropic's Messages API sends it.
pub fn anthropic_error_body(message: &str, kind: &str) -> Vec<u8> {
    let body = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
    serde_json::to_vec(&body).expect("serializing an error into memory cannot fail")
}

/// The `/v1/models` listing: every served name.
pub fn models_body<'a>(
    models: impl IntoIterator<Item = &'a str>,
    created: u64,
    max_model_len: u32,
) -> Vec<u8> {
    let data: Vec<serde_json::Value> = models
        .into_iter()
        .map(|model| {
            serde_json::json!({
                "id": model, "object": "model", "created": created, "owned_by": "specreplay",
                "root": model, "parent": null, "max_model_len": max_model_len,
            })
        })
        .collect();
    let body = serde_json::json!({"object": "list", "data": data});
    serde_json::to_vec(&body).expect("serializing a listing into memory cannot fail")
}
