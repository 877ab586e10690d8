//! What the capacity and metrics tests share: a server on an ephemeral
//! loopback port, a streamed chat request read chunk by chunk with the
//! server's stamps, and a scrape of `/metrics` into a map.

#![allow(dead_code)] // each test file uses its own part

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use specreplay_core::sim::{SimConfig, SimServer};
use tokio::net::TcpStream;

pub async fn start(config: SimConfig) -> SimServer {
    SimServer::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// A fixed-length streamed chat request (an imported trace's shape): the
/// prompt `words`, `tokens` answer tokens, continuous usage.
pub fn fixed_length(words: &str, tokens: u32) -> Value {
    json!({
        "model": "m",
        "messages": [{"role": "user", "content": words}],
        "max_tokens": tokens, "min_tokens": tokens, "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true},
    })
}

/// One token-carrying chunk as the client saw it.
#[derive(Clone, Debug)]
pub struct Chunk {
    /// When the client read it.
    pub read: Instant,
    /// `sim_sent_us` (needs `send_timestamps`), else 0.
    pub sent_us: i64,
    /// Tokens it carried (difference of the cumulative usage).
    pub tokens: u64,
}

/// What one request got back.
pub struct Reply {
    pub status: u16,
    pub sent: Instant,
    pub chunks: Vec<Chunk>,
    pub body: String,
}

impl Reply {
    /// First token: the first chunk that carried one.
    pub fn first_token_us(&self) -> i64 {
        self.chunks.first().map_or(0, |c| c.sent_us)
    }

    pub fn last_token_us(&self) -> i64 {
        self.chunks.last().map_or(0, |c| c.sent_us)
    }
}

async fn sender(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    sender
}

/// POSTs `body` to the chat endpoint and reads the answer to its end.
pub async fn chat(addr: SocketAddr, body: &Value) -> Reply {
    chat_with_fault(addr, body, None).await
}

/// `chat`, forcing `fault` with the fault header; a connection that dies
/// ends the reply where it stopped.
pub async fn chat_with_fault(addr: SocketAddr, body: &Value, fault: Option<&str>) -> Reply {
    let mut sender = sender(addr).await;
    let mut req = hyper::Request::post("/v1/chat/completions")
        .header("host", "sim")
        .header("content-type", "application/json");
    if let Some(kind) = fault {
        req = req.header("x-specreplay-fault", kind);
    }
    let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let sent = Instant::now();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let mut incoming = resp.into_body();
    let (mut chunks, mut text, mut pending, mut so_far) =
        (Vec::new(), String::new(), String::new(), 0);
    while let Some(Ok(frame)) = incoming.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let read = Instant::now();
        let piece = String::from_utf8(data.to_vec()).unwrap();
        text.push_str(&piece);
        pending.push_str(&piece);
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let Some(data) = event.trim().strip_prefix("data: ") else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            let has_choice = v["choices"].as_array().is_some_and(|c| !c.is_empty());
            let total = v["usage"]["completion_tokens"].as_u64();
            if let (true, Some(total)) = (has_choice, total) {
                if total > so_far {
                    chunks.push(Chunk {
                        read,
                        sent_us: v["sim_sent_us"].as_i64().unwrap_or(0),
                        tokens: total - so_far,
                    });
                    so_far = total;
                }
            }
        }
    }
    Reply {
        status,
        sent,
        chunks,
        body: text,
    }
}

/// `GET /metrics` as `name{labels}` → value (labels as the server wrote them).
pub async fn scrape(addr: SocketAddr) -> HashMap<String, f64> {
    let mut sender = sender(addr).await;
    let req = hyper::Request::get("/metrics")
        .header("host", "sim")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(
        resp.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let page = resp.into_body().collect().await.unwrap().to_bytes();
    let page = String::from_utf8(page.to_vec()).unwrap();
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').unwrap();
            (key.to_string(), value.parse().unwrap())
        })
        .collect()
}

/// The value of metric `name` with `labels` besides `engine` and
/// `model_name` (the default model), written in name order as the server does.
pub fn metric(page: &HashMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut all = vec![("engine", "0"), ("model_name", "specreplay-sim")];
    all.extend_from_slice(labels);
    all.sort();
    let labels: Vec<String> = all.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let key = format!("{name}{{{}}}", labels.join(","));
    *page
        .get(&key)
        .unwrap_or_else(|| panic!("{key} not on the page: {page:?}"))
}

/// `vllm:request_success_total` for one finish reason.
pub fn finished(page: &HashMap<String, f64>, reason: &str) -> f64 {
    metric(
        page,
        "vllm:request_success_total",
        &[("finished_reason", reason)],
    )
}
