//! End to end: a real `SimServer` on an ephemeral port, a real hyper client
//! over TCP (HTTP/1.1 and h2c), the SSE stream read frame by frame.
//! Timing checks use generous lower bounds only (the machine is shared).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use specreplay_core::sim::{SimConfig, SimServer};
use tokio::net::TcpStream;

fn config() -> SimConfig {
    SimConfig {
        ttft_ms: 30.0,
        prefill_us_per_token: 0.0,
        tpot_ms: 2.0,
        reasoning_tokens: [12, 20],
        content_tokens: [6, 10],
        send_timestamps: true,
        ..SimConfig::default()
    }
}

async fn start(config: SimConfig) -> SimServer {
    SimServer::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// What one request got back.
struct Answer {
    status: u16,
    /// Body frames with the instant each arrived.
    frames: Vec<(Instant, Bytes)>,
    sent: Instant,
}

impl Answer {
    fn body(&self) -> Vec<u8> {
        self.frames.iter().flat_map(|(_, b)| b.to_vec()).collect()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body()).unwrap()
    }

    /// SSE `data:` payloads in order (`[DONE]` kept as a string).
    fn events(&self) -> Vec<Value> {
        let body = String::from_utf8(self.body()).unwrap();
        body.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let data = e
                    .strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("not an SSE data line: {e:?}"));
                if data == "[DONE]" {
                    Value::String("[DONE]".into())
                } else {
                    serde_json::from_str(data).unwrap()
                }
            })
            .collect()
    }
}

async fn send(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Answer {
    let sent = Instant::now();
    let resp = sender.send_request(req).await.unwrap();
    read(resp, sent).await
}

async fn read(resp: hyper::Response<hyper::body::Incoming>, sent: Instant) -> Answer {
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            frames.push((Instant::now(), data));
        }
    }
    Answer {
        status,
        frames,
        sent,
    }
}

async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    sender
}

fn post(path: &str, body: &Value) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("host", "sim")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .header("host", "sim")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn request(addr: SocketAddr, req: Request<Full<Bytes>>) -> Answer {
    let mut sender = connect(addr).await;
    send(&mut sender, req).await
}

fn chat(content: &str, extra: Value) -> Value {
    let mut body =
        json!({"model": "specreplay-sim", "messages": [{"role": "user", "content": content}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

fn stream_opts() -> Value {
    json!({"stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true}})
}

fn words(v: &Value) -> usize {
    v.as_str().map_or(0, |s| s.split_whitespace().count())
}

#[tokio::test]
async fn streaming_chat_reasons_then_answers_with_exact_usage() {
    let server = start(config()).await;
    let answer = request(
        server.local_addr(),
        post(
            "/v1/chat/completions",
            &chat("why is the sky blue", stream_opts()),
        ),
    )
    .await;
    assert_eq!(answer.status, 200);
    let events = answer.events();
    assert_eq!(events.last().unwrap(), "[DONE]");

    // First: the role-only chunk, with zero completion tokens so far.
    let first = &events[0];
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(first["usage"]["completion_tokens"], 0);

    // Then deltas: reasoning only until the first content, never after it.
    let usage_chunk = &events[events.len() - 2];
    assert_eq!(usage_chunk["choices"], json!([]));
    let deltas = &events[1..events.len() - 2];
    let (mut reasoning, mut content, mut seen_content) = (0, 0, false);
    let mut prev_sent = 0;
    for (i, ev) in deltas.iter().enumerate() {
        let delta = &ev["choices"][0]["delta"];
        let r = words(&delta["reasoning_content"]);
        let c = words(&delta["content"]);
        assert!(r + c >= 1, "every step carries a token: {ev}");
        if seen_content {
            assert_eq!(r, 0, "reasoning after content: {ev}");
        }
        seen_content |= c > 0;
        reasoning += r;
        content += c;
        // Continuous usage: cumulative tokens after this chunk.
        assert_eq!(ev["usage"]["completion_tokens"], reasoning + content);
        let finish = &ev["choices"][0]["finish_reason"];
        assert_eq!(
            finish.is_null(),
            i + 1 < deltas.len(),
            "finish_reason only on the last delta"
        );
        let sent = ev["sim_sent_us"].as_i64().unwrap();
        assert!(sent >= prev_sent);
        prev_sent = sent;
    }
    assert!(content > 0 && reasoning > 0);
    assert_eq!(
        deltas.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    assert!((12..=20).contains(&reasoning), "{reasoning}");
    assert!((6..=10).contains(&content), "{content}");
    let usage = &usage_chunk["usage"];
    assert_eq!(usage["completion_tokens"], reasoning + content);
    assert_eq!(
        usage["completion_tokens_details"]["reasoning_tokens"],
        reasoning
    );
    assert_eq!(usage["prompt_tokens"], 5 + 4);
    assert_eq!(usage["total_tokens"], 9 + reasoning + content);

    // Timing, lower bounds only (a late reader can only make spans longer
    // measured from the send): TTFT >= ttft, the end >= ttft + (steps - 1) × tpot.
    let first_at = answer.frames[0].0;
    assert!(first_at - answer.sent >= Duration::from_millis(30));
    let last_at = answer.frames.last().unwrap().0;
    let steps = deltas.len() as u32;
    assert!(
        last_at - answer.sent >= Duration::from_millis(30) + Duration::from_millis(2) * (steps - 1)
    );
    server.shutdown().await;
}

#[tokio::test]
async fn small_budget_ends_in_reasoning_with_length() {
    let server = start(config()).await;
    let mut body = chat("why is the sky blue", stream_opts());
    body["max_tokens"] = json!(8);
    let events = request(server.local_addr(), post("/v1/chat/completions", &body))
        .await
        .events();
    let chunks: Vec<&Value> = events.iter().filter(|e| e.is_object()).collect();
    assert!(chunks.iter().all(|e| e["choices"][0]["delta"]
        .get("content")
        .is_none_or(|c| c == "")));
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|e| &e["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec!["length"]);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], 8);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 8);

    // The same budget through max_completion_tokens, non-streaming: content null.
    let mut body = chat("why is the sky blue", json!({}));
    body["max_completion_tokens"] = json!(8);
    let full = request(server.local_addr(), post("/v1/chat/completions", &body))
        .await
        .json();
    assert_eq!(full["choices"][0]["finish_reason"], "length");
    assert_eq!(full["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(
        words(&full["choices"][0]["message"]["reasoning_content"]),
        8
    );
    server.shutdown().await;
}

#[tokio::test]
async fn ignore_eos_and_min_tokens_over_http() {
    let server = start(config()).await;
    let mut body = chat("hello there", json!({"ignore_eos": true, "max_tokens": 60}));
    let full = request(server.local_addr(), post("/v1/chat/completions", &body))
        .await
        .json();
    assert_eq!(full["usage"]["completion_tokens"], 60);
    assert_eq!(full["choices"][0]["finish_reason"], "length");
    let r = full["usage"]["completion_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .unwrap() as usize;
    assert_eq!(words(&full["choices"][0]["message"]["content"]), 60 - r);

    body = chat("hello there", json!({"min_tokens": 45, "max_tokens": 60}));
    let full = request(server.local_addr(), post("/v1/chat/completions", &body))
        .await
        .json();
    assert_eq!(full["usage"]["completion_tokens"], 45);
    assert_eq!(full["choices"][0]["finish_reason"], "stop");
    server.shutdown().await;
}

#[tokio::test]
async fn same_request_same_answer_in_any_order() {
    let server = start(SimConfig {
        seed: 11,
        spec_draft_len: 3,
        ..config()
    })
    .await;
    let addr = server.local_addr();
    let a = chat("first question", stream_opts());
    let b = chat("second question", stream_opts());
    let text = |events: Vec<Value>| -> Vec<(String, String)> {
        events
            .iter()
            .filter(|e| e.is_object() && e["choices"].as_array().is_some_and(|c| !c.is_empty()))
            .map(|e| {
                let d = &e["choices"][0]["delta"];
                (
                    d["reasoning_content"].as_str().unwrap_or("").into(),
                    d["content"].as_str().unwrap_or("").into(),
                )
            })
            .collect()
    };
    // A and B at once, then B and A at once: each gets its own answer back, chunk for chunk.
    let (a1, b1) = tokio::join!(
        request(addr, post("/v1/chat/completions", &a)),
        request(addr, post("/v1/chat/completions", &b))
    );
    let (b2, a2) = tokio::join!(
        request(addr, post("/v1/chat/completions", &b)),
        request(addr, post("/v1/chat/completions", &a))
    );
    let (a1, a2, b1, b2) = (
        text(a1.events()),
        text(a2.events()),
        text(b1.events()),
        text(b2.events()),
    );
    assert_eq!(a1, a2);
    assert_eq!(b1, b2);
    assert_ne!(a1, b1);
    server.shutdown().await;
}

#[tokio::test]
async fn speculative_chunks_carry_several_tokens() {
    let c = SimConfig {
        spec_draft_len: 4,
        spec_acceptance: 0.9,
        spec_step_cost: 0.5,
        ..config()
    };
    let server = start(c).await;
    let answer = request(
        server.local_addr(),
        post("/v1/chat/completions", &chat("speculate", stream_opts())),
    )
    .await;
    let events = answer.events();
    let deltas = &events[1..events.len() - 2];
    let mut prev = 0;
    let mut per_chunk = Vec::new();
    for ev in deltas {
        let total = ev["usage"]["completion_tokens"].as_u64().unwrap();
        let d = &ev["choices"][0]["delta"];
        let n = (words(&d["reasoning_content"]) + words(&d["content"])) as u64;
        assert_eq!(total - prev, n, "usage delta = words in the chunk");
        per_chunk.push(n);
        prev = total;
    }
    assert_eq!(per_chunk[0], 1, "the prefill's token comes alone");
    assert!(per_chunk.iter().any(|&n| n > 1), "{per_chunk:?}");
    assert!(per_chunk.iter().all(|&n| n <= 5));
    // Each step costs tpot × (1 + 0.5 × 4) = 6 ms: the server stamped the last
    // chunk no earlier than ttft + (steps - 1) × 6 ms after the request left.
    let sent_us = specreplay_core::clock::instant_to_us(answer.sent);
    let last_us = deltas.last().unwrap()["sim_sent_us"].as_i64().unwrap();
    let steps = deltas.len() as i64;
    assert!(
        last_us - sent_us >= 30_000 + 6_000 * (steps - 1),
        "{} µs for {steps} steps",
        last_us - sent_us
    );
    server.shutdown().await;
}

#[tokio::test]
async fn completions_stream_only_text() {
    let server = start(config()).await;
    let body = json!({"model": "x", "prompt": "once upon a time", "stream": true, "stream_options": {"include_usage": true}});
    let events = request(server.local_addr(), post("/v1/completions", &body))
        .await
        .events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let usage = events[events.len() - 2]["usage"].clone();
    let chunks = &events[..events.len() - 2];
    assert!(chunks
        .iter()
        .all(|e| e["object"] == "text_completion" && e["choices"][0].get("delta").is_none()));
    let n: usize = chunks.iter().map(|e| words(&e["choices"][0]["text"])).sum();
    assert_eq!(usage["completion_tokens"], n);
    assert!((6..=10).contains(&n));
    assert_eq!(usage["prompt_tokens"], 4);
    assert!(usage.get("completion_tokens_details").is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn reasoning_field_variants() {
    for (field, key) in [("reasoning", Some("reasoning")), ("none", None)] {
        let c = SimConfig::from_json(&json!({"reasoning_field": field, "reasoning_tokens": [5, 5], "content_tokens": [3, 3], "ttft_ms": 0, "tpot_ms": 1}).to_string()).unwrap();
        let server = start(c).await;
        let events = request(
            server.local_addr(),
            post("/v1/chat/completions", &chat("q", stream_opts())),
        )
        .await
        .events();
        let mut reasoning = String::new();
        let mut content = String::new();
        for e in events
            .iter()
            .filter(|e| e.is_object() && !e["choices"].as_array().unwrap().is_empty())
        {
            let d = &e["choices"][0]["delta"];
            assert!(d.get("reasoning_content").is_none());
            if let Some(k) = key {
                reasoning += d[k].as_str().unwrap_or("");
            }
            content += d["content"].as_str().unwrap_or("");
        }
        match key {
            Some(_) => assert_eq!(
                (
                    reasoning.split_whitespace().count(),
                    content.split_whitespace().count()
                ),
                (5, 3)
            ),
            None => {
                assert!(content.starts_with(" <think>"), "{content}");
                assert!(content.contains("</think> "), "{content}");
                assert_eq!(content.split_whitespace().count(), 8);
            }
        }
        server.shutdown().await;
    }
}

#[tokio::test]
async fn models_health_and_errors() {
    let server = start(config()).await;
    let addr = server.local_addr();
    let mut sender = connect(addr).await;
    // Several requests over one keep-alive connection.
    let health = send(&mut sender, get("/health")).await;
    assert_eq!(health.status, 200);
    let models = send(&mut sender, get("/v1/models")).await;
    assert_eq!(models.json()["data"][0]["id"], "specreplay-sim");
    assert_eq!(models.json()["object"], "list");
    let missing = send(&mut sender, get("/v2/nothing")).await;
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"]["message"].is_string());
    let bad = Request::post("/v1/chat/completions")
        .header("host", "sim")
        .body(Full::new(Bytes::from("{oops")))
        .unwrap();
    let bad = send(&mut sender, bad).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"]["type"], "invalid_request_error");
    let no_messages = send(
        &mut sender,
        post("/v1/chat/completions", &json!({"model": "m"})),
    )
    .await;
    assert_eq!(no_messages.status, 400);
    let wrong_method = send(&mut sender, get("/v1/chat/completions")).await;
    assert_eq!(wrong_method.status, 405);
    server.shutdown().await;
}

#[tokio::test]
async fn h2c_prior_knowledge_streams() {
    let server = start(config()).await;
    let io = TokioIo::new(TcpStream::connect(server.local_addr()).await.unwrap());
    let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::post("http://sim/v1/chat/completions")
        .body(Full::new(Bytes::from(
            chat("h2", stream_opts()).to_string(),
        )))
        .unwrap();
    let sent = Instant::now();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    let answer = read(resp, sent).await;
    let events = answer.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    assert!(
        events[events.len() - 2]["usage"]["completion_tokens"]
            .as_u64()
            .unwrap()
            >= 18
    );
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_open_streams() {
    let server = start(SimConfig {
        tpot_ms: 50.0,
        reasoning_tokens: [1000, 1000],
        ..config()
    })
    .await;
    let addr = server.local_addr();
    let mut sender = connect(addr).await;
    let resp = sender
        .send_request(post("/v1/chat/completions", &chat("long", stream_opts())))
        .await
        .unwrap();
    let reader = tokio::spawn(read(resp, Instant::now()));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), server.shutdown())
        .await
        .expect("shutdown hangs");
    assert!(t.elapsed() < Duration::from_secs(5));
    let events = reader.await.unwrap().events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    assert_eq!(
        events[events.len() - 2]["choices"][0]["finish_reason"],
        "abort"
    );
    // Nothing listens any more.
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn bad_config_is_refused_at_start() {
    let err = SimServer::start(
        SimConfig {
            tpot_ms: -1.0,
            ..config()
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .err()
    .unwrap();
    assert!(err.to_string().contains("tpot_ms"), "{err}");
}
