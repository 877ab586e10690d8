//! The simulator beyond plain text, over HTTP: media charged as prompt
//! tokens, tool calls and `json_schema` answers, the Responses and
//! Anthropic shapes, embeddings, rerank and score, several served models.
//! Timing checks are lower bounds only (the machine is shared).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use specreplay_core::sim::{ModelSpec, SimConfig, SimServer, FAULT_HEADER};
use tokio::net::TcpStream;

fn config() -> SimConfig {
    SimConfig {
        ttft_ms: 5.0,
        prefill_us_per_token: 0.0,
        tpot_ms: 1.0,
        reasoning_tokens: [5, 8],
        content_tokens: [4, 6],
        embedding_dim: 8,
        ..SimConfig::default()
    }
}

async fn start(config: SimConfig) -> SimServer {
    SimServer::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

struct Answer {
    status: u16,
    body: String,
    /// From sending to the first body frame.
    first_frame: Duration,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// `(event name, data)` of each SSE event (`data: [DONE]` as a string).
    fn events(&self) -> Vec<(String, Value)> {
        self.body
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let mut name = String::new();
                let mut data = Value::Null;
                for line in e.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n.to_owned();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = serde_json::from_str(d).unwrap_or_else(|_| d.into());
                    }
                }
                (name, data)
            })
            .collect()
    }
}

async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
    fault: Option<&str>,
) -> Answer {
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "sim")
        .header("content-type", "application/json");
    if let Some(kind) = fault {
        req = req.header(FAULT_HEADER, kind);
    }
    let bytes = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    let sent = Instant::now();
    let resp = sender
        .send_request(req.body(Full::new(bytes)).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let (mut text, mut first_frame) = (Vec::new(), None);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            first_frame.get_or_insert_with(|| sent.elapsed());
            text.extend_from_slice(&data);
        }
    }
    Answer {
        status,
        body: String::from_utf8_lossy(&text).into_owned(),
        first_frame: first_frame.unwrap_or_default(),
    }
}

async fn post(addr: SocketAddr, path: &str, body: &Value) -> Answer {
    send(addr, "POST", path, Some(body), None).await
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A PNG header (signature and IHDR) of a `w`×`h` image: all the simulator reads.
fn png(w: u32, h: u32) -> String {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend(w.to_be_bytes());
    b.extend(h.to_be_bytes());
    b.extend([8, 2, 0, 0, 0]);
    format!("data:image/png;base64,{}", b64(&b))
}

/// A WAV clip of `seconds` of 16 kHz mono 16-bit silence.
fn wav(seconds: u32) -> String {
    let data = 32_000 * seconds;
    let mut b = b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0\x01\0\x01\0".to_vec();
    b.extend(16_000u32.to_le_bytes());
    b.extend(32_000u32.to_le_bytes());
    b.extend([2, 0, 16, 0]);
    b.extend(b"data");
    b.extend(data.to_le_bytes());
    b.extend(vec![0; data as usize]);
    b64(&b)
}

fn user(parts: Value) -> Value {
    json!({"messages": [{"role": "user", "content": parts}]})
}

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

#[tokio::test]
async fn responses_and_messages_speak_their_own_shapes() {
    let sim = start(config()).await;
    let addr = sim.local_addr();
    let r = post(
        addr,
        "/v1/responses",
        &json!({"input": "why is the sky blue", "max_output_tokens": 500}),
    )
    .await
    .json();
    assert_eq!(r["object"], "response");
    assert_eq!(r["status"], "completed");
    assert_eq!(r["usage"]["input_tokens"], 5 + 4);
    let reasoning = r["usage"]["output_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .unwrap();
    assert!((5..=8).contains(&reasoning));
    assert_eq!(r["output"][0]["type"], "reasoning");
    assert_eq!(r["output"][1]["type"], "message");
    let stream = post(
        addr,
        "/v1/responses",
        &json!({"input": "why is the sky blue", "stream": true}),
    )
    .await;
    let events = stream.events();
    assert_eq!(events[0].0, "response.created");
    assert_eq!(events.last().unwrap().0, "response.completed");
    assert!(events
        .iter()
        .all(|(name, data)| data["type"] == name.as_str()));
    let seqs: Vec<u64> = events
        .iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    let count = |kind: &str| events.iter().filter(|(n, _)| n == kind).count() as u64;
    assert_eq!(count("response.reasoning_text.delta"), reasoning);
    let usage = &events.last().unwrap().1["response"]["usage"];
    assert_eq!(
        usage["output_tokens"].as_u64().unwrap(),
        reasoning + count("response.output_text.delta")
    );
    // A budget cut: incomplete, for max_output_tokens.
    let cut = post(
        addr,
        "/v1/responses",
        &json!({"input": "why is the sky blue", "max_output_tokens": 2}),
    )
    .await
    .json();
    assert_eq!(cut["status"], "incomplete");
    assert_eq!(cut["incomplete_details"]["reason"], "max_output_tokens");

    let m = post(addr, "/v1/messages", &json!({"max_tokens": 500, "messages": [{"role": "user", "content": "why is the sky blue"}]})).await.json();
    assert_eq!(m["type"], "message");
    assert_eq!(m["stop_reason"], "end_turn");
    assert_eq!(m["usage"]["input_tokens"], 5 + 4);
    assert_eq!(m["content"][0]["type"], "thinking");
    assert_eq!(m["content"][1]["type"], "text");
    let stream = post(
        addr,
        "/v1/messages",
        &json!({"max_tokens": 500, "stream": true,
        "messages": [{"role": "user", "content": "why is the sky blue"}]}),
    )
    .await;
    let names: Vec<String> = stream.events().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(names[1], "content_block_start");
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    assert_eq!(
        names.iter().filter(|n| *n == "content_block_start").count(),
        2
    );
    assert_eq!(
        names.iter().filter(|n| *n == "content_block_stop").count(),
        2
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn tool_calls_in_responses_and_messages() {
    let sim = start(config()).await;
    let addr = sim.local_addr();
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    let body = json!({"input": "weather?", "stream": true,
        "tools": [{"type": "function", "name": "get_weather", "parameters": schema}]});
    let events = post(addr, "/v1/responses", &body).await.events();
    let added: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "response.output_item.added")
        .map(|(_, d)| &d["item"])
        .collect();
    assert_eq!(added.last().unwrap()["type"], "function_call");
    assert_eq!(added.last().unwrap()["name"], "get_weather");
    let args: String = events
        .iter()
        .filter(|(n, _)| n == "response.function_call_arguments.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert!(serde_json::from_str::<Value>(&args).unwrap()["city"].is_string());
    let body = json!({"max_tokens": 500, "stream": true, "messages": [{"role": "user", "content": "weather?"}],
        "tools": [{"name": "get_weather", "input_schema": schema}]});
    let events = post(addr, "/v1/messages", &body).await.events();
    let partial: String = events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert!(serde_json::from_str::<Value>(&partial).unwrap()["city"].is_string());
    let stop = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(stop.1["delta"]["stop_reason"], "tool_use");
    let start = events
        .iter()
        .find(|(_, d)| d["content_block"]["type"] == "tool_use")
        .unwrap();
    assert_eq!(start.1["content_block"]["name"], "get_weather");
    sim.shutdown().await;
}

#[tokio::test]
async fn faults_apply_to_every_dialect() {
    let sim = start(config()).await;
    let addr = sim.local_addr();
    let responses = json!({"input": "hello there", "stream": true});
    let messages = json!({"max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "hello there"}]});
    for (path, body) in [("/v1/responses", &responses), ("/v1/messages", &messages)] {
        let limited = send(addr, "POST", path, Some(body), Some("http_429")).await;
        assert_eq!(limited.status, 429, "{path}");
        let failed = send(addr, "POST", path, Some(body), Some("error_event")).await;
        let (name, data) = failed.events().pop().unwrap();
        assert_eq!(
            (name.as_str(), data["type"].as_str()),
            ("error", Some("error")),
            "{path}"
        );
        let cut = send(addr, "POST", path, Some(body), Some("missing_done")).await;
        let last = cut.events().pop().unwrap().0;
        assert!(
            last != "response.completed" && last != "message_stop",
            "{path}: {last}"
        );
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn embeddings_rerank_and_score() {
    let sim = start(SimConfig {
        prefill_us_per_token: 20_000.0,
        ..config()
    })
    .await;
    let addr = sim.local_addr();
    let body = json!({"model": "specreplay-sim", "input": ["one two three", "four five", "six"]});
    let answer = post(addr, "/v1/embeddings", &body).await;
    // Six tokens at 20 ms each.
    assert!(
        answer.first_frame >= Duration::from_millis(120),
        "{:?}",
        answer.first_frame
    );
    let e = answer.json();
    assert_eq!(e["object"], "list");
    assert_eq!(e["usage"]["prompt_tokens"], 6);
    assert_eq!(e["usage"]["total_tokens"], 6);
    assert_eq!(e["data"].as_array().unwrap().len(), 3);
    for (i, item) in e["data"].as_array().unwrap().iter().enumerate() {
        assert_eq!(item["index"], i);
        let v: Vec<f64> = item["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(v.len(), 8);
        assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-4);
    }
    let again = post(
        addr,
        "/v1/embeddings",
        &json!({"input": "one two three", "dimensions": 4, "encoding_format": "base64"}),
    )
    .await
    .json();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(again["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    assert_eq!(bytes.len(), 4 * 4);
    let ids = post(
        addr,
        "/v1/embeddings",
        &json!({"input": [[1, 2, 3, 4], [5, 6]]}),
    )
    .await
    .json();
    assert_eq!(ids["usage"]["prompt_tokens"], 6);

    let rerank = post(
        addr,
        "/v1/rerank",
        &json!({"query": "sky colour", "top_n": 2,
        "documents": ["the sky is blue", "grass is green", {"text": "sky at night"}]}),
    )
    .await
    .json();
    let results = rerank["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results[0]["relevance_score"].as_f64() >= results[1]["relevance_score"].as_f64());
    // The query is read with each document: (2 + 4) + (2 + 3) + (2 + 3).
    assert_eq!(rerank["usage"]["total_tokens"], 16);
    let score = post(
        addr,
        "/v1/score",
        &json!({"text_1": "sky colour", "text_2": ["blue", "green"]}),
    )
    .await
    .json();
    assert_eq!(score["data"].as_array().unwrap().len(), 2);
    assert_eq!(score["usage"]["prompt_tokens"], 6);
    let bad = post(addr, "/v1/embeddings", &json!({"input": 3})).await;
    assert_eq!(bad.status, 400);
    let limited = send(
        addr,
        "POST",
        "/v1/rerank",
        Some(&json!({"query": "q", "documents": ["d"]})),
        Some("http_503"),
    )
    .await;
    assert_eq!(limited.status, 503);
    sim.shutdown().await;
}

#[tokio::test]
async fn several_models_each_at_its_own_speed() {
    let sim = start(SimConfig {
        model: "base".into(),
        models: vec![
            ModelSpec {
                name: "lora-a".into(),
                ..ModelSpec::default()
            },
            ModelSpec {
                name: "slow".into(),
                ttft_ms: Some(300.0),
                ..ModelSpec::default()
            },
        ],
        ..config()
    })
    .await;
    let addr = sim.local_addr();
    let listing = send(addr, "GET", "/v1/models", None, None).await.json();
    let ids: Vec<&str> = listing["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["base", "lora-a", "slow"]);
    let mut body = user(json!("hello"));
    for name in ["base", "lora-a"] {
        body["model"] = name.into();
        assert_eq!(
            post(addr, "/v1/chat/completions", &body).await.json()["model"],
            name
        );
    }
    body["model"] = "slow".into();
    body["stream"] = true.into();
    let slow = post(addr, "/v1/chat/completions", &body).await;
    assert!(
        slow.first_frame >= Duration::from_millis(300),
        "{:?}",
        slow.first_frame
    );
    body["model"] = "nope".into();
    let missing = post(addr, "/v1/chat/completions", &body).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["type"], "not_found_error");
    assert!(missing.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("'nope'"));
    let embed = post(
        addr,
        "/v1/embeddings",
        &json!({"model": "nope", "input": "x"}),
    )
    .await;
    assert_eq!(embed.status, 404);
    sim.shutdown().await;
}
