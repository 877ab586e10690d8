//! Shorthands for the dialect tests: load a recorded stream, build expected records.

use super::{decode_all, Channel, Dialect, Record, Usage};

pub fn vector(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn decode_vector(dialect: Dialect, name: &str) -> Vec<Record> {
    decode_all(dialect, &vector(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn text(channel: Channel, s: &str) -> Record {
    Record::Text {
        channel,
        text: s.into(),
    }
}
pub fn reasoning(s: &str) -> Record {
    text(Channel::Reasoning, s)
}
pub fn content(s: &str) -> Record {
    text(Channel::Content, s)
}
pub fn tool(s: &str) -> Record {
    text(Channel::Tool, s)
}
pub fn finish(s: &str) -> Record {
    Record::Finish { reason: s.into() }
}
pub fn error(message: &str, code: Option<&str>) -> Record {
    Record::Error {
        message: message.into(),
        code: code.map(Into::into),
    }
}
/// prompt, completion, reasoning, cached.
pub fn usage(p: Option<u64>, c: Option<u64>, r: Option<u64>, k: Option<u64>) -> Record {
    Record::Usage(Usage {
        prompt_tokens: p,
        completion_tokens: c,
        reasoning_tokens: r,
        cached_tokens: k,
    })
}

/// The start of a tool call with this id and name.
pub fn call(id: &str, name: &str) -> Record {
    Record::ToolCall {
        id: Some(id.into()),
        name: Some(name.into()),
    }
}
