//! The simulator over HTTP: images and audio charged as prompt tokens (and
//! their prefill), tool calls (streamed, cut at `max_tokens`, the rate,
//! `tool_choice`) and `json_schema` answers. Timing checks are lower bounds
//! only (the machine is shared).

use std::time::Duration;

use serde_json::{json, Value};
use specreplay_core::sim::SimConfig;

mod sim_http;
use sim_http::{config, png, post, start, user, wav, Answer};

#[tokio::test]
async fn images_and_audio_are_prompt_tokens_and_delay_the_first_token() {
    let sim = start(SimConfig {
        prefill_us_per_token: 2000.0,
        ..config()
    })
    .await;
    let addr = sim.local_addr();
    let text = post(
        addr,
        "/v1/chat/completions",
        &user(json!([{"type": "text", "text": "what is this"}])),
    )
    .await;
    let base = text.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(base, 3 + 4);
    // 280×280: 20×20 patches of 14 px, 2×2 merged: 100 tokens.
    let image = json!([{"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": png(280, 280)}}]);
    let mut body = user(image);
    let answer = post(addr, "/v1/chat/completions", &body).await;
    assert_eq!(
        answer.json()["usage"]["prompt_tokens"].as_u64().unwrap(),
        base + 100
    );
    body["stream"] = true.into();
    let streamed = post(addr, "/v1/chat/completions", &body).await;
    // 107 prompt tokens at 2 ms each before the first token.
    assert!(
        streamed.first_frame >= Duration::from_millis(214),
        "{:?}",
        streamed.first_frame
    );
    // An http(s) URL is not fetched: it counts as image_url_size (1024×1024).
    let remote =
        user(json!([{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]));
    let remote = post(addr, "/v1/chat/completions", &remote).await;
    assert_eq!(
        remote.json()["usage"]["prompt_tokens"].as_u64().unwrap(),
        4 + 74 * 74 / 4
    );
    // Two seconds of audio at 25 tokens a second.
    let audio =
        user(json!([{"type": "input_audio", "input_audio": {"data": wav(2), "format": "wav"}}]));
    let audio = post(addr, "/v1/chat/completions", &audio).await;
    assert_eq!(
        audio.json()["usage"]["prompt_tokens"].as_u64().unwrap(),
        4 + 50
    );
    // An image whose size cannot be read is a 400 naming the part.
    let bad =
        user(json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]));
    let bad = post(addr, "/v1/chat/completions", &bad).await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("messages[0]: content[0]"));
    sim.shutdown().await;
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                       "days": {"type": "integer"}},
        "required": ["city"]}}}])
}

/// The streamed chat tool call: its id, name and arguments, the finish
/// reason and the usage.
fn streamed_call(answer: &Answer) -> (String, String, String, String, Value) {
    let (mut id, mut name, mut args, mut finish, mut usage) = (
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        Value::Null,
    );
    for (_, ev) in answer.events() {
        let Value::Object(_) = ev else { continue };
        if let Some(call) = ev["choices"][0]["delta"]["tool_calls"].get(0) {
            assert_eq!(call["index"], 0);
            if let Some(i) = call["id"].as_str() {
                assert!(id.is_empty(), "the call is named once");
                id = i.to_owned();
                name = call["function"]["name"].as_str().unwrap().to_owned();
                assert_eq!(call["type"], "function");
            }
            args.push_str(call["function"]["arguments"].as_str().unwrap());
        }
        if let Some(f) = ev["choices"][0]["finish_reason"].as_str() {
            finish = f.to_owned();
        }
        if !ev["usage"].is_null() {
            usage = ev["usage"].clone();
        }
    }
    (id, name, args, finish, usage)
}

#[tokio::test]
async fn tools_get_a_streamed_tool_call_and_a_cut_one_ends_at_length() {
    let sim = start(config()).await;
    let addr = sim.local_addr();
    let mut body = user(json!("weather in Paris?"));
    body["tools"] = weather_tool();
    body["stream"] = true.into();
    body["stream_options"] = json!({"include_usage": true});
    let answer = post(addr, "/v1/chat/completions", &body).await;
    let (id, name, args, finish, usage) = streamed_call(&answer);
    assert!(id.starts_with("call_"), "{id}");
    assert_eq!(name, "get_weather");
    assert_eq!(finish, "tool_calls");
    let v: Value = serde_json::from_str(&args).unwrap();
    assert!(v["city"].is_string());
    assert!(["celsius", "fahrenheit"].contains(&v["unit"].as_str().unwrap()));
    let chunks_with_args = answer.body.matches("\"arguments\"").count();
    assert!(
        chunks_with_args > 2,
        "arguments over several chunks: {chunks_with_args}"
    );
    let reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .unwrap();
    let tool_tokens = usage["completion_tokens"].as_u64().unwrap() - reasoning;
    assert_eq!(tool_tokens as usize, args.chars().count().div_ceil(4));
    // The same request with a budget ending inside the arguments.
    body["max_tokens"] = (reasoning + 3).into();
    let cut = post(addr, "/v1/chat/completions", &body).await;
    let (_, _, cut_args, finish, _) = streamed_call(&cut);
    assert_eq!(finish, "length");
    assert!(args.starts_with(&cut_args) && cut_args.len() < args.len());
    assert!(serde_json::from_str::<Value>(&cut_args).is_err());
    // Not streamed: the message carries the call.
    body["stream"] = false.into();
    body["max_tokens"] = Value::Null;
    let whole = post(addr, "/v1/chat/completions", &body).await.json();
    assert_eq!(whole["choices"][0]["finish_reason"], "tool_calls");
    let call = &whole["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["arguments"].as_str().unwrap(), args);
    // tool_choice none: a text answer.
    body["tool_choice"] = "none".into();
    let text = post(addr, "/v1/chat/completions", &body).await.json();
    assert_eq!(text["choices"][0]["finish_reason"], "stop");
    assert!(text["choices"][0]["message"].get("tool_calls").is_none());
    sim.shutdown().await;
}

#[tokio::test]
async fn tool_call_rate_zero_answers_in_text_and_json_schema_answers_json() {
    let sim = start(SimConfig {
        tool_call_rate: 0.0,
        ..config()
    })
    .await;
    let addr = sim.local_addr();
    let mut body = user(json!("weather in Paris?"));
    body["tools"] = weather_tool();
    let text = post(addr, "/v1/chat/completions", &body).await.json();
    assert_eq!(text["choices"][0]["finish_reason"], "stop");
    body["tool_choice"] = "required".into();
    let forced = post(addr, "/v1/chat/completions", &body).await.json();
    assert_eq!(forced["choices"][0]["finish_reason"], "tool_calls");
    let schema = json!({"type": "object", "properties": {
        "answer": {"type": "string"}, "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}}}});
    let mut body = user(json!("rate it"));
    body["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "r", "schema": schema}});
    let answer = post(addr, "/v1/chat/completions", &body).await.json();
    let content: Value =
        serde_json::from_str(answer["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert!(
        content["answer"].is_string() && content["score"].is_f64() && content["tags"].is_array()
    );
    sim.shutdown().await;
}
