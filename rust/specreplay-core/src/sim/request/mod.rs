//! Reading a generation request body (chat, completions, Responses,
//! Anthropic Messages) into the few facts the simulator uses. Anything
//! malformed becomes a message for a 400 answer. One module per dialect
//! (`chat`, `responses`, `anthropic`); `media` charges images and audio,
//! `fields` reads typed keys.
//!
//! Prompt length rule (no tokenizer): one token per whitespace-separated word
//! of the prompt text, plus 4 tokens per message for the chat template, plus
//! each image's or audio clip's tokens (`media`). Token-id prompts
//! (`"prompt": [1, 2, 3]`) count one token per id.

mod anthropic;
mod chat;
mod fields;
pub mod media;
mod responses;

use serde_json::Value;

use super::hash::Fnv1a;
use super::prefix::PromptTokens;
use fields::Fields;
pub use media::MediaRule;

/// Which endpoint the request came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Endpoint {
    #[default]
    Chat,
    Completions,
    /// OpenAI's Responses API (`/v1/responses`).
    Responses,
    /// Anthropic's Messages API (`/v1/messages`).
    Messages,
}

/// Chat-template overhead added per message to the word count.
pub const TOKENS_PER_MESSAGE: u32 = 4;

/// A function the request offers the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    /// Its JSON schema (`parameters`, Anthropic's `input_schema`).
    pub parameters: Value,
}

/// What the request lets the model do with its tools.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// Call one at `tool_call_rate`, else answer in text.
    #[default]
    Auto,
    /// Always call one (`required`, Anthropic's `any`).
    Required,
    /// Always call this one.
    Named(String),
}

/// What the simulator needs from one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimRequest {
    pub endpoint: Endpoint,
    pub stream: bool,
    /// `stream_options.include_usage` (chat, completions; the other
    /// dialects always report usage).
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats` (only honoured with `include_usage`, as vLLM does).
    pub continuous_usage: bool,
    /// The dialect's output budget (`max_completion_tokens`, else
    /// `max_tokens`; `max_output_tokens`); `None` when not given.
    pub max_tokens: Option<u32>,
    pub min_tokens: u32,
    pub ignore_eos: bool,
    pub prompt_tokens: u32,
    /// Of `prompt_tokens`, those charged for images, audio and video.
    pub media_tokens: u32,
    /// FNV-1a of the prompt (messages or prompt, canonical JSON) and `seed`:
    /// the same question gets the same answer whatever the streaming options.
    pub prompt_hash: u64,
    /// The prompt's full blocks, for the prefix cache (`sim::prefix`).
    pub prefix_blocks: Vec<u64>,
    /// The `model` field, if given.
    pub model: Option<String>,
    /// Tools offered (empty also under `tool_choice: "none"`).
    pub tools: Vec<Tool>,
    pub tool_choice: ToolChoice,
    /// The schema of a `json_schema` response format (`{"type":"object"}`
    /// for `json_object`).
    pub json_schema: Option<Value>,
}

/// A dialect's reading of one content part (`Prompt::push_content`).
type PartReader = fn(&Value, &mut Prompt<'_>) -> Result<(), String>;

/// The `messages` list of chat and Anthropic requests: present, not empty,
/// and hashed under `dialect`.
fn read_messages<'a>(
    f: &Fields<'a>,
    dialect: &[u8],
    prompt: &mut Prompt<'_>,
) -> Result<&'a [Value], String> {
    let Some(value @ Value::Array(messages)) = f.get("messages") else {
        return Err("'messages' must be a list".to_string());
    };
    if messages.is_empty() {
        return Err("'messages' must not be empty".to_string());
    }
    prompt.hash_prompt(dialect, value);
    Ok(messages)
}

/// The prompt as it is read: its hash, its tokens, the media rule.
pub(super) struct Prompt<'a> {
    pub hasher: Fnv1a,
    pub tokens: PromptTokens,
    pub media_tokens: u32,
    pub media: &'a MediaRule,
}

impl Prompt<'_> {
    /// The hash starts with the dialect's name, then the prompt's text
    /// (`value_text`): the same words asked of two dialects are two questions.
    pub fn hash_prompt(&mut self, dialect: &[u8], text: &Value) {
        self.hasher.write(dialect);
        self.hasher.write(value_text(text).as_bytes());
    }

    /// A message's `content`: a string's words, or each part of a list read
    /// by the dialect's `part` (its error prefixed with the part's place);
    /// anything else adds nothing.
    pub fn push_content(
        &mut self,
        content: Option<&Value>,
        part: PartReader,
    ) -> Result<(), String> {
        match content {
            Some(Value::String(text)) => self.tokens.push_words(text),
            Some(Value::Array(parts)) => {
                for (i, item) in parts.iter().enumerate() {
                    part(item, self).map_err(|e| format!("content[{i}]: {e}"))?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `TOKENS_PER_MESSAGE` template tokens, named by the role.
    pub fn push_message_start(&mut self, role: &str) {
        let mut name = Fnv1a::new();
        name.write(role.as_bytes());
        for _ in 0..TOKENS_PER_MESSAGE {
            self.tokens.push(name.finish());
        }
    }

    /// An image by URL (a data URI or http(s)); `Err` is the 400 message.
    pub fn push_image_url(&mut self, url: &str) -> Result<(), String> {
        let (tokens, name) = self.media.image_url(url)?;
        self.push_media(tokens, name);
        Ok(())
    }

    /// OpenAI's `input_audio` part (chat and Responses alike): base64
    /// `data` in a `format`; `Err` is the 400 message.
    pub fn push_input_audio(&mut self, audio: &Value) -> Result<(), String> {
        let (tokens, name) = self.media.audio(
            fields::str_of(audio, "data"),
            fields::str_of(audio, "format"),
        )?;
        self.push_media(tokens, name);
        Ok(())
    }

    /// Media worth `tokens` tokens, named by `name` (a hash of its bytes), so
    /// the same image twice shares prefix-cache blocks.
    pub fn push_media(&mut self, tokens: u32, name: u64) {
        for i in 0..tokens {
            self.tokens
                .push(name ^ u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        }
        self.media_tokens += tokens;
    }
}

impl SimRequest {
    /// Parses a request body for `endpoint`, charging media by `media`;
    /// `Err` is the 400 message.
    pub fn parse(endpoint: Endpoint, body: &[u8], media: &MediaRule) -> Result<SimRequest, String> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
        let Value::Object(obj) = &value else {
            return Err("the request body must be a JSON object".to_string());
        };
        let f = Fields(obj);
        let mut req = SimRequest {
            endpoint,
            stream: f.flag("stream")?,
            ignore_eos: f.flag("ignore_eos")?,
            min_tokens: f.count("min_tokens")?.unwrap_or(0),
            model: f.string("model")?.map(str::to_owned),
            ..SimRequest::default()
        };
        let mut prompt = Prompt {
            hasher: Fnv1a::new(),
            tokens: PromptTokens::default(),
            media_tokens: 0,
            media,
        };
        match endpoint {
            Endpoint::Chat => chat::read_chat(&f, &mut req, &mut prompt)?,
            Endpoint::Completions => chat::read_completion(&f, &mut req, &mut prompt)?,
            Endpoint::Responses => responses::read(&f, &mut req, &mut prompt)?,
            Endpoint::Messages => anthropic::read(&f, &mut req, &mut prompt)?,
        }
        if req.max_tokens == Some(0) {
            return Err("max_tokens must be at least 1".to_string());
        }
        if let Some(seed) = obj.get("seed").filter(|v| !v.is_null()) {
            prompt.hasher.write(b"seed");
            prompt.hasher.write(value_text(seed).as_bytes());
        }
        req.prompt_tokens = prompt.tokens.count().max(1);
        req.media_tokens = prompt.media_tokens;
        req.prompt_hash = prompt.hasher.finish();
        req.prefix_blocks = prompt.tokens.into_blocks();
        Ok(req)
    }

    /// Whether the model answers with a tool call rather than text; `draw`
    /// is a uniform number in `[0, 1)` from the request's own seed.
    pub fn calls_tool(&self, tool_call_rate: f64, draw: f64) -> Option<&Tool> {
        let named = |name: &str| self.tools.iter().find(|t| t.name == name);
        match &self.tool_choice {
            _ if self.tools.is_empty() => None,
            ToolChoice::Named(name) => named(name).or(self.tools.first()),
            ToolChoice::Required => self.tools.first(),
            ToolChoice::Auto => (draw < tool_call_rate).then(|| &self.tools[0]),
        }
    }
}

/// The canonical text of `v` for the prompt hash: serde_json's compact,
/// deterministic `Display`, with each media blob (a string over
/// `BLOB_BYTES` with no whitespace near its start: base64) named by its
/// length and ends instead of spelled out. Re-serializing a megabyte of
/// base64 and hashing it byte by byte cost more than the rest of the request
/// (`bench/sim_media.rs`).
pub(super) fn value_text(v: &Value) -> String {
    if has_blob(v) {
        named_blobs(v).to_string()
    } else {
        v.to_string()
    }
}

/// Strings longer than this may be media blobs.
const BLOB_BYTES: usize = 16 << 10;

fn is_blob(s: &str) -> bool {
    s.len() > BLOB_BYTES && !s.as_bytes()[..256].iter().any(u8::is_ascii_whitespace)
}

fn has_blob(v: &Value) -> bool {
    match v {
        Value::String(s) => is_blob(s),
        Value::Array(items) => items.iter().any(has_blob),
        Value::Object(map) => map.values().any(has_blob),
        _ => false,
    }
}

fn named_blobs(v: &Value) -> Value {
    match v {
        Value::String(s) if is_blob(s) => {
            Value::String(format!("blob:{}:{:016x}", s.len(), media::name_of(s)))
        }
        Value::Array(items) => Value::Array(items.iter().map(named_blobs).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), named_blobs(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests;
