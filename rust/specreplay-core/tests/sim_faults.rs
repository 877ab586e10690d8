//! Fault injection end to end: each fault forced with `x-specreplay-fault`
//! on a real `SimServer`, read by a raw HTTP/1.1 client over TCP that keeps
//! every byte with its arrival time and tells an RST from a clean close; and
//! hyper's client, to check what a real client sees. Then the configured
//! fractions over a seeded run. Timing checks are generous lower bounds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use specreplay_core::sim::{FaultKind, SimConfig, SimServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn config() -> SimConfig {
    SimConfig {
        ttft_ms: 100.0,
        prefill_us_per_token: 0.0,
        tpot_ms: 2.0,
        reasoning_tokens: [20, 30],
        content_tokens: [10, 16],
        fault_stall_ms: 400.0,
        fault_slow_headers_ms: 400.0,
        fault_retry_after_s: 7,
        ..SimConfig::default()
    }
}

/// The smallest gap the client must measure for a configured 400 ms stall.
const STALL_SEEN: Duration = Duration::from_millis(350);

async fn start(config: SimConfig) -> SimServer {
    SimServer::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

fn chat(stream: bool) -> Value {
    let mut body =
        json!({"model": "m", "messages": [{"role": "user", "content": "why is the sky blue"}]});
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// How the connection ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Orderly close (FIN).
    Eof,
    /// `ECONNRESET`: the server sent an RST.
    Reset,
}

/// Everything one raw request got back.
struct Raw {
    sent: Instant,
    /// Each read: when, and the bytes.
    reads: Vec<(Instant, Vec<u8>)>,
    end: End,
}

impl Raw {
    fn bytes(&self) -> Vec<u8> {
        self.reads.iter().flat_map(|(_, b)| b.clone()).collect()
    }

    /// Offset of the first body byte, if the head arrived whole.
    fn head_len(&self) -> Option<usize> {
        memchr::memmem::find(&self.bytes(), b"\r\n\r\n").map(|i| i + 4)
    }

    fn head(&self) -> String {
        let n = self.head_len().expect("no complete response head");
        String::from_utf8(self.bytes()[..n].to_vec()).unwrap()
    }

    fn status(&self) -> u16 {
        self.head()[9..12].parse().unwrap()
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head().lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    /// When the byte at `offset` arrived.
    fn arrival(&self, offset: usize) -> Instant {
        let mut seen = 0;
        for (at, b) in &self.reads {
            seen += b.len();
            if seen > offset {
                return *at;
            }
        }
        panic!("byte {offset} never arrived");
    }

    /// When the head was complete, and when the first body byte came.
    fn head_and_first_body_byte(&self) -> (Instant, Instant) {
        let n = self.head_len().unwrap();
        (self.arrival(n - 1), self.arrival(n))
    }

    /// The longest silence between two reads after the head.
    fn longest_body_gap(&self) -> Duration {
        let (head_at, _) = self.head_and_first_body_byte();
        let times: Vec<Instant> = self
            .reads
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| *t >= head_at)
            .collect();
        times
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default()
    }

    /// The body, de-chunked if chunked; and whether it was complete (the
    /// chunked terminator, or `content-length` bytes).
    fn body(&self) -> (Vec<u8>, bool) {
        let raw = self.bytes()[self.head_len().unwrap()..].to_vec();
        if self.header("transfer-encoding").as_deref() == Some("chunked") {
            return dechunk(&raw);
        }
        let len: usize = self.header("content-length").unwrap().parse().unwrap();
        let complete = raw.len() == len;
        (raw, complete)
    }

    /// The SSE events' payloads (bytes, `data: ` removed).
    fn events(&self) -> Vec<Vec<u8>> {
        let (body, _) = self.body();
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(i) = memchr::memmem::find(rest, b"\n\n") {
            let event = &rest[..i];
            out.push(
                event
                    .strip_prefix(b"data: ")
                    .unwrap_or_else(|| {
                        panic!("not an SSE data line: {:?}", String::from_utf8_lossy(event))
                    })
                    .to_vec(),
            );
            rest = &rest[i + 2..];
        }
        assert!(rest.is_empty(), "a partial event at the end");
        out
    }
}

fn dechunk(mut raw: &[u8]) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        let Some(eol) = memchr::memmem::find(raw, b"\r\n") else {
            return (body, false);
        };
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..eol]).unwrap(), 16).unwrap();
        raw = &raw[eol + 2..];
        if size == 0 {
            return (body, raw == b"\r\n");
        }
        if raw.len() < size + 2 {
            body.extend_from_slice(&raw[..raw.len().min(size)]);
            return (body, false);
        }
        body.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// One POST over a fresh connection (`connection: close`), read to the end.
async fn raw_post(addr: SocketAddr, path: &str, fault: Option<&str>, body: &Value) -> Raw {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let body = body.to_string();
    let fault = fault.map_or(String::new(), |f| format!("x-specreplay-fault: {f}\r\n"));
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n{fault}connection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let sent = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut reads = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let end = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return End::Eof,
                Ok(n) => reads.push((Instant::now(), buf[..n].to_vec())),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return End::Reset,
                Err(e) => panic!("unexpected read error: {e}"),
            }
        }
    })
    .await
    .expect("the answer never ended");
    Raw { sent, reads, end }
}

async fn post(addr: SocketAddr, fault: &str, stream: bool) -> Raw {
    raw_post(addr, "/v1/chat/completions", Some(fault), &chat(stream)).await
}

fn parse(event: &[u8]) -> Value {
    serde_json::from_slice(event)
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(event)))
}

fn words(v: &Value) -> u64 {
    v.as_str()
        .map_or(0, |s| s.split_whitespace().count() as u64)
}

/// Checks a complete, parseable stream: `[DONE]` last, the usage chunk
/// before it, and as many words as usage says. Returns the token count.
fn assert_whole_stream(events: &[Value]) -> u64 {
    assert_eq!(events.last().unwrap(), "[DONE]");
    let usage = &events[events.len() - 2]["usage"];
    let counted: u64 = events
        .iter()
        .filter_map(|e| e["choices"].get(0))
        .map(|c| words(&c["delta"]["reasoning_content"]) + words(&c["delta"]["content"]))
        .sum();
    assert_eq!(usage["completion_tokens"].as_u64().unwrap(), counted);
    counted
}

fn parse_events(raw: &Raw) -> Vec<Value> {
    raw.events()
        .iter()
        .map(|e| {
            if e == b"[DONE]" {
                Value::from("[DONE]")
            } else {
                parse(e)
            }
        })
        .collect()
}

#[tokio::test]
async fn no_fault_is_a_clean_stream() {
    // The control: what the fault tests below must differ from.
    let server = start(config()).await;
    let raw = post(server.local_addr(), "none", true).await;
    assert_eq!(raw.status(), 200);
    assert_eq!(raw.end, End::Eof);
    assert!(raw.body().1, "chunked terminator");
    assert_whole_stream(&parse_events(&raw));
    assert!(raw.longest_body_gap() < Duration::from_millis(200));
    let (head, first) = raw.head_and_first_body_byte();
    assert!(first - head < Duration::from_millis(400));
    server.shutdown().await;
}

#[tokio::test]
async fn reset_before_headers() {
    let server = start(config()).await;
    let addr = server.local_addr();
    for stream in [true, false] {
        let raw = post(addr, "reset_before_headers", stream).await;
        assert_eq!(raw.end, End::Reset);
        assert!(raw.bytes().is_empty(), "not a byte before the reset");
    }
    // What hyper's client sees: an error instead of a response.
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let req = Request::post("/v1/chat/completions")
        .header("host", "sim")
        .header("x-specreplay-fault", "reset_before_headers")
        .body(Full::new(Bytes::from(chat(true).to_string())))
        .unwrap();
    assert!(sender.send_request(req).await.is_err());
    server.shutdown().await;
}

#[tokio::test]
async fn reset_mid_stream() {
    let server = start(config()).await;
    let addr = server.local_addr();
    let raw = post(addr, "reset_mid_stream", true).await;
    assert_eq!(raw.status(), 200);
    assert_eq!(raw.end, End::Reset);
    let (_, complete) = raw.body();
    assert!(!complete, "no chunked terminator");
    let events = parse_events(&raw);
    assert!(
        events.len() >= 5,
        "it streamed for a while: {}",
        events.len()
    );
    assert!(events
        .iter()
        .all(|e| e.is_object() && e["choices"][0]["finish_reason"].is_null()));

    // Non-streaming: half the declared content-length, then the reset.
    let raw = post(addr, "reset_mid_stream", false).await;
    assert_eq!(raw.status(), 200);
    assert_eq!(raw.end, End::Reset);
    let (body, complete) = raw.body();
    assert!(!complete && !body.is_empty());

    // hyper's client: the head, then a body error.
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let req = Request::post("/v1/chat/completions")
        .header("host", "sim")
        .header("x-specreplay-fault", "reset_mid_stream")
        .body(Full::new(Bytes::from(chat(true).to_string())))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut frames = 0;
    let err = loop {
        match body.frame().await {
            Some(Ok(_)) => frames += 1,
            Some(Err(e)) => break e,
            None => panic!("the body ended cleanly"),
        }
    };
    assert!(frames > 0, "{err}");
    server.shutdown().await;
}

#[tokio::test]
async fn error_statuses() {
    let server = start(config()).await;
    let addr = server.local_addr();
    for (fault, status, kind) in [
        ("http_429", 429, "rate_limit_error"),
        ("http_500", 500, "server_error"),
        ("http_503", 503, "server_error"),
    ] {
        for stream in [true, false] {
            let raw = post(addr, fault, stream).await;
            assert_eq!(raw.status(), status, "{fault}");
            assert_eq!(raw.end, End::Eof);
            assert_eq!(
                raw.header("content-type").as_deref(),
                Some("application/json")
            );
            let (body, complete) = raw.body();
            assert!(complete);
            let body = parse(&body);
            assert_eq!(body["error"]["type"], kind);
            assert_eq!(body["error"]["code"], status);
            assert!(body["error"]["message"].is_string());
            let retry = raw.header("retry-after");
            assert_eq!(retry.as_deref(), (status == 429).then_some("7"), "{fault}");
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn stall_before_first_token() {
    let server = start(config()).await;
    let addr = server.local_addr();
    let raw = post(addr, "stall_before_first_token", true).await;
    let (head, first) = raw.head_and_first_body_byte();
    // Headers right away, then ttft (100 ms) + the stall (400 ms) of silence.
    assert!(
        first - head >= Duration::from_millis(400),
        "{:?}",
        first - head
    );
    assert!(first - raw.sent >= Duration::from_millis(500));
    assert_whole_stream(&parse_events(&raw));

    let raw = post(addr, "stall_before_first_token", false).await;
    let (head, first) = raw.head_and_first_body_byte();
    assert!(
        first - head >= Duration::from_millis(400),
        "{:?}",
        first - head
    );
    let (body, complete) = raw.body();
    assert!(complete);
    assert!(parse(&body)["choices"][0]["message"].is_object());
    server.shutdown().await;
}

#[tokio::test]
async fn stall_between_tokens() {
    let server = start(config()).await;
    let addr = server.local_addr();
    let raw = post(addr, "stall_between_tokens", true).await;
    // 400 ms configured; a late read of the chunk before the gap shortens it
    // as measured here, hence the slack (without the fault, gaps are ~2 ms).
    assert!(
        raw.longest_body_gap() >= STALL_SEEN,
        "{:?}",
        raw.longest_body_gap()
    );
    let (head, first) = raw.head_and_first_body_byte();
    assert!(
        first - head < Duration::from_millis(400),
        "the stall is not at the start"
    );
    let events = parse_events(&raw);
    assert_whole_stream(&events);
    // The gap is inside the token stream: events before and after it.
    let raw_events = raw.events();
    assert!(raw_events.len() > 4);

    let raw = post(addr, "stall_between_tokens", false).await;
    assert!(
        raw.longest_body_gap() >= STALL_SEEN,
        "{:?}",
        raw.longest_body_gap()
    );
    let (body, complete) = raw.body();
    assert!(complete);
    parse(&body);
    server.shutdown().await;
}

#[tokio::test]
async fn malformed_json() {
    let server = start(config()).await;
    let addr = server.local_addr();
    let raw = post(addr, "malformed_json", true).await;
    assert_eq!(raw.end, End::Eof);
    let events = raw.events();
    let bad: Vec<usize> = (0..events.len())
        .filter(|&i| events[i] != b"[DONE]" && serde_json::from_slice::<Value>(&events[i]).is_err())
        .collect();
    assert_eq!(bad.len(), 1, "exactly one malformed event");
    let i = bad[0];
    assert!(
        i > 2 && i < events.len() - 3,
        "in the middle: {i} of {}",
        events.len()
    );
    assert!(
        std::str::from_utf8(&events[i]).is_ok(),
        "malformed, not mis-encoded"
    );
    assert!(events[i].starts_with(b"{\""));
    // Everything else is a whole, normal stream.
    let good: Vec<Value> = events
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, e)| {
            if e == b"[DONE]" {
                Value::from("[DONE]")
            } else {
                parse(e)
            }
        })
        .collect();
    assert_whole_stream(&good);

    let raw = post(addr, "malformed_json", false).await;
    let (body, complete) = raw.body();
    assert!(complete, "the HTTP message is whole; its JSON is not");
    assert!(serde_json::from_slice::<Value>(&body).is_err());
    server.shutdown().await;
}

#[tokio::test]
async fn invalid_utf8() {
    let server = start(config()).await;
    let addr = server.local_addr();
    let raw = post(addr, "invalid_utf8", true).await;
    let events = raw.events();
    let bad: Vec<&Vec<u8>> = events
        .iter()
        .filter(|e| std::str::from_utf8(e).is_err())
        .collect();
    assert_eq!(bad.len(), 1);
    assert!(
        memchr::memmem::find(bad[0], b"\xff\xfe\"").is_some(),
        "inside a JSON string"
    );
    // Decoded leniently, it is a normal stream with the same words.
    let lossy: Vec<Value> = events
        .iter()
        .map(|e| {
            let text = String::from_utf8_lossy(e);
            if text == "[DONE]" {
                Value::from("[DONE]")
            } else {
                serde_json::from_str(&text).unwrap()
            }
        })
        .collect();
    assert_whole_stream(&lossy);

    let raw = post(addr, "invalid_utf8", false).await;
    let (body, complete) = raw.body();
    assert!(complete);
    assert!(std::str::from_utf8(&body).is_err());
    assert!(memchr::memmem::find(&body, b"\xff\xfe").is_some());
    server.shutdown().await;
}

#[tokio::test]
async fn missing_done() {
    let server = start(config()).await;
    let addr = server.local_addr();
    let raw = post(addr, "missing_done", true).await;
    assert_eq!(raw.end, End::Eof);
    let (_, complete) = raw.body();
    assert!(complete, "the chunked encoding ends properly");
    let events = parse_events(&raw);
    assert!(events.iter().all(|e| e != "[DONE]"));
    let usage = events.last().unwrap();
    assert_eq!(usage["choices"], json!([]), "the usage chunk is still sent");
    assert!(events[events.len() - 2]["choices"][0]["finish_reason"].is_string());

    // Non-streaming: a clean close (FIN) short of the content-length.
    let raw = post(addr, "missing_done", false).await;
    assert_eq!(raw.end, End::Eof);
    let (body, complete) = raw.body();
    assert!(!complete && !body.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn error_event() {
    let server = start(config()).await;
    let addr = server.local_addr();
    let raw = post(addr, "error_event", true).await;
    assert_eq!(raw.status(), 200);
    assert!(raw.body().1);
    let events = parse_events(&raw);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let error = &events[events.len() - 2];
    assert_eq!(error["error"]["message"], "simulated overload");
    assert_eq!(error["error"]["type"], "server_error");
    assert_eq!(error["error"]["code"], 503);
    let tokens = &events[..events.len() - 2];
    assert!(tokens.len() >= 5, "after some tokens");
    assert!(tokens
        .iter()
        .all(|e| e["choices"][0]["finish_reason"].is_null()));

    let raw = post(addr, "error_event", false).await;
    assert_eq!(raw.status(), 200);
    assert_eq!(parse(&raw.body().0)["error"]["code"], 503);
    server.shutdown().await;
}

#[tokio::test]
async fn non_sse_body() {
    let server = start(config()).await;
    for stream in [true, false] {
        let raw = post(server.local_addr(), "non_sse_body", stream).await;
        assert_eq!(raw.status(), 200);
        assert!(raw.header("content-type").unwrap().starts_with("text/html"));
        let (body, complete) = raw.body();
        assert!(complete);
        assert!(body.starts_with(b"<!DOCTYPE html>"));
    }
    server.shutdown().await;
}

#[tokio::test]
async fn oversized_event() {
    // The default size: 8 MiB.
    let server = start(config()).await;
    let addr = server.local_addr();
    let raw = post(addr, "oversized_event", true).await;
    let events = raw.events();
    let size = |e: &Vec<u8>| e.len() + "data: \n\n".len();
    let big: Vec<&Vec<u8>> = events.iter().filter(|e| size(e) > 4096).collect();
    assert_eq!(big.len(), 1);
    let want = 8 << 20;
    assert!((want..want + 4).contains(&size(big[0])), "{}", size(big[0]));
    let chunk = parse(big[0]);
    let delta = &chunk["choices"][0]["delta"];
    let text = delta["content"]
        .as_str()
        .or(delta["reasoning_content"].as_str())
        .unwrap();
    assert!(text.len() > 8_000_000);
    // Valid, and the padding is blank: the words still add up.
    assert_whole_stream(&parse_events(&raw));

    let raw = post(addr, "oversized_event", false).await;
    let (body, complete) = raw.body();
    assert!(complete);
    assert!(body.len() >= want);
    parse(&body);
    server.shutdown().await;
}

#[tokio::test]
async fn slow_headers() {
    let server = start(config()).await;
    let addr = server.local_addr();
    for stream in [true, false] {
        let raw = post(addr, "slow_headers", stream).await;
        let first_byte = raw.reads[0].0;
        assert!(first_byte - raw.sent >= Duration::from_millis(400));
        assert_eq!(raw.status(), 200);
        if stream {
            assert_whole_stream(&parse_events(&raw));
        } else {
            assert!(parse(&raw.body().0)["usage"].is_object());
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn completions_endpoint_gets_faults_too() {
    let server = start(config()).await;
    let body = json!({"model": "m", "prompt": "once upon a time", "stream": true});
    let raw = raw_post(
        server.local_addr(),
        "/v1/completions",
        Some("invalid_utf8"),
        &body,
    )
    .await;
    let bad = raw
        .events()
        .iter()
        .filter(|e| std::str::from_utf8(e).is_err())
        .count();
    assert_eq!(bad, 1);
    let raw = raw_post(
        server.local_addr(),
        "/v1/completions",
        Some("http_503"),
        &body,
    )
    .await;
    assert_eq!(raw.status(), 503);
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_fault_header_is_a_400_naming_the_kinds() {
    let server = start(config()).await;
    let raw = post(server.local_addr(), "http_504", true).await;
    assert_eq!(raw.status(), 400);
    let body = parse(&raw.body().0);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("http_504"), "{message}");
    for kind in FaultKind::ALL {
        assert!(message.contains(kind.as_str()), "{message}");
    }
    server.shutdown().await;
}

/// What a client can tell about one quick non-streaming answer.
fn outcome(status: u16, content_type: &str) -> Option<FaultKind> {
    match (status, content_type) {
        (200, "application/json") => None,
        (200, _) => Some(FaultKind::NonSseBody),
        (429, _) => Some(FaultKind::Http429),
        (500, _) => Some(FaultKind::Http500),
        (503, _) => Some(FaultKind::Http503),
        other => panic!("unexpected answer {other:?}"),
    }
}

/// `n` non-streaming requests one after the other over one keep-alive
/// connection (so request i is sequence number i); the fault each showed.
async fn run_sequence(addr: SocketAddr, n: usize) -> Vec<Option<FaultKind>> {
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let body = Bytes::from(chat(false).to_string());
    let mut seen = Vec::with_capacity(n);
    for _ in 0..n {
        let req = Request::post("/v1/chat/completions")
            .header("host", "sim")
            .body(Full::new(body.clone()))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
        resp.into_body().collect().await.unwrap();
        seen.push(outcome(status, &ct));
    }
    seen
}

fn quick_faulty(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        ttft_ms: 0.0,
        tpot_ms: 0.0,
        reasoning_tokens: [1, 2],
        content_tokens: [1, 2],
        faults: BTreeMap::from([
            (FaultKind::Http503, 0.10),
            (FaultKind::Http429, 0.05),
            (FaultKind::Http500, 0.02),
            (FaultKind::NonSseBody, 0.08),
        ]),
        ..SimConfig::default()
    }
}

async fn stats(addr: SocketAddr) -> Value {
    let raw = {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /sim/stats HTTP/1.1\r\nhost: sim\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await.unwrap();
        buf
    };
    let start = memchr::memmem::find(&raw, b"\r\n\r\n").unwrap() + 4;
    parse(&raw[start..])
}

#[tokio::test]
async fn fractions_hold_over_a_seeded_run() {
    const N: usize = 2000;
    let server = start(quick_faulty(5)).await;
    let addr = server.local_addr();
    let seen = run_sequence(addr, N).await;
    let count = |k: Option<FaultKind>| seen.iter().filter(|s| **s == k).count();
    for (kind, p) in [
        (Some(FaultKind::Http503), 0.10),
        (Some(FaultKind::Http429), 0.05),
        (Some(FaultKind::Http500), 0.02),
        (Some(FaultKind::NonSseBody), 0.08),
        (None, 0.75),
    ] {
        // Within 5 standard deviations of the binomial mean.
        let mean = N as f64 * p;
        let sd = (N as f64 * p * (1.0 - p)).sqrt();
        let got = count(kind) as f64;
        assert!(
            (got - mean).abs() <= 5.0 * sd,
            "{kind:?}: {got} vs {mean} ± {sd}"
        );
    }
    // The server counted the same.
    let stats = stats(addr).await;
    assert_eq!(stats["requests"], N);
    assert_eq!(stats["forced"], 0);
    assert_eq!(stats["faults"]["http_503"], count(Some(FaultKind::Http503)));
    assert_eq!(
        stats["faults"]["non_sse_body"],
        count(Some(FaultKind::NonSseBody))
    );
    assert_eq!(stats["faults"]["reset_mid_stream"], 0);
    assert_eq!(stats["faults_total"], N - count(None));
    server.shutdown().await;
}

#[tokio::test]
async fn a_seed_repeats_the_fault_sequence() {
    let mut runs = Vec::new();
    for seed in [9, 9, 10] {
        let server = start(quick_faulty(seed)).await;
        runs.push(run_sequence(server.local_addr(), 300).await);
        server.shutdown().await;
    }
    assert_eq!(runs[0], runs[1]);
    assert_ne!(runs[0], runs[2]);
    assert!(runs[0].iter().any(Option::is_some));
}

#[tokio::test]
async fn the_header_overrides_the_fractions() {
    let server = start(SimConfig {
        faults: BTreeMap::from([(FaultKind::Http503, 1.0)]),
        ..quick_faulty(1)
    })
    .await;
    let addr = server.local_addr();
    assert_eq!(
        run_sequence(addr, 3).await,
        vec![Some(FaultKind::Http503); 3]
    );
    let raw = post(addr, "none", false).await;
    assert_eq!(raw.status(), 200);
    let raw = post(addr, "http_429", false).await;
    assert_eq!(raw.status(), 429);
    // A bad request is rejected before any fault, and counted apart.
    let raw = raw_post(addr, "/v1/chat/completions", None, &json!({"model": "m"})).await;
    assert_eq!(raw.status(), 400);
    let stats = stats(addr).await;
    assert_eq!(stats["requests"], 5);
    assert_eq!(stats["forced"], 2);
    assert_eq!(stats["rejected"], 1);
    assert_eq!(stats["faults"]["http_503"], 3);
    assert_eq!(stats["faults"]["http_429"], 1);
    server.shutdown().await;
}
