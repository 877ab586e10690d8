//! The OpenAI dialects: `/v1/chat/completions` (messages with text, image,
//! audio and video parts, `tools`, `response_format`) and `/v1/completions`.

use serde_json::Value;

use super::fields::{str_of, Fields};
use super::{read_messages, Prompt, SimRequest, Tool, ToolChoice};

/// Budget and usage options both OpenAI dialects share.
fn read_options(f: &Fields<'_>, req: &mut SimRequest) -> Result<(), String> {
    req.max_tokens = f.count("max_completion_tokens")?.or(f.count("max_tokens")?);
    if let Some(n) = f.get("n").and_then(Value::as_u64) {
        if n != 1 {
            return Err("the simulator answers with one choice only ('n' must be 1)".to_string());
        }
    }
    match f.get("stream_options") {
        None => {}
        Some(Value::Object(o)) => {
            let on = |key: &str| o.get(key).and_then(Value::as_bool).unwrap_or(false);
            req.include_usage = req.stream && on("include_usage");
            req.continuous_usage = req.include_usage && on("continuous_usage_stats");
        }
        Some(_) => return Err("'stream_options' must be an object".to_string()),
    }
    Ok(())
}

pub(super) fn read_chat(
    f: &Fields<'_>,
    req: &mut SimRequest,
    prompt: &mut Prompt<'_>,
) -> Result<(), String> {
    read_options(f, req)?;
    let messages = read_messages(f, b"chat", prompt)?;
    for (i, message) in messages.iter().enumerate() {
        push_message(message, prompt).map_err(|e| format!("messages[{i}]: {e}"))?;
    }
    req.tools = read_tools(f)?;
    req.tool_choice = match f.get("tool_choice") {
        None => ToolChoice::Auto,
        Some(Value::String(s)) if s == "none" => {
            req.tools.clear();
            ToolChoice::Auto
        }
        Some(Value::String(s)) if s == "required" => ToolChoice::Required,
        Some(Value::String(_)) => ToolChoice::Auto,
        Some(named) => ToolChoice::Named(str_of(&named["function"], "name").to_owned()),
    };
    req.json_schema = match f.get("response_format") {
        None => None,
        Some(format) => match str_of(format, "type") {
            "json_schema" => Some(format["json_schema"]["schema"].clone()),
            "json_object" => Some(serde_json::json!({"type": "object"})),
            "text" => None,
            other => return Err(format!("response_format: unknown type '{other}'")),
        },
    };
    Ok(())
}

/// `[{"type":"function","function":{"name":…,"parameters":…}}]`.
fn read_tools(f: &Fields<'_>) -> Result<Vec<Tool>, String> {
    let Some(tools) = f.list("tools")? else {
        return Ok(Vec::new());
    };
    tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            let function = &tool["function"];
            match function.get("name").and_then(Value::as_str) {
                Some(name) => Ok(Tool {
                    name: name.to_owned(),
                    parameters: function.get("parameters").cloned().unwrap_or(Value::Null),
                }),
                None => Err(format!("tools[{i}]: 'function.name' is required")),
            }
        })
        .collect()
}

/// A chat message's tokens: the template's, then its `content` (a string or
/// a list of parts) and the arguments of any `tool_calls` it carries.
fn push_message(message: &Value, prompt: &mut Prompt<'_>) -> Result<(), String> {
    prompt.push_message_start(str_of(message, "role"));
    prompt.push_content(message.get("content"), push_part)?;
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        prompt
            .tokens
            .push_words(str_of(&call["function"], "arguments"));
    }
    Ok(())
}

/// One content part: `text`, `image_url`, `input_audio`, `video_url`.
fn push_part(part: &Value, prompt: &mut Prompt<'_>) -> Result<(), String> {
    match str_of(part, "type") {
        "image_url" => {
            let image = &part["image_url"];
            // Both `{"url": …}` and a bare string are seen in the wild.
            let url = image.as_str().unwrap_or_else(|| str_of(image, "url"));
            prompt.push_image_url(url)
        }
        "input_audio" => prompt.push_input_audio(&part["input_audio"]),
        "video_url" => {
            let (tokens, name) = prompt.media.video(str_of(&part["video_url"], "url"));
            prompt.push_media(tokens, name);
            Ok(())
        }
        _ => {
            if let Some(text) = part.get("text").and_then(Value::as_str) {
                prompt.tokens.push_words(text);
            }
            Ok(())
        }
    }
}

pub(super) fn read_completion(
    f: &Fields<'_>,
    req: &mut SimRequest,
    prompt: &mut Prompt<'_>,
) -> Result<(), String> {
    read_options(f, req)?;
    let text = f.get("prompt").ok_or("'prompt' is required")?;
    prompt.hash_prompt(b"completions", text);
    push_prompt(text, prompt)
}

/// A completions `prompt`'s tokens: a string, a list of token ids, or a
/// one-element list of either.
fn push_prompt(text: &Value, prompt: &mut Prompt<'_>) -> Result<(), String> {
    match text {
        Value::String(s) => prompt.tokens.push_words(s),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_u64) => {
            items
                .iter()
                .filter_map(Value::as_u64)
                .for_each(|id| prompt.tokens.push(id));
        }
        Value::Array(items) if items.len() == 1 => push_prompt(&items[0], prompt)?,
        Value::Array(_) => {
            return Err("batched prompts are not supported by the simulator".to_string())
        }
        _ => return Err("'prompt' must be a string or a list of token ids".to_string()),
    }
    Ok(())
}
