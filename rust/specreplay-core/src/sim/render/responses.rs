//! OpenAI's Responses API: `response.created`, then per output item
//! (`reasoning`, `message`, `function_call`) `response.output_item.added`,
//! its deltas (`response.reasoning_text.delta`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`) and `response.output_item.done`,
//! then `response.completed` (or `response.incomplete`) with the usage.
//! The `*.done` events that repeat a whole text are left out, and the
//! terminal event's `output` is empty: the deltas carry the text.

use bytes::BytesMut;
use serde_json::{json, Value};

use super::blocks::BlockEvents;
use super::{finish_status, write_event, Block, Renderer, Usage};
use crate::sim::script::{Finish, Texts};

/// Output items: `response.output_item.added` (and a message's
/// `response.content_part.added`), the item's deltas, `response.output_item.done`.
pub(super) const BLOCK_EVENTS: BlockEvents = BlockEvents {
    start: Renderer::responses_item_start,
    delta: Renderer::responses_item_delta,
    stop: Renderer::responses_item_stop,
};

impl Renderer {
    fn responses_event(&mut self, buf: &mut BytesMut, kind: &str, mut ev: Value) {
        ev["type"] = kind.into();
        ev["sequence_number"] = self.next_seq().into();
        if let Some(us) = self.sent_us() {
            ev["sim_sent_us"] = us.into();
        }
        write_event(buf, kind, &ev);
    }

    fn response_object(&self, status: &str, reason: Option<&str>, usage: Option<Usage>) -> Value {
        json!({
            "id": self.id, "object": "response", "created_at": self.created, "model": &*self.model,
            "status": status, "output": [],
            "incomplete_details": reason.map(|r| json!({"reason": r})),
            "usage": usage.map(responses_usage),
        })
    }

    pub(super) fn responses_open(&mut self, buf: &mut BytesMut) {
        let response = self.response_object("in_progress", None, None);
        self.responses_event(buf, "response.created", json!({"response": response}));
        let response = self.response_object("in_progress", None, None);
        self.responses_event(buf, "response.in_progress", json!({"response": response}));
    }

    fn item(&self, block: Block) -> Value {
        let n = self.state.blocks;
        match block {
            Block::Reasoning => json!({"id": format!("rs_{}_{n}", self.id), "type": "reasoning",
                "summary": [], "content": []}),
            Block::Tool => {
                let (id, name) = self
                    .tool
                    .as_ref()
                    .map_or(("", ""), |c| (c.id.as_str(), c.name.as_str()));
                json!({"id": format!("fc_{}_{n}", self.id), "type": "function_call",
                    "status": "in_progress", "call_id": id, "name": name, "arguments": ""})
            }
            _ => {
                json!({"id": format!("msg_{}_{n}", self.id), "type": "message", "role": "assistant",
                "status": "in_progress", "content": []})
            }
        }
    }

    fn responses_item_start(&mut self, buf: &mut BytesMut, block: Block) {
        let (index, item) = (self.state.blocks, self.item(block));
        let item_id = item["id"].clone();
        self.responses_event(
            buf,
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        if block == Block::Text {
            self.responses_event(
                buf,
                "response.content_part.added",
                json!({"item_id": item_id,
                "output_index": index, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []}}),
            );
        }
    }

    fn responses_item_delta(&mut self, buf: &mut BytesMut, block: Block, delta: &str) {
        let kind = match block {
            Block::Reasoning => "response.reasoning_text.delta",
            Block::Tool => "response.function_call_arguments.delta",
            _ => "response.output_text.delta",
        };
        let item_id = self.item(block)["id"].clone();
        let index = self.state.blocks;
        self.responses_event(
            buf,
            kind,
            json!({"item_id": item_id, "output_index": index,
            "content_index": 0, "delta": delta}),
        );
    }

    fn responses_item_stop(&mut self, buf: &mut BytesMut) {
        let mut item = self.item(self.state.open);
        item["status"] = "completed".into();
        let index = self.state.blocks;
        self.responses_event(
            buf,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }

    pub(super) fn responses_close(
        &mut self,
        buf: &mut BytesMut,
        (status, reason): (&str, Option<&str>),
        usage: Usage,
        terminal: bool,
    ) {
        self.close_block(buf, &BLOCK_EVENTS);
        if terminal {
            let kind = if status == "completed" {
                "response.completed"
            } else {
                "response.incomplete"
            };
            let response = self.response_object(status, reason, Some(usage));
            self.responses_event(buf, kind, json!({"response": response}));
        }
    }

    pub(super) fn responses_body(&self, text: &Texts, finish: Finish, usage: Usage) -> Value {
        let (status, reason) = finish_status(finish);
        let mut body = self.response_object(status, reason, Some(usage));
        let mut output = Vec::new();
        if !text.reasoning.is_empty() {
            output.push(
                json!({"id": format!("rs_{}_0", self.id), "type": "reasoning", "summary": [],
                "content": [{"type": "reasoning_text", "text": text.reasoning}]}),
            );
        }
        if !text.content.is_empty() {
            output.push(
                json!({"id": format!("msg_{}_1", self.id), "type": "message", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text.content, "annotations": []}]}),
            );
        }
        if let Some(call) = &self.tool {
            output.push(json!({"id": format!("fc_{}_1", self.id), "type": "function_call",
                "status": "completed", "call_id": call.id, "name": call.name, "arguments": text.args}));
        }
        body["output"] = output.into();
        body
    }
}

/// Usage in the Responses fields.
fn responses_usage(u: Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached()},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning()},
        "total_tokens": u.total_tokens,
    })
}
