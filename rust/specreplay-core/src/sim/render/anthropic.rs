//! Anthropic's Messages API: `message_start` (input tokens), per content
//! block (`thinking`, `text`, `tool_use`) `content_block_start`, its
//! `content_block_delta`s (`thinking_delta`, `text_delta`,
//! `input_json_delta`) and `content_block_stop`, then `message_delta`
//! (`stop_reason`, output tokens) and `message_stop`.

use bytes::BytesMut;
use serde_json::{json, Value};

use super::blocks::BlockEvents;
use super::{write_event, Block, Renderer, Usage};
use crate::sim::script::{Finish, Texts};

/// Content blocks: `content_block_start`, `content_block_delta`s, `content_block_stop`.
pub(super) const BLOCK_EVENTS: BlockEvents = BlockEvents {
    start: Renderer::anthropic_block_start,
    delta: Renderer::anthropic_block_delta,
    stop: Renderer::anthropic_block_stop,
};

/// Anthropic's word for `finish`.
pub(super) fn stop_reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::ToolCalls => "tool_use",
    }
}

impl Renderer {
    fn anthropic_event(&self, buf: &mut BytesMut, kind: &str, mut ev: Value) {
        ev["type"] = kind.into();
        if let Some(us) = self.sent_us() {
            ev["sim_sent_us"] = us.into();
        }
        write_event(buf, kind, &ev);
    }

    pub(super) fn anthropic_open(&mut self, buf: &mut BytesMut, prompt_tokens: u32) {
        let message = json!({"id": self.id, "type": "message", "role": "assistant", "model": &*self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": 1}});
        self.anthropic_event(buf, "message_start", json!({"message": message}));
    }

    fn anthropic_block_start(&mut self, buf: &mut BytesMut, block: Block) {
        let start = match block {
            Block::Reasoning => json!({"type": "thinking", "thinking": ""}),
            Block::Tool => {
                let (id, name) = self
                    .tool
                    .as_ref()
                    .map_or(("", ""), |c| (c.id.as_str(), c.name.as_str()));
                json!({"type": "tool_use", "id": id, "name": name, "input": {}})
            }
            _ => json!({"type": "text", "text": ""}),
        };
        let index = self.state.blocks;
        self.anthropic_event(
            buf,
            "content_block_start",
            json!({"index": index, "content_block": start}),
        );
    }

    fn anthropic_block_delta(&mut self, buf: &mut BytesMut, block: Block, delta: &str) {
        let delta = match block {
            Block::Reasoning => json!({"type": "thinking_delta", "thinking": delta}),
            Block::Tool => json!({"type": "input_json_delta", "partial_json": delta}),
            _ => json!({"type": "text_delta", "text": delta}),
        };
        let index = self.state.blocks;
        self.anthropic_event(
            buf,
            "content_block_delta",
            json!({"index": index, "delta": delta}),
        );
    }

    fn anthropic_block_stop(&mut self, buf: &mut BytesMut) {
        let index = self.state.blocks;
        self.anthropic_event(buf, "content_block_stop", json!({"index": index}));
    }

    pub(super) fn anthropic_close(
        &mut self,
        buf: &mut BytesMut,
        stop: &str,
        usage: Usage,
        terminal: bool,
    ) {
        self.close_block(buf, &BLOCK_EVENTS);
        let delta = json!({"delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": usage.completion_tokens}});
        self.anthropic_event(buf, "message_delta", delta);
        if terminal {
            self.anthropic_event(buf, "message_stop", json!({}));
        }
    }

    pub(super) fn anthropic_body(&self, text: &Texts, finish: Finish, usage: Usage) -> Value {
        let mut content = Vec::new();
        if !text.reasoning.is_empty() {
            content.push(json!({"type": "thinking", "thinking": text.reasoning, "signature": ""}));
        }
        if !text.content.is_empty() {
            content.push(json!({"type": "text", "text": text.content}));
        }
        if let Some(call) = &self.tool {
            // Cut arguments are no JSON value: then the input is their text.
            let input = serde_json::from_str::<Value>(&text.args)
                .unwrap_or_else(|_| text.args.clone().into());
            content.push(
                json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}),
            );
        }
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": &*self.model,
            "content": content, "stop_reason": stop_reason(finish), "stop_sequence": null,
            "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens},
        })
    }
}
