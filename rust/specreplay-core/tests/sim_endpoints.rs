//! The simulator over HTTP: the Responses and Anthropic shapes (tool calls
//! and faults included), embeddings, rerank and score, several served
//! models. Timing checks are lower bounds only (the machine is shared).

use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use specreplay_core::sim::{ModelSpec, SimConfig};

mod sim_http;
use sim_http::{config, post, send, start, user};

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
        let broken = send(addr, "POST", path, Some(body), Some("malformed_json")).await;
        let unparsed = broken
            .body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| serde_json::from_str::<Value>(d).is_err())
            .count();
        assert!(unparsed >= 1, "{path}: {}", broken.body);
        let poisoned = send(addr, "POST", path, Some(body), Some("invalid_utf8")).await;
        assert!(poisoned.body.contains('\u{FFFD}'), "{path}");
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

#[tokio::test]
async fn messages_errors_are_in_anthropic_shape() {
    let sim = start(SimConfig {
        model: "base".into(),
        models: vec![ModelSpec {
            name: "other".into(),
            ..ModelSpec::default()
        }],
        ..config()
    })
    .await;
    let addr = sim.local_addr();
    let anthropic = |a: &sim_http::Answer, kind: &str| {
        let v = a.json();
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], kind, "{v}");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    };
    let bad = post(addr, "/v1/messages", &json!({"messages": "nope"})).await;
    assert_eq!(bad.status, 400);
    anthropic(&bad, "invalid_request_error");
    let missing = post(
        addr,
        "/v1/messages",
        &json!({"model": "nope", "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(missing.status, 404);
    anthropic(&missing, "not_found_error");
    let limited = send(
        addr,
        "POST",
        "/v1/messages",
        Some(&json!({"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})),
        Some("http_429"),
    )
    .await;
    assert_eq!(limited.status, 429);
    anthropic(&limited, "rate_limit_error");
    // The OpenAI endpoints keep the OpenAI shape.
    let chat = post(addr, "/v1/chat/completions", &json!({"messages": "nope"})).await;
    assert_eq!(chat.status, 400);
    assert_eq!(chat.json()["error"]["type"], "invalid_request_error");
    assert!(chat.json().get("type").is_none());
    sim.shutdown().await;
}
