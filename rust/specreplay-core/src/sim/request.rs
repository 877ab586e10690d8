//! Reading an OpenAI-style request body into the few facts the simulator
//! uses. Anything malformed becomes a message for a 400 answer.
//!
//! Prompt length rule (no tokenizer): one token per whitespace-separated word
//! of the prompt text, plus 4 tokens per chat message for the chat template.
//! Token-id prompts (`"prompt": [1, 2, 3]`) count one token per id.

use serde_json::Value;

use super::hash::Fnv1a;
use super::prefix::PromptTokens;

/// Which endpoint the request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

/// Chat-template overhead added per message to the word count.
pub const TOKENS_PER_MESSAGE: u32 = 4;

/// What the simulator needs from one request.
#[derive(Clone, Debug, PartialEq)]
pub struct SimRequest {
    pub endpoint: Endpoint,
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats` (only honoured with `include_usage`, as vLLM does).
    pub continuous_usage: bool,
    /// `max_completion_tokens`, else `max_tokens`; `None` when neither is given.
    pub max_tokens: Option<u32>,
    pub min_tokens: u32,
    pub ignore_eos: bool,
    pub prompt_tokens: u32,
    /// FNV-1a of the prompt (messages or prompt, canonical JSON) and `seed`:
    /// the same question gets the same answer whatever the streaming options.
    pub prompt_hash: u64,
    /// The prompt's full blocks, for the prefix cache (`sim::prefix`).
    pub prefix_blocks: Vec<u64>,
}

impl SimRequest {
    /// Parses a request body for `endpoint`; `Err` is the 400 message.
    pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<SimRequest, String> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
        let Value::Object(obj) = &value else {
            return Err("the request body must be a JSON object".to_string());
        };
        let flag = |key: &str| -> Result<bool, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(format!("'{key}' must be a boolean")),
            }
        };
        let stream = flag("stream")?;
        let ignore_eos = flag("ignore_eos")?;
        let (mut include_usage, mut continuous_usage) = (false, false);
        match obj.get("stream_options") {
            None | Some(Value::Null) => {}
            Some(Value::Object(o)) => {
                include_usage = o
                    .get("include_usage")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                continuous_usage = o
                    .get("continuous_usage_stats")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
            }
            Some(_) => return Err("'stream_options' must be an object".to_string()),
        }
        let count = |key: &str| -> Result<Option<u32>, String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(|| format!("'{key}' must be a non-negative integer")),
            }
        };
        let max_tokens = count("max_completion_tokens")?.or(count("max_tokens")?);
        if max_tokens == Some(0) {
            return Err("max_tokens must be at least 1".to_string());
        }
        let min_tokens = count("min_tokens")?.unwrap_or(0);
        if let Some(n) = obj.get("n").and_then(Value::as_u64) {
            if n != 1 {
                return Err(
                    "the simulator answers with one choice only ('n' must be 1)".to_string()
                );
            }
        }

        let mut hasher = Fnv1a::new();
        let mut tokens = PromptTokens::default();
        match endpoint {
            Endpoint::Chat => {
                let messages = obj
                    .get("messages")
                    .and_then(Value::as_array)
                    .ok_or("'messages' must be a list")?;
                if messages.is_empty() {
                    return Err("'messages' must not be empty".to_string());
                }
                hasher.write(b"chat");
                hasher.write(value_text(&obj["messages"]).as_bytes());
                for message in messages {
                    push_message(message, &mut tokens);
                }
            }
            Endpoint::Completions => {
                let prompt = obj.get("prompt").ok_or("'prompt' is required")?;
                hasher.write(b"completions");
                hasher.write(value_text(prompt).as_bytes());
                push_prompt(prompt, &mut tokens)?;
            }
        }
        if let Some(seed) = obj.get("seed").filter(|v| !v.is_null()) {
            hasher.write(b"seed");
            hasher.write(value_text(seed).as_bytes());
        }
        Ok(SimRequest {
            endpoint,
            stream,
            include_usage: stream && include_usage,
            continuous_usage: stream && include_usage && continuous_usage,
            max_tokens,
            min_tokens,
            ignore_eos,
            prompt_tokens: tokens.count().max(1),
            prompt_hash: hasher.finish(),
            prefix_blocks: tokens.into_blocks(),
        })
    }
}

fn value_text(v: &Value) -> String {
    // serde_json's `Display` is compact and deterministic for a given value.
    v.to_string()
}

/// A chat message's tokens: the template's `TOKENS_PER_MESSAGE` (named by
/// the role), then the words of its `content`, a string or a list of
/// `{type:"text", text}` parts.
fn push_message(message: &Value, tokens: &mut PromptTokens) {
    let mut role = Fnv1a::new();
    role.write(
        message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
            .as_bytes(),
    );
    for _ in 0..TOKENS_PER_MESSAGE {
        tokens.push(role.finish());
    }
    match message.get("content") {
        Some(Value::String(s)) => tokens.push_words(s),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .for_each(|text| tokens.push_words(text)),
        _ => {}
    }
}

/// A completions `prompt`'s tokens: a string, a list of token ids, or a
/// one-element list of either.
fn push_prompt(prompt: &Value, tokens: &mut PromptTokens) -> Result<(), String> {
    match prompt {
        Value::String(s) => tokens.push_words(s),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_u64) => {
            items
                .iter()
                .filter_map(Value::as_u64)
                .for_each(|id| tokens.push(id));
        }
        Value::Array(items) if items.len() == 1 => push_prompt(&items[0], tokens)?,
        Value::Array(_) => {
            return Err("batched prompts are not supported by the simulator".to_string())
        }
        _ => return Err("'prompt' must be a string or a list of token ids".to_string()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: &str) -> Result<SimRequest, String> {
        SimRequest::parse(Endpoint::Chat, body.as_bytes())
    }

    #[test]
    fn prompt_tokens_rule() {
        let r = chat(r#"{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"why is  the sky blue"}]}"#)
            .unwrap();
        assert_eq!(r.prompt_tokens, 2 + 5 + 2 * TOKENS_PER_MESSAGE);
        let parts = chat(r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a b c"},{"type":"image_url"}]}]}"#)
            .unwrap();
        assert_eq!(parts.prompt_tokens, 3 + TOKENS_PER_MESSAGE);
        let ids = SimRequest::parse(Endpoint::Completions, br#"{"prompt":[5,6,7,8]}"#).unwrap();
        assert_eq!(ids.prompt_tokens, 4);
        let text = SimRequest::parse(Endpoint::Completions, br#"{"prompt":["one two"]}"#).unwrap();
        assert_eq!(text.prompt_tokens, 2);
    }

    #[test]
    fn budget_fields() {
        let m = r#""messages":[{"role":"user","content":"hi"}]"#;
        assert_eq!(
            chat(&format!("{{{m},\"max_tokens\":7}}"))
                .unwrap()
                .max_tokens,
            Some(7)
        );
        assert_eq!(
            chat(&format!(
                "{{{m},\"max_completion_tokens\":9,\"max_tokens\":7}}"
            ))
            .unwrap()
            .max_tokens,
            Some(9)
        );
        assert_eq!(chat(&format!("{{{m}}}")).unwrap().max_tokens, None);
        assert!(chat(&format!("{{{m},\"max_tokens\":0}}")).is_err());
        assert!(chat(&format!("{{{m},\"max_tokens\":\"many\"}}")).is_err());
    }

    #[test]
    fn usage_options_need_streaming_and_include_usage() {
        let m = r#""messages":[{"role":"user","content":"hi"}]"#;
        let r = chat(&format!(
            "{{{m},\"stream\":true,\"stream_options\":{{\"include_usage\":true,\"continuous_usage_stats\":true}}}}"
        ))
        .unwrap();
        assert!(r.include_usage && r.continuous_usage);
        let r = chat(&format!(
            "{{{m},\"stream\":true,\"stream_options\":{{\"continuous_usage_stats\":true}}}}"
        ))
        .unwrap();
        assert!(!r.include_usage && !r.continuous_usage);
    }

    #[test]
    fn hash_ignores_options_but_not_prompt_or_seed() {
        let a =
            chat(r#"{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5}"#)
                .unwrap();
        let b = chat(r#"{"max_tokens":900,"messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        let c = chat(r#"{"messages":[{"role":"user","content":"hi!"}]}"#).unwrap();
        let d = chat(r#"{"messages":[{"role":"user","content":"hi"}],"seed":3}"#).unwrap();
        assert_eq!(a.prompt_hash, b.prompt_hash);
        assert_ne!(a.prompt_hash, c.prompt_hash);
        assert_ne!(a.prompt_hash, d.prompt_hash);
    }

    #[test]
    fn malformed_bodies_are_rejected() {
        assert!(chat("{not json").unwrap_err().contains("invalid JSON"));
        assert!(chat("[1]").is_err());
        assert!(chat(r#"{"messages":[]}"#).is_err());
        assert!(chat(r#"{"messages":"hi"}"#).is_err());
        assert!(chat(r#"{"messages":[{"role":"user","content":"hi"}],"n":2}"#).is_err());
        assert!(SimRequest::parse(Endpoint::Completions, br#"{"prompt":["a","b"]}"#).is_err());
    }
}
