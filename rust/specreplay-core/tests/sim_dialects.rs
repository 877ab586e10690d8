//! Each dialect the client speaks, replayed by the engine against the
//! simulator: the client's decoders read what the simulator writes, and the
//! counts agree with the simulator's own usage.

use std::net::SocketAddr;

use serde_json::{json, Value};
use specreplay_core::engine::{self, LoadMode, PreparedRequest, RequestRecord, RunSpec};
use specreplay_core::sim::{SimConfig, SimServer};

mod common;
use common::drain;

fn sim_config() -> SimConfig {
    SimConfig {
        ttft_ms: 5.0,
        prefill_us_per_token: 0.0,
        tpot_ms: 1.0,
        reasoning_tokens: [10, 20],
        content_tokens: [3, 6],
        ..SimConfig::default()
    }
}

fn spec() -> RunSpec {
    RunSpec {
        headers: vec![],
        load: LoadMode::Concurrency { concurrency: 2 },
        num_requests: None,
        duration_s: None,
        max_concurrency: None,
        warmup: 0,
        timeout_s: Some(30.0),
        stall_timeout_s: None,
        retries: 0,
        seed: 1,
        server_stamps: false,
        chunk_text: false,
        preconnect: None,
        sessions: engine::SessionMode::Dependent,
        live_history: false,
        start_at_us: None,
        share: None,
    }
}

/// The body of one request in `api`'s dialect: "why is the sky blue" (5
/// words, one user message: 9 prompt tokens), with `extra` merged in.
fn body(api: &str, stream: bool, extra: &Value) -> Value {
    let question = "why is the sky blue";
    let mut body = match api {
        "chat" => json!({"messages": [{"role": "user", "content": question}],
            "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null }}),
        "responses" => json!({"input": question}),
        "anthropic" => {
            json!({"messages": [{"role": "user", "content": question}], "max_tokens": 1000})
        }
        other => panic!("{other}"),
    };
    body["model"] = "specreplay-sim".into();
    body["stream"] = stream.into();
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    body
}

fn path(api: &str) -> &'static str {
    match api {
        "chat" => "/v1/chat/completions",
        "responses" => "/v1/responses",
        _ => "/v1/messages",
    }
}

async fn replay(sim: &SimServer, api: &str, bodies: Vec<Value>) -> Vec<RequestRecord> {
    let url = format!("http://{}{}", sim.local_addr(), path(api));
    let requests = bodies
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            PreparedRequest::new(format!("r{i}"), api, &url, b.to_string().into_bytes(), 0.0)
                .unwrap()
        })
        .collect();
    let run = engine::start(spec(), requests, &tokio::runtime::Handle::current()).unwrap();
    let mut records = drain(run).await;
    records.sort_by_key(|r| r.request_index);
    records
}

/// The usage the simulator reports for `body` when asked directly (not
/// streamed): (prompt, output, reasoning) in the dialect's own fields.
async fn sim_usage(addr: SocketAddr, api: &str, mut body: Value) -> (i64, i64, Option<i64>) {
    body["stream"] = false.into();
    body["stream_options"] = Value::Null;
    let resp = reqwest_like_post(addr, path(api), &body).await;
    let u = &resp["usage"];
    let n = |v: &Value| v.as_i64();
    match api {
        "chat" => (
            n(&u["prompt_tokens"]).unwrap(),
            n(&u["completion_tokens"]).unwrap(),
            n(&u["completion_tokens_details"]["reasoning_tokens"]),
        ),
        "responses" => (
            n(&u["input_tokens"]).unwrap(),
            n(&u["output_tokens"]).unwrap(),
            n(&u["output_tokens_details"]["reasoning_tokens"]),
        ),
        _ => (
            n(&u["input_tokens"]).unwrap(),
            n(&u["output_tokens"]).unwrap(),
            None,
        ),
    }
}

/// A plain POST over hyper, its JSON answer.
async fn reqwest_like_post(addr: SocketAddr, path: &str, body: &Value) -> Value {
    use http_body_util::{BodyExt, Full};
    let io = hyper_util::rt::TokioIo::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::post(path)
        .header("host", "sim")
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dialect_round_trips_with_exact_counts() {
    let sim = SimServer::start(sim_config(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    for api in ["chat", "responses", "anthropic"] {
        for stream in [true, false] {
            let b = body(api, stream, &json!({}));
            let (prompt, output, reasoning) = sim_usage(sim.local_addr(), api, b.clone()).await;
            let records = replay(&sim, api, vec![b]).await;
            let r = &records[0];
            let what = format!("{api} stream={stream}");
            assert!(r.error.is_none(), "{what}: {:?}", r.error);
            assert_eq!(r.prompt_tokens, Some(prompt), "{what}");
            assert_eq!(prompt, 9, "{what}");
            assert_eq!(r.output_tokens, Some(output), "{what}");
            let (rt, ct) = (r.reasoning_tokens.unwrap(), r.content_tokens.unwrap());
            assert_eq!(rt + ct, output, "{what}");
            assert!((10..=20).contains(&rt), "{what}: {rt}");
            if let Some(reasoning) = reasoning {
                assert_eq!(rt, reasoning, "{what}");
            }
            let finish = r.finish_reason.as_deref();
            let expected = if api == "anthropic" {
                "end_turn"
            } else {
                "stop"
            };
            assert_eq!(finish, Some(expected), "{what}");
            if stream {
                assert!(
                    r.first_reasoning_us.unwrap() <= r.first_content_us.unwrap(),
                    "{what}"
                );
                let chunk_tokens: i64 = r.chunks.iter().map(|c| i64::from(c.tokens)).sum();
                assert_eq!(chunk_tokens, output, "{what}");
            }
        }
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_cuts_and_tool_calls_round_trip() {
    let sim = SimServer::start(sim_config(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}});
    let tools = |api: &str| match api {
        "chat" => {
            json!([{"type": "function", "function": {"name": "get_weather", "parameters": schema}}])
        }
        "responses" => json!([{"type": "function", "name": "get_weather", "parameters": schema}]),
        _ => json!([{"name": "get_weather", "input_schema": schema}]),
    };
    for api in ["chat", "responses", "anthropic"] {
        let budget = match api {
            "chat" => json!({"max_tokens": 4}),
            "responses" => json!({"max_output_tokens": 4}),
            _ => json!({"max_tokens": 4}),
        };
        let cut = replay(&sim, api, vec![body(api, true, &budget)]).await;
        let expected = match api {
            "chat" => "length",
            "responses" => "max_output_tokens",
            _ => "max_tokens",
        };
        assert_eq!(cut[0].finish_reason.as_deref(), Some(expected), "{api}");
        assert_eq!(cut[0].output_tokens, Some(4), "{api}");
        assert_eq!(cut[0].reasoning_tokens, Some(4), "{api}");

        let b = body(api, true, &json!({"tools": tools(api)}));
        let (_, output, _) = sim_usage(sim.local_addr(), api, b.clone()).await;
        let called = replay(&sim, api, vec![b]).await;
        let r = &called[0];
        assert!(r.error.is_none(), "{api}: {:?}", r.error);
        assert_eq!(
            r.output_tokens,
            Some(output),
            "{api}: tool tokens are output"
        );
        // Responses' wire says `completed` either way: the decoder reports
        // chat's `tool_calls` for a response that called a function.
        let expected = match api {
            "chat" | "responses" => "tool_calls",
            _ => "tool_use",
        };
        assert_eq!(r.finish_reason.as_deref(), Some(expected), "{api}");
    }
    sim.shutdown().await;
}
