//! The OpenAI dialects, shaped like vLLM's: chat chunks (reasoning under
//! the configured key, content, `tool_calls` deltas) and completions.

use bytes::{BufMut, BytesMut};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::{Block, Renderer, Usage};
use crate::sim::request::Endpoint;
use crate::sim::script::{Finish, Texts};

/// A chat delta. The reasoning key is chosen at run time, hence by hand.
struct Delta<'a> {
    role: Option<&'a str>,
    reasoning_key: Option<&'static str>,
    reasoning: &'a str,
    content: Option<&'a str>,
    tool_call: Option<ToolDelta<'a>>,
}

/// One `tool_calls` entry: the first names the call, the rest add arguments.
struct ToolDelta<'a> {
    opening: Option<(&'a str, &'a str)>,
    arguments: &'a str,
}

impl Serialize for ToolDelta<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("index", &0)?;
        if let Some((id, name)) = self.opening {
            m.serialize_entry("id", id)?;
            m.serialize_entry("type", "function")?;
            m.serialize_entry(
                "function",
                &serde_json::json!({"name": name, "arguments": self.arguments}),
            )?;
        } else {
            m.serialize_entry(
                "function",
                &serde_json::json!({"arguments": self.arguments}),
            )?;
        }
        m.end()
    }
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
        if let Some(call) = &self.tool_call {
            m.serialize_entry("tool_calls", &[call])?;
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

impl Renderer {
    fn object(&self) -> &'static str {
        match self.endpoint {
            Endpoint::Completions => "text_completion",
            _ => "chat.completion.chunk",
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
            sim_sent_us: self.sent_us(),
        };
        serde_json::to_writer((&mut *buf).writer(), &chunk)
            .expect("serializing a chunk into memory cannot fail");
        buf.put_slice(b"\n\n");
    }

    /// The first chat chunk: `{"role":"assistant","content":""}`.
    pub(super) fn role_chunk(&self, buf: &mut BytesMut, usage: Option<Usage>) {
        let delta = Delta {
            role: Some("assistant"),
            reasoning_key: None,
            reasoning: "",
            content: Some(""),
            tool_call: None,
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

    /// One decode step's text. For chat, a delta holding `reasoning`,
    /// `content` and/or tool call arguments (both text kinds at the phase
    /// boundary, as vLLM's reasoning parsers do); for completions only
    /// `content` is used.
    pub(super) fn text_chunk(
        &mut self,
        buf: &mut BytesMut,
        text: &Texts,
        finish: Option<&str>,
        usage: Option<Usage>,
    ) {
        if self.endpoint == Endpoint::Completions {
            let choice = TextChoice {
                index: 0,
                text: &text.content,
                logprobs: None,
                finish_reason: finish,
            };
            self.write(buf, [choice], usage);
            return;
        }
        let opens = self.state.open != Block::Tool;
        let tool_call = match &self.tool {
            Some(call) if !text.args.is_empty() => Some(ToolDelta {
                opening: opens.then_some((call.id.as_str(), call.name.as_str())),
                arguments: &text.args,
            }),
            _ => None,
        };
        if tool_call.is_some() {
            self.state.open = Block::Tool;
        }
        let delta = Delta {
            role: None,
            reasoning_key: self.reasoning_key,
            reasoning: &text.reasoning,
            content: (!text.content.is_empty()).then_some(&text.content),
            tool_call,
        };
        let choice = ChatChoice {
            index: 0,
            delta,
            logprobs: None,
            finish_reason: finish,
        };
        self.write(buf, [choice], usage);
    }

    /// The `stream_options.include_usage` chunk: no choices, the totals.
    pub(super) fn usage_chunk(&self, buf: &mut BytesMut, usage: Usage) {
        self.write::<[ChatChoice<'_>; 0]>(buf, [], Some(usage));
    }

    pub fn done(buf: &mut BytesMut) {
        buf.put_slice(b"data: [DONE]\n\n");
    }

    /// A whole non-streaming chat or completions answer.
    pub(super) fn openai_body(
        &self,
        text: &Texts,
        finish: Finish,
        usage: Usage,
    ) -> serde_json::Value {
        let or_null = |s: &str| {
            if s.is_empty() {
                serde_json::Value::Null
            } else {
                s.into()
            }
        };
        let (object, choice) = match self.endpoint {
            Endpoint::Completions => {
                let choice = serde_json::json!({
                    "index": 0, "text": text.content, "logprobs": null, "finish_reason": finish.as_str(),
                });
                ("text_completion", choice)
            }
            _ => {
                let mut message = serde_json::Map::new();
                message.insert("role".into(), "assistant".into());
                message.insert("content".into(), or_null(&text.content));
                if let Some(key) = self.reasoning_key {
                    message.insert(key.into(), or_null(&text.reasoning));
                }
                if let Some(call) = &self.tool {
                    message.insert(
                        "tool_calls".into(),
                        serde_json::json!([{"id": call.id, "type": "function",
                            "function": {"name": call.name, "arguments": text.args}}]),
                    );
                }
                let choice = serde_json::json!({
                    "index": 0, "message": message, "logprobs": null, "finish_reason": finish.as_str(),
                });
                ("chat.completion", choice)
            }
        };
        serde_json::json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": &*self.model,
            "choices": [choice],
            "usage": usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::structured::ToolCall;
    use serde_json::Value;
    use std::sync::Arc;

    fn renderer(endpoint: Endpoint, key: Option<&'static str>, stamps: bool) -> Renderer {
        Renderer {
            endpoint,
            id: "chatcmpl-1".into(),
            created: 5,
            model: Arc::from("m"),
            reasoning_key: key,
            send_timestamps: stamps,
            tool: None,
            state: Default::default(),
        }
    }

    fn texts(reasoning: &str, content: &str) -> Texts {
        Texts {
            reasoning: reasoning.into(),
            content: content.into(),
            args: String::new(),
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
        let mut r = renderer(Endpoint::Chat, Some("reasoning_content"), false);
        let mut buf = BytesMut::new();
        r.role_chunk(&mut buf, None);
        r.text_chunk(&mut buf, &texts(" hmm", ""), None, None);
        r.text_chunk(
            &mut buf,
            &texts(" so", " the"),
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
        let mut r = renderer(Endpoint::Completions, None, true);
        let mut buf = BytesMut::new();
        let before = crate::clock::now_us();
        r.text_chunk(&mut buf, &texts("", " the answer"), None, None);
        let ev = events(&buf);
        assert_eq!(ev[0]["object"], "text_completion");
        assert_eq!(ev[0]["choices"][0]["text"], " the answer");
        assert!(ev[0]["sim_sent_us"].as_i64().unwrap() >= before);
    }

    #[test]
    fn full_chat_body() {
        let r = renderer(Endpoint::Chat, Some("reasoning"), false);
        let body: Value = serde_json::from_slice(&r.full_body(
            &texts(" hmm", ""),
            Finish::Length,
            Usage::new(1, 1, Some(1)),
        ))
        .unwrap();
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["reasoning"], " hmm");
        assert_eq!(body["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(body["choices"][0]["finish_reason"], "length");
    }

    #[test]
    fn tool_call_deltas_name_the_call_once() {
        let mut r = renderer(Endpoint::Chat, Some("reasoning"), false);
        r.tool = Some(ToolCall {
            id: "call_1".into(),
            name: "weather".into(),
        });
        let mut buf = BytesMut::new();
        let args = |a: &str| Texts {
            args: a.into(),
            ..Texts::default()
        };
        r.text_chunk(&mut buf, &args("{\"ci"), None, None);
        r.text_chunk(&mut buf, &args("ty\":1}"), Some("tool_calls"), None);
        let ev = events(&buf);
        assert_eq!(
            ev[0]["choices"][0]["delta"]["tool_calls"],
            serde_json::json!([{"index":0,"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"ci"}}])
        );
        assert_eq!(
            ev[1]["choices"][0]["delta"]["tool_calls"],
            serde_json::json!([{"index":0,"function":{"arguments":"ty\":1}"}}])
        );
        assert_eq!(ev[1]["choices"][0]["finish_reason"], "tool_calls");
    }
}
