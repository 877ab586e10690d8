//! A reference streaming client, written the way lean Rust LLM benchmark
//! clients are: tokio, hyper-util's pooled client (what reqwest is built on),
//! every SSE event parsed with serde_json into a typed chunk, one timestamp
//! per text-carrying chunk kept per request. `bench/client_bench.py` runs it
//! against the same simulator as specreplay, in the same bench run, so their
//! CPU per chunk and memory per stream compare like with like.
//!
//!     cargo run --release -p specreplay-core --example reference_client -- stream URL CONCURRENCY REQUESTS WARMUP DURATION_S
//!     cargo run --release -p specreplay-core --example reference_client -- mem URL STREAMS SETTLE_S SAMPLE_S
//!     cargo run --release -p specreplay-core --example reference_client -- raw URL CONCURRENCY REQUESTS WARMUP DURATION_S
//!     cargo run --release -p specreplay-core --example reference_client -- raw-mem URL STREAMS SETTLE_S SAMPLE_S
//!
//! `stream`: closed loop, CONCURRENCY requests in flight until REQUESTS were
//! sent or DURATION_S passed. Prints one JSON line: chunks, CPU seconds
//! (getrusage around the run, connection set-up included, as for
//! specreplay: total, user, system), and per text chunk after the first
//! WARMUP requests its CLOCK_MONOTONIC µs at the frame's arrival (before
//! parsing) and the simulator's `sim_sent_us`, so the bench can compute the
//! same user-space stamp error it computes for the other clients.
//!
//! `mem`: a short warm-up, the base RSS, then STREAMS long requests at once;
//! RSS sampled every 250 ms from SETTLE_S to SETTLE_S + SAMPLE_S after their
//! start, with the number in flight; then it exits.
//!
//! `raw` and `raw-mem`: the same, by the floor client (`raw_request`): no
//! HTTP library, no parsing, no stamps. What reading these streams costs at
//! all on this machine, below which no client of this kind can go.
//!
//! URL is the server's `/v1` base. It is a bench: it asserts nothing, talks
//! to the URL it is given only (127.0.0.1 in the bench), and every loop is
//! bounded in count and time.

#![allow(clippy::print_stdout)] // a bench prints its figures

#[path = "process_stats.rs"]
mod process_stats;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use process_stats::{arg, chat_body, process_cpu_s, rss_kib, sample_rss};
use serde::Deserialize;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// One OpenAI chat chunk, as a typical client types it (owned strings).
#[derive(Deserialize)]
struct ChatChunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
    /// The simulator's send stamp (`send_timestamps`), for the error figure.
    #[serde(default)]
    sim_sent_us: Option<i64>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    #[allow(dead_code)] // parsed as a client would, not used here
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
}

#[derive(Deserialize)]
#[allow(dead_code)] // parsed as a client would, not used here
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// What one request kept: per text chunk, its arrival and the server's stamp.
#[derive(Default)]
struct Stream {
    arrivals_us: Vec<i64>,
    server_us: Vec<i64>,
    done: bool,
}

fn monotonic_us() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: CLOCK_MONOTONIC always exists; `ts` is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1_000
}

fn body(i: usize, max_tokens: u32) -> Bytes {
    Bytes::from(chat_body(i, max_tokens))
}

/// One streamed request: every complete SSE event is parsed as it arrives,
/// and every text-carrying chunk gets the time its frame arrived.
async fn one_request(client: &HttpClient, url: &hyper::Uri, body: Bytes) -> Option<Stream> {
    let request = hyper::Request::post(url.clone())
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(Full::new(body))
        .ok()?;
    let response = client.request(request).await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let mut body = response.into_body();
    let mut buf = BytesMut::new();
    let mut out = Stream::default();
    while let Some(frame) = body.frame().await {
        let frame = frame.ok()?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let arrived = monotonic_us();
        buf.extend_from_slice(data);
        // Events end with a blank line; the simulator, like vLLM, writes `\n\n`.
        while let Some(end) = memchr::memmem::find(&buf, b"\n\n") {
            let event = buf.split_to(end + 2);
            for line in event[..end].split(|&b| b == b'\n') {
                let Some(payload) = line.strip_prefix(b"data:") else {
                    continue;
                };
                let payload = payload.strip_prefix(b" ").unwrap_or(payload);
                if payload == b"[DONE]" {
                    out.done = true;
                    continue;
                }
                let chunk: ChatChunk = serde_json::from_slice(payload).ok()?;
                let text = chunk
                    .choices
                    .iter()
                    .filter_map(|c| c.delta.as_ref())
                    .any(|d| {
                        [&d.content, &d.reasoning_content, &d.reasoning]
                            .iter()
                            .any(|t| t.as_deref().is_some_and(|t| !t.is_empty()))
                    });
                if text {
                    out.arrivals_us.push(arrived);
                    out.server_us.push(chunk.sim_sent_us.unwrap_or(i64::MIN));
                }
                let _ = chunk.usage;
            }
        }
        if buf.remaining() > 1 << 20 {
            return None; // no event is this large: not an event stream
        }
    }
    out.done.then_some(out)
}

/// The floor: what reading the same streams costs with no HTTP library and no
/// parsing. One kept-alive TCP connection per worker, the request written by
/// hand, each read scanned only for the end of the response and for the
/// text-carrying deltas (`"reasoning_content":"` or a non-empty
/// `"content":"`), as the simulator writes them. Returns the text chunks of
/// the response, or None on any surprise.
async fn raw_request(
    tcp: &mut tokio::net::TcpStream,
    head: &[u8],
    buf: &mut Vec<u8>,
) -> Option<usize> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(head).await.ok()?;
    buf.clear();
    let mut chunks = 0;
    let reasoning = memchr::memmem::Finder::new(b"\"reasoning_content\":\"");
    let content = memchr::memmem::Finder::new(b"\"content\":\"");
    loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(4096);
        }
        if tcp.read_buf(buf).await.ok()? == 0 {
            return None;
        }
        // Only whole events are scanned; the chunked encoding ends with `0\r\n\r\n`.
        let Some(end) = memchr::memmem::rfind(buf, b"\n\n").map(|e| e + 2) else {
            continue;
        };
        let events = &buf[..end];
        chunks += reasoning.find_iter(events).count();
        chunks += content
            .find_iter(events)
            .filter(|&at| events.get(at + 11).is_some_and(|&b| b != b'"'))
            .count();
        if buf.ends_with(b"\r\n0\r\n\r\n") {
            return Some(chunks);
        }
        // Keep only what was not scanned yet.
        buf.drain(..end);
    }
}

/// Closed loop over raw connections (see `raw_request`).
async fn raw_closed_loop(
    url: hyper::Uri,
    concurrency: usize,
    requests: u64,
    duration: Duration,
    totals: Arc<Totals>,
) {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let authority = url.authority().expect("a host:port URL").to_string();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (totals, next, authority, path) = (
            totals.clone(),
            next.clone(),
            authority.clone(),
            url.path().to_string(),
        );
        workers.spawn(async move {
            let Ok(mut tcp) = tokio::net::TcpStream::connect(&authority).await else {
                totals.failed.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let _ = tcp.set_nodelay(true);
            let mut buf = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests || started.elapsed() >= duration {
                    break;
                }
                let body = chat_body(i as usize, 4096);
                let mut head = format!(
                    "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n\
                     accept: text/event-stream\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                head.extend_from_slice(&body);
                match raw_request(&mut tcp, &head, &mut buf).await {
                    Some(chunks) => {
                        totals.ok.fetch_add(1, Ordering::Relaxed);
                        totals.chunks.fetch_add(chunks, Ordering::Relaxed);
                    }
                    None => {
                        totals.failed.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
}

fn runtime() -> tokio::runtime::Runtime {
    // Like specreplay's engine runtime: one worker per core.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("reference")
        .build()
        .expect("a tokio runtime")
}

fn client(max_idle: usize) -> HttpClient {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle)
        .pool_idle_timeout(Duration::from_secs(90))
        .build(http)
}

#[derive(Default)]
struct Totals {
    ok: AtomicUsize,
    failed: AtomicUsize,
    chunks: AtomicUsize,
    /// (arrival µs, server µs) of the text chunks of requests past the warm-up.
    steady: Mutex<(Vec<i64>, Vec<i64>)>,
}

/// Closed loop: `concurrency` workers, each sending its next request when the
/// previous one ends.
async fn closed_loop(
    url: hyper::Uri,
    concurrency: usize,
    requests: u64,
    warmup: u64,
    duration: Duration,
    max_tokens: u32,
    totals: Arc<Totals>,
) {
    let client = client(concurrency);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (client, url, totals, next) =
            (client.clone(), url.clone(), totals.clone(), next.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests || started.elapsed() >= duration {
                    break;
                }
                match one_request(&client, &url, body(i as usize, max_tokens)).await {
                    Some(stream) => {
                        totals.ok.fetch_add(1, Ordering::Relaxed);
                        totals
                            .chunks
                            .fetch_add(stream.arrivals_us.len(), Ordering::Relaxed);
                        if i >= warmup {
                            let mut steady =
                                totals.steady.lock().unwrap_or_else(|e| e.into_inner());
                            steady.0.extend_from_slice(&stream.arrivals_us);
                            steady.1.extend_from_slice(&stream.server_us);
                        }
                    }
                    None => {
                        totals.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
}

/// The chat endpoint under the server's `/v1` base (argument 2).
fn chat_url(args: &[String]) -> hyper::Uri {
    let base: String = arg(args, 2, "URL");
    format!("{base}/chat/completions")
        .parse()
        .expect("a valid URL")
}

fn stream_mode(args: &[String]) {
    let url = chat_url(args);
    let (concurrency, requests): (usize, u64) =
        (arg(args, 3, "CONCURRENCY"), arg(args, 4, "REQUESTS"));
    let (warmup, duration_s): (u64, f64) = (arg(args, 5, "WARMUP"), arg(args, 6, "DURATION_S"));
    let rt = runtime();
    let duration = Duration::from_secs_f64(duration_s);
    let ((user0, sys0), wall0) = (process_cpu_s(), Instant::now());
    let totals = Arc::new(Totals::default());
    if args[1] == "raw" {
        rt.block_on(raw_closed_loop(
            url,
            concurrency,
            requests,
            duration,
            totals.clone(),
        ));
    } else {
        rt.block_on(closed_loop(
            url,
            concurrency,
            requests,
            warmup,
            duration,
            4096,
            totals.clone(),
        ));
    }
    let ((user1, sys1), wall) = (process_cpu_s(), wall0.elapsed().as_secs_f64());
    let steady = totals.steady.lock().unwrap_or_else(|e| e.into_inner());
    let chunks = totals.chunks.load(Ordering::Relaxed);
    println!(
        "{}",
        serde_json::json!({
            "requests_ok": totals.ok.load(Ordering::Relaxed),
            "requests_failed": totals.failed.load(Ordering::Relaxed),
            "chunks": chunks,
            "wall_s": wall,
            "cpu_s": user1 - user0 + sys1 - sys0,
            "user_s": user1 - user0,
            "sys_s": sys1 - sys0,
            "arrival_mono_us": steady.0,
            "server_us": steady.1,
        })
    );
}

fn mem_mode(args: &[String]) {
    let url = chat_url(args);
    let raw = args[1] == "raw-mem";
    let streams: usize = arg(args, 3, "STREAMS");
    let (settle_s, sample_s): (f64, f64) = (arg(args, 4, "SETTLE_S"), arg(args, 5, "SAMPLE_S"));
    let rt = runtime();
    let duration = Duration::from_secs(120);
    // Warm-up, as for the other clients: runtime threads, the pool, short answers.
    rt.block_on(closed_loop(
        url.clone(),
        4,
        8,
        0,
        duration,
        2,
        Arc::default(),
    ));
    let base = rss_kib();
    let totals = Arc::new(Totals::default());
    let started = Instant::now();
    let n = streams as u64;
    if raw {
        rt.spawn(raw_closed_loop(url, streams, n, duration, totals.clone()));
    } else {
        rt.spawn(closed_loop(
            url,
            streams,
            n,
            0,
            duration,
            4096,
            totals.clone(),
        ));
    }
    let in_flight = || {
        let (ok, failed) = (
            totals.ok.load(Ordering::Relaxed),
            totals.failed.load(Ordering::Relaxed),
        );
        n - (ok + failed) as u64
    };
    let (samples, counts) = sample_rss(started, settle_s, sample_s, in_flight);
    println!(
        "{}",
        serde_json::json!({"rss_base_kib": base, "rss_samples_kib": samples, "in_flight": counts})
    );
    // Exit without waiting for the streams: the process's end closes them.
    std::process::exit(0);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("stream" | "raw") => stream_mode(&args),
        Some("mem" | "raw-mem") => mem_mode(&args),
        _ => {
            eprintln!("usage: reference_client stream URL CONCURRENCY REQUESTS WARMUP DURATION_S | mem URL STREAMS SETTLE_S SAMPLE_S");
            std::process::exit(2);
        }
    }
}
