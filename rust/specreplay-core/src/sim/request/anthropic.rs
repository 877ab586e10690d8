//! Anthropic's Messages API (`/v1/messages`): `system`, `messages` with
//! text, image, `tool_use` and `tool_result` blocks, `max_tokens`, `tools`
//! with `input_schema`.

use serde_json::Value;

use super::fields::{str_of, Fields};
use super::{value_text, Prompt, SimRequest, Tool, ToolChoice};

pub(super) fn read(
    f: &Fields<'_>,
    req: &mut SimRequest,
    prompt: &mut Prompt<'_>,
) -> Result<(), String> {
    req.max_tokens = f.count("max_tokens")?;
    let messages = f
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("'messages' must be a list")?;
    if messages.is_empty() {
        return Err("'messages' must not be empty".to_string());
    }
    prompt.hasher.write(b"messages");
    prompt.hasher.write(value_text(&f.0["messages"]).as_bytes());
    if let Some(system) = f.get("system") {
        prompt.hasher.write(value_text(system).as_bytes());
        prompt.push_message_start("system");
        push_content(system, prompt)?;
    }
    for (i, message) in messages.iter().enumerate() {
        prompt.push_message_start(str_of(message, "role"));
        if let Some(content) = message.get("content") {
            push_content(content, prompt).map_err(|e| format!("messages[{i}]: {e}"))?;
        }
    }
    req.tools = f
        .list("tools")?
        .into_iter()
        .flatten()
        .map(|t| Tool {
            name: str_of(t, "name").to_owned(),
            parameters: t.get("input_schema").cloned().unwrap_or(Value::Null),
        })
        .collect();
    req.tool_choice = match f.get("tool_choice").map(|c| (str_of(c, "type"), c)) {
        Some(("none", _)) => {
            req.tools.clear();
            ToolChoice::Auto
        }
        Some(("any", _)) => ToolChoice::Required,
        Some(("tool", c)) => ToolChoice::Named(str_of(c, "name").to_owned()),
        _ => ToolChoice::Auto,
    };
    Ok(())
}

/// A string, or a list of blocks.
fn push_content(content: &Value, prompt: &mut Prompt<'_>) -> Result<(), String> {
    let blocks = match content {
        Value::String(text) => {
            prompt.tokens.push_words(text);
            return Ok(());
        }
        Value::Array(blocks) => blocks,
        _ => return Ok(()),
    };
    for (i, block) in blocks.iter().enumerate() {
        match str_of(block, "type") {
            "image" => {
                let source = &block["source"];
                let url = match str_of(source, "type") {
                    "base64" => format!(
                        "data:{};base64,{}",
                        str_of(source, "media_type"),
                        str_of(source, "data")
                    ),
                    _ => str_of(source, "url").to_owned(),
                };
                prompt
                    .push_image_url(&url)
                    .map_err(|e| format!("content[{i}]: {e}"))?;
            }
            "tool_use" => prompt.tokens.push_words(&value_text(&block["input"])),
            "tool_result" => {
                if let Some(inner) = block.get("content") {
                    push_content(inner, prompt)?;
                }
            }
            _ => prompt.tokens.push_words(str_of(block, "text")),
        }
    }
    Ok(())
}
