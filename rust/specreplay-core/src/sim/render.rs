//! JSON of the answers, shaped like vLLM's: stream chunks written straight
//! into a reused `BytesMut` with `serde_json::to_writer` (no intermediate
//! `Value`), and the non-streaming bodies.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::request::Endpoint;
use super::script::TextLayout;

/// Token counts, as in the OpenAI `usage` object.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct CompletionDetails {
    pub reasoning_tokens: u32,
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
        }
    }
}

/// A chat delta. The reasoning key is chosen at run time, hence by hand.
struct Delta<'a> {
    role: Option<&'a str>,
    reasoning_key: Option<&'static str>,
    reasoning: &'a str,
    content: Option<&'a str>,
}

impl Serialize for Delta<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if let Some(role) = self.role {
            m.serialize_entry("role", role)?;
        }
        if let Some(key) = self.reasoning_key.filter(|_| !self.reasoning.is_empty()) {
            m.serialize_entry(key, self.reasoning)?;
        }
        if let Some(content) = self.content {
            m.serialize_entry("content", content)?;
        }
        m.end()
    }
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize)]
struct TextChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize)]
struct Chunk<'a, C: Serialize> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: C,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sim_sent_us: Option<i64>,
}

/// What stays the same over every chunk of one answer.
pub struct Renderer {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: Arc<str>,
    /// `Some(key)` streams reasoning under `key`; `None` folds it into content.
    pub reasoning_key: Option<&'static str>,
    pub send_timestamps: bool,
}

impl Renderer {
    /// Where the answer's text goes: apart for chat with a reasoning key,
    /// inline otherwise (with think tags in chat).
    pub fn layout(&self) -> TextLayout {
        match (self.endpoint, self.reasoning_key) {
            (Endpoint::Chat, Some(_)) => TextLayout::Split,
            (Endpoint::Chat, None) => TextLayout::Inline { think_tags: true },
            (Endpoint::Completions, _) => TextLayout::Inline { think_tags: false },
        }
    }

    /// Whether usage reports `completion_tokens_details.reasoning_tokens`:
    /// only a server that tells reasoning from answer can.
    pub fn reports_reasoning(&self) -> bool {
        self.layout() == TextLayout::Split
    }

    fn object(&self) -> &'static str {
        match self.endpoint {
            Endpoint::Chat => "chat.completion.chunk",
            Endpoint::Completions => "text_completion",
        }
    }

    fn write<C: Serialize>(&self, buf: &mut BytesMut, choices: C, usage: Option<Usage>) {
        buf.put_slice(b"data: ");
        let chunk = Chunk {
            id: &self.id,
            object: self.object(),
            created: self.created,
            model: &self.model,
            choices,
            usage,
            sim_sent_us: self.send_timestamps.then(crate::clock::now_us),
        };
        serde_json::to_writer((&mut *buf).writer(), &chunk)
            .expect("serializing a chunk into memory cannot fail");
        buf.put_slice(b"\n\n");
    }

    /// The first chat chunk: `{"role":"assistant","content":""}`.
    pub fn role_chunk(&self, buf: &mut BytesMut, usage: Option<Usage>) {
        let delta = Delta {
            role: Some("assistant"),
            reasoning_key: None,
            reasoning: "",
            content: Some(""),
        };
        self.write(
            buf,
            [ChatChoice {
                index: 0,
                delta,
                logprobs: None,
                finish_reason: None,
            }],
            usage,
        );
    }

    /// One decode step's text. For chat, a delta holding `reasoning` and/or
    /// `content` (both at the phase boundary, as vLLM's reasoning parsers do);
    /// for completions only `content` is used.
    pub fn text_chunk(
        &self,
        buf: &mut BytesMut,
        reasoning: &str,
        content: &str,
        finish: Option<&str>,
        usage: Option<Usage>,
    ) {
        match self.endpoint {
            Endpoint::Chat => {
                let delta = Delta {
                    role: None,
                    reasoning_key: self.reasoning_key,
                    reasoning,
                    content: (!content.is_empty()).then_some(content),
                };
                self.write(
                    buf,
                    [ChatChoice {
                        index: 0,
                        delta,
                        logprobs: None,
                        finish_reason: finish,
                    }],
                    usage,
                );
            }
            Endpoint::Completions => {
                let choice = TextChoice {
                    index: 0,
                    text: content,
                    logprobs: None,
                    finish_reason: finish,
                };
                self.write(buf, [choice], usage);
            }
        }
    }

    /// The `stream_options.include_usage` chunk: no choices, the totals.
    pub fn usage_chunk(&self, buf: &mut BytesMut, usage: Usage) {
        self.write::<[ChatChoice<'_>; 0]>(buf, [], Some(usage));
    }

    pub fn done(buf: &mut BytesMut) {
        buf.put_slice(b"data: [DONE]\n\n");
    }

    /// A whole non-streaming answer.
    pub fn full_body(&self, reasoning: &str, content: &str, finish: &str, usage: Usage) -> Vec<u8> {
        let (object, choice) = match self.endpoint {
            Endpoint::Chat => {
                let mut message = serde_json::Map::new();
                message.insert("role".into(), "assistant".into());
                message.insert(
                    "content".into(),
                    if content.is_empty() {
                        serde_json::Value::Null
                    } else {
                        content.into()
                    },
                );
                if let Some(key) = self.reasoning_key {
                    let r = if reasoning.is_empty() {
                        serde_json::Value::Null
                    } else {
                        reasoning.into()
                    };
                    message.insert(key.into(), r);
                }
                let choice = serde_json::json!({
                    "index": 0, "message": message, "logprobs": null, "finish_reason": finish,
                });
                ("chat.completion", choice)
            }
            Endpoint::Completions => {
                let choice = serde_json::json!({
                    "index": 0, "text": content, "logprobs": null, "finish_reason": finish,
                });
                ("text_completion", choice)
            }
        };
        let body = serde_json::json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": &*self.model,
            "choices": [choice],
            "usage": usage,
        });
        serde_json::to_vec(&body).expect("serializing a response into memory cannot fail")
    }
}

/// `{"error": {...}}` as OpenAI-compatible servers send it.
pub fn error_body(message: &str, kind: &str, code: u16) -> Vec<u8> {
    let body = serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    serde_json::to_vec(&body).expect("serializing an error into memory cannot fail")
}

/// The `/v1/models` listing.
pub fn models_body(model: &str, created: u64, max_model_len: u32) -> Vec<u8> {
    let body = serde_json::json!({
        "object": "list",
        "data": [{
            "id": model, "object": "model", "created": created, "owned_by": "specreplay",
            "root": model, "parent": null, "max_model_len": max_model_len,
        }],
    });
    serde_json::to_vec(&body).expect("serializing a listing into memory cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn renderer(endpoint: Endpoint, key: Option<&'static str>, stamps: bool) -> Renderer {
        Renderer {
            endpoint,
            id: "chatcmpl-1".into(),
            created: 5,
            model: Arc::from("m"),
            reasoning_key: key,
            send_timestamps: stamps,
        }
    }

    fn events(buf: &BytesMut) -> Vec<Value> {
        let text = std::str::from_utf8(buf).unwrap();
        assert!(text.ends_with("\n\n"));
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn chat_chunks_have_vllm_shape() {
        let r = renderer(Endpoint::Chat, Some("reasoning_content"), false);
        let mut buf = BytesMut::new();
        r.role_chunk(&mut buf, None);
        r.text_chunk(&mut buf, " hmm", "", None, None);
        r.text_chunk(
            &mut buf,
            " so",
            " the",
            Some("stop"),
            Some(Usage::new(3, 2, None)),
        );
        r.usage_chunk(&mut buf, Usage::new(3, 3, Some(2)));
        let ev = events(&buf);
        assert_eq!(ev[0]["object"], "chat.completion.chunk");
        assert_eq!(
            ev[0]["choices"][0]["delta"],
            serde_json::json!({"role":"assistant","content":""})
        );
        assert_eq!(ev[0]["choices"][0]["finish_reason"], Value::Null);
        assert_eq!(
            ev[1]["choices"][0]["delta"],
            serde_json::json!({"reasoning_content":" hmm"})
        );
        assert_eq!(
            ev[2]["choices"][0]["delta"],
            serde_json::json!({"reasoning_content":" so","content":" the"})
        );
        assert_eq!(ev[2]["choices"][0]["finish_reason"], "stop");
        assert_eq!(ev[2]["usage"]["completion_tokens"], 2);
        assert_eq!(ev[3]["choices"], serde_json::json!([]));
        assert_eq!(
            ev[3]["usage"]["completion_tokens_details"]["reasoning_tokens"],
            2
        );
        assert_eq!(ev[3]["usage"]["total_tokens"], 6);
        assert!(ev.iter().all(|e| e.get("sim_sent_us").is_none()));
    }

    #[test]
    fn timestamps_and_completions() {
        let r = renderer(Endpoint::Completions, None, true);
        let mut buf = BytesMut::new();
        let before = crate::clock::now_us();
        r.text_chunk(&mut buf, "", " the answer", None, None);
        let ev = events(&buf);
        assert_eq!(ev[0]["object"], "text_completion");
        assert_eq!(ev[0]["choices"][0]["text"], " the answer");
        assert!(ev[0]["sim_sent_us"].as_i64().unwrap() >= before);
    }

    #[test]
    fn full_chat_body() {
        let r = renderer(Endpoint::Chat, Some("reasoning"), false);
        let body: Value =
            serde_json::from_slice(&r.full_body(" hmm", "", "length", Usage::new(1, 1, Some(1))))
                .unwrap();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["reasoning"], " hmm");
        assert_eq!(body["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(body["choices"][0]["finish_reason"], "length");
    }
}
