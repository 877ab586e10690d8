//! OpenAI's Responses API (`/v1/responses`): `input` (a string or a list of
//! items), `instructions`, `max_output_tokens`, function `tools`,
//! `text.format` for structured output.

use serde_json::Value;

use super::fields::{str_of, Fields};
use super::{Prompt, SimRequest, Tool, ToolChoice};

pub(super) fn read(
    f: &Fields<'_>,
    req: &mut SimRequest,
    prompt: &mut Prompt<'_>,
) -> Result<(), String> {
    req.max_tokens = f.count("max_output_tokens")?;
    let input = f.get("input").ok_or("'input' is required")?;
    prompt.hash_prompt(b"responses", input);
    if let Some(instructions) = f.string("instructions")? {
        prompt.hasher.write(instructions.as_bytes());
        prompt.push_message_start("system");
        prompt.tokens.push_words(instructions);
    }
    match input {
        Value::String(text) => {
            prompt.push_message_start("user");
            prompt.tokens.push_words(text);
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                push_item(item, prompt).map_err(|e| format!("input[{i}]: {e}"))?;
            }
        }
        _ => return Err("'input' must be a string or a list of items".to_string()),
    }
    req.tools = f
        .list("tools")?
        .into_iter()
        .flatten()
        .filter(|t| str_of(t, "type") == "function")
        .map(|t| Tool {
            name: str_of(t, "name").to_owned(),
            parameters: t.get("parameters").cloned().unwrap_or(Value::Null),
        })
        .collect();
    req.tool_choice = match f.get("tool_choice") {
        Some(Value::String(s)) if s == "none" => {
            req.tools.clear();
            ToolChoice::Auto
        }
        Some(Value::String(s)) if s == "required" => ToolChoice::Required,
        Some(Value::Object(o)) => ToolChoice::Named(
            o.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        ),
        _ => ToolChoice::Auto,
    };
    let format = f.get("text").and_then(|t| t.get("format"));
    req.json_schema = match format.map(|fmt| (str_of(fmt, "type"), fmt)) {
        Some(("json_schema", fmt)) => Some(fmt["schema"].clone()),
        Some(("json_object", _)) => Some(serde_json::json!({"type": "object"})),
        _ => None,
    };
    Ok(())
}

/// One input item: a message (string or parts), a function call or its output.
fn push_item(item: &Value, prompt: &mut Prompt<'_>) -> Result<(), String> {
    match str_of(item, "type") {
        "function_call" => {
            prompt.push_message_start("assistant");
            prompt.tokens.push_words(str_of(item, "arguments"));
        }
        "function_call_output" => {
            prompt.push_message_start("tool");
            prompt.tokens.push_words(str_of(item, "output"));
        }
        _ => {
            prompt.push_message_start(str_of(item, "role"));
            return prompt.push_content(item.get("content"), push_part);
        }
    }
    Ok(())
}

/// `input_text`/`output_text`, `input_image` (`image_url` a data URI or
/// URL), `input_audio`.
fn push_part(part: &Value, prompt: &mut Prompt<'_>) -> Result<(), String> {
    match str_of(part, "type") {
        "input_image" => prompt.push_image_url(str_of(part, "image_url")),
        "input_audio" => prompt.push_input_audio(&part["input_audio"]),
        _ => {
            prompt.tokens.push_words(str_of(part, "text"));
            Ok(())
        }
    }
}
