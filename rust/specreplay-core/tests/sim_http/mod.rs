//! HTTP helpers of the simulator's tests beyond text (`sim_media_tools.rs`,
//! `sim_endpoints.rs`): a server, one request per connection, the answer
//! with the time to its first body frame, and media payloads.

#![allow(dead_code)] // each test file uses its share

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use specreplay_core::sim::{SimConfig, SimServer, FAULT_HEADER};
use tokio::net::TcpStream;

pub fn config() -> SimConfig {
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

pub async fn start(config: SimConfig) -> SimServer {
    SimServer::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

pub struct Answer {
    pub status: u16,
    pub body: String,
    /// From sending to the first body frame.
    pub first_frame: Duration,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// `(event name, data)` of each SSE event (`data: [DONE]` as a string).
    pub fn events(&self) -> Vec<(String, Value)> {
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

pub async fn send(
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

pub async fn post(addr: SocketAddr, path: &str, body: &Value) -> Answer {
    send(addr, "POST", path, Some(body), None).await
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A PNG header (signature and IHDR) of a `w`×`h` image: all the simulator reads.
pub fn png(w: u32, h: u32) -> String {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend(w.to_be_bytes());
    b.extend(h.to_be_bytes());
    b.extend([8, 2, 0, 0, 0]);
    format!("data:image/png;base64,{}", b64(&b))
}

/// A WAV clip of `seconds` of 16 kHz mono 16-bit silence.
pub fn wav(seconds: u32) -> String {
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

pub fn user(parts: Value) -> Value {
    serde_json::json!({"messages": [{"role": "user", "content": parts}]})
}
