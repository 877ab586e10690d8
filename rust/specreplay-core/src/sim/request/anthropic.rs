//! Anthropic's Messages API (`/v1/messages`): `system`, `messages` with
//! text, image, `tool_use` and `tool_result` blocks, `max_tokens`, `tools`
//! with `input_schema`.

use serde_json::Value;

use super::fields::{str_of, Fields};
use super::{read_messages, value_text, Prompt, SimRequest, Tool, ToolChoice};

pub(super) fn read(
    f: &Fields<'_>,
    req: &mut SimRequest,
    prompt: &mut Prompt<'_>,
) -> Result<(), String> {
    req.max_tokens = f.count("max_tokens")?;
    let messages = read_messages(f, b"messages", prompt)?;
    if let Some(system) = f.get("system") {
        prompt.hasher.write(value_text(system).as_bytes());
        prompt.push_message_start("system");
        prompt.push_content(Some(system), push_block)?;
    }
    for (i, message) in messages.iter().enumerate() {
        prompt.push_message_start(str_of(message, "role"));
        prompt
            .push_content(message.get("content"), push_block)
            .map_err(|e| format!("messages[{i}]: {e}"))?;
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

/// One content block: `image` (base64 or URL), `tool_use` (its input),
/// `tool_result` (its own content), text.
fn push_block(block: &Value, prompt: &mut Prompt<'_>) -> Result<(), String> {
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
            prompt.push_image_url(&url)
        }
        "tool_use" => {
            prompt.tokens.push_words(&value_text(&block["input"]));
            Ok(())
        }
        "tool_result" => prompt.push_content(block.get("content"), push_block),
        _ => {
            prompt.tokens.push_words(str_of(block, "text"));
            Ok(())
        }
    }
}
