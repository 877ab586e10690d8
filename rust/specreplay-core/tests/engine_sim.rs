//! The engine against the simulator, in Rust alone: every scheduled request
//! comes back as one record, counts add up, and failures become rows.

use std::net::SocketAddr;
use std::time::Duration;

use specreplay_core::engine::{self, record::ErrorKind, LoadMode, PreparedRequest, RunSpec};
use specreplay_core::sim::{SimConfig, SimServer};

mod common;
use common::drain;

fn sim_config() -> SimConfig {
    SimConfig {
        ttft_ms: 10.0,
        prefill_us_per_token: 0.0,
        tpot_ms: 1.0,
        reasoning_tokens: [10, 20],
        content_tokens: [3, 6],
        ..SimConfig::default()
    }
}

fn requests(url: &str, n: usize, max_tokens: Option<u32>) -> Vec<PreparedRequest> {
    (0..n)
        .map(|i| {
            let mut body = serde_json::json!({
                "model": "m",
                "stream": true,
                "stream_options": {"include_usage": true, "continuous_usage_stats": true},
                "messages": [{"role": "user", "content": format!("question {i}")}],
            });
            if let Some(m) = max_tokens {
                body["max_tokens"] = m.into();
            }
            PreparedRequest::new(
                format!("r{i}"),
                "chat",
                url,
                body.to_string().into_bytes(),
                i as f64,
            )
            .unwrap()
        })
        .collect()
}

fn spec(load: LoadMode, num_requests: Option<u64>) -> RunSpec {
    RunSpec {
        headers: vec![],
        load,
        num_requests,
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

async fn start_sim() -> SimServer {
    SimServer::start(sim_config(), SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
}

/// A token every 50 ms: requests are still streaming when a test ends them.
async fn start_slow_sim() -> SimServer {
    let config = SimConfig {
        tpot_ms: 50.0,
        ..sim_config()
    };
    SimServer::start(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_returns_every_request_with_consistent_counts() {
    let sim = start_sim().await;
    let url = format!("http://{}/v1/chat/completions", sim.local_addr());
    let run = engine::start(
        spec(LoadMode::Concurrency { concurrency: 4 }, Some(20)),
        requests(&url, 8, None),
        &tokio::runtime::Handle::current(),
    )
    .unwrap();
    let records = drain(run).await;
    assert_eq!(records.len(), 20);
    let mut indices: Vec<i64> = records.iter().map(|r| r.request_index).collect();
    indices.sort();
    assert_eq!(indices, (0..20).collect::<Vec<_>>());
    for r in &records {
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.http_status, Some(200));
        let (reasoning, content, output) = (
            r.reasoning_tokens.unwrap(),
            r.content_tokens.unwrap(),
            r.output_tokens.unwrap(),
        );
        assert_eq!(reasoning + content, output);
        assert!((10..=20).contains(&reasoning), "{reasoning}");
        assert!((3..=6).contains(&content), "{content}");
        assert_eq!(
            r.chunks.iter().map(|c| i64::from(c.tokens)).sum::<i64>(),
            output
        );
        assert!(r.sent_us.unwrap() <= r.first_byte_us.unwrap());
        assert!(r.first_token_us.unwrap() <= r.last_token_us.unwrap());
        assert!(r.last_token_us.unwrap() <= r.end_us.unwrap());
    }
    // Looping over an 8-request trace names the laps.
    assert!(records.iter().any(|r| r.trace_id == "r3#2"));
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_text_is_kept_only_when_asked() {
    let sim = start_sim().await;
    let url = format!("http://{}/v1/chat/completions", sim.local_addr());
    for keep in [false, true] {
        let mut run_spec = spec(LoadMode::Concurrency { concurrency: 4 }, Some(8));
        run_spec.chunk_text = keep;
        let run = engine::start(
            run_spec,
            requests(&url, 8, None),
            &tokio::runtime::Handle::current(),
        )
        .unwrap();
        for r in drain(run).await {
            assert!(r.error.is_none(), "{:?}", r.error);
            assert_eq!(r.chunk_text_chars.len(), r.chunks.len());
            let chars: u32 = r.chunk_text_chars.iter().sum();
            assert!(chars > 0);
            // The text is every chunk's, whole, in order: its length in
            // characters is the chunks' sum.
            let kept = r.chunk_text.chars().count() as u32;
            assert_eq!(kept, if keep { chars } else { 0 });
        }
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_sends_on_schedule_and_budget_trap_has_no_content() {
    let sim = start_sim().await;
    let url = format!("http://{}/v1/chat/completions", sim.local_addr());
    let load = LoadMode::Rate {
        rate: 200.0,
        arrival: engine::Arrival::Constant,
        burstiness: 1.0,
    };
    let run = engine::start(
        spec(load, Some(10)),
        requests(&url, 10, Some(5)),
        &tokio::runtime::Handle::current(),
    )
    .unwrap();
    let mut records = drain(run).await;
    records.sort_by_key(|r| r.request_index);
    assert_eq!(records.len(), 10);
    for (i, r) in records.iter().enumerate() {
        // Constant 200/s: one request every 5 ms.
        assert_eq!(r.scheduled_us - records[0].scheduled_us, 5_000 * i as i64);
        assert!(r.sent_us.unwrap() >= r.scheduled_us);
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        assert_eq!((r.reasoning_tokens, r.content_tokens), (Some(5), Some(0)));
        assert_eq!(r.first_content_us, None);
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_and_http_errors_become_rows() {
    // A port with no listener: every request a `connect` error row.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://{dead}/v1/chat/completions");
    let run = engine::start(
        spec(LoadMode::Concurrency { concurrency: 2 }, Some(4)),
        requests(&url, 2, None),
        &tokio::runtime::Handle::current(),
    )
    .unwrap();
    let records = drain(run).await;
    assert_eq!(records.len(), 4);
    assert!(records
        .iter()
        .all(|r| matches!(r.error, Some((ErrorKind::Connect, _))) && r.http_status.is_none()));

    // A wrong path on a live server: `http` error rows with the status.
    let sim = start_sim().await;
    let url = format!("http://{}/v1/nope", sim.local_addr());
    let run = engine::start(
        spec(LoadMode::Concurrency { concurrency: 2 }, Some(2)),
        requests(&url, 2, None),
        &tokio::runtime::Handle::current(),
    )
    .unwrap();
    let records = drain(run).await;
    assert_eq!(records.len(), 2);
    for r in &records {
        assert_eq!(r.http_status, Some(404));
        let (kind, message) = r.error.as_ref().unwrap();
        assert_eq!(*kind, ErrorKind::Http);
        assert!(message.starts_with("HTTP 404"), "{message}");
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_turns_in_flight_requests_into_cancelled_rows() {
    let sim = start_slow_sim().await;
    let url = format!("http://{}/v1/chat/completions", sim.local_addr());
    let mut run = engine::start(
        spec(LoadMode::Concurrency { concurrency: 3 }, Some(30)),
        requests(&url, 3, None),
        &tokio::runtime::Handle::current(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    run.cancel();
    let mut records = Vec::new();
    while let Some(batch) = run.next_records(64, Duration::from_millis(100)).await {
        records.extend(batch);
    }
    // The three in flight came back cancelled, with what they had received.
    assert_eq!(records.len(), 3);
    for r in &records {
        assert!(matches!(r.error, Some((ErrorKind::Cancelled, _))));
        assert!(r.first_token_us.is_some());
        assert!(!r.chunks.is_empty());
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_request_timeout_ends_requests_mid_stream() {
    let sim = start_slow_sim().await;
    let url = format!("http://{}/v1/chat/completions", sim.local_addr());
    let mut spec = spec(LoadMode::Concurrency { concurrency: 3 }, Some(3));
    spec.timeout_s = Some(0.3);
    let run = engine::start(
        spec,
        requests(&url, 3, None),
        &tokio::runtime::Handle::current(),
    )
    .unwrap();
    let records = tokio::time::timeout(Duration::from_secs(10), drain(run))
        .await
        .expect("the timeout ended the run's requests");
    // Each had streamed some chunks (13 or more tokens at 50 ms each) when its
    // deadline ended it, and keeps them.
    assert_eq!(records.len(), 3);
    for r in &records {
        assert!(
            matches!(r.error, Some((ErrorKind::Timeout, _))),
            "{:?}",
            r.error
        );
        assert!(r.first_token_us.is_some());
        assert!(!r.chunks.is_empty());
    }
    sim.shutdown().await;
}

/// Reads one HTTP/1.1 request (head and Content-Length body); false at EOF.
async fn read_request(sock: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                return true;
            }
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_connection_the_server_closes_is_not_a_failed_request() {
    // Like llama.cpp's server: it announces keep-alive, answers one streamed
    // request per connection, and closes the connection when the next request
    // arrives on it. The engine sends that request again on a new connection.
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = connections.clone();
    let server = tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                if !read_request(&mut sock).await {
                    return;
                }
                let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n\
                            data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n\
                            data: [DONE]\n\n";
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: keep-alive\r\n\
                     keep-alive: timeout=5, max=100\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                sock.write_all(head.as_bytes()).await.unwrap();
                sock.write_all(body.as_bytes()).await.unwrap();
                // The next request on this connection gets no answer.
                read_request(&mut sock).await;
            });
        }
    });
    let url = format!("http://{addr}/v1/chat/completions");
    let run = engine::start(
        spec(LoadMode::Concurrency { concurrency: 1 }, Some(3)),
        requests(&url, 3, None),
        &tokio::runtime::Handle::current(),
    )
    .unwrap();
    let records = drain(run).await;
    server.abort();
    assert_eq!(records.len(), 3);
    for r in &records {
        assert_eq!(r.error, None, "{:?}", r.error);
        assert_eq!(r.output_tokens, Some(1));
    }
    // One connection per request: the two reused ones were closed and retried.
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_closes_after_every_stream_loses_no_request() {
    // cpp-httplib's way (llama.cpp's server): after the last chunk a FIN, up
    // to 100 ms of reading what still comes, then the close. Every request
    // that reuses such a connection races its close (docs/real-servers.md);
    // none may be lost. CLOSING_N=20000 makes it a stress run.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            sock.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                if !read_request(&mut sock).await {
                    return;
                }
                let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                    keep-alive: timeout=5, max=100\r\ntransfer-encoding: chunked\r\n\r\n";
                let _ = sock.write_all(head).await;
                for i in 0..20 {
                    let event = format!(
                        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"t{i}\"}}}}]}}\n\n"
                    );
                    let _ = sock
                        .write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
                        .await;
                }
                let last = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":20}}\n\n\
                            data: [DONE]\n\n";
                let tail = format!("{:x}\r\n{last}\r\n0\r\n\r\n", last.len());
                let _ = sock.write_all(tail.as_bytes()).await;
                let _ = sock.shutdown().await;
                let mut sink = [0u8; 4096];
                let drain = async { while matches!(sock.read(&mut sink).await, Ok(n) if n > 0) {} };
                let _ = tokio::time::timeout(Duration::from_millis(100), drain).await;
            });
        }
    });
    let n: usize = std::env::var("CLOSING_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let url = format!("http://{addr}/v1/chat/completions");
    let mut run_spec = spec(LoadMode::Concurrency { concurrency: 2 }, Some(n as u64));
    run_spec.timeout_s = Some(5.0);
    let run = engine::start(
        run_spec,
        requests(&url, n, None),
        &tokio::runtime::Handle::current(),
    )
    .unwrap();
    let records = drain(run).await;
    server.abort();
    assert_eq!(records.len(), n);
    let failed: Vec<_> = records
        .iter()
        .filter(|r| r.error.is_some() || r.output_tokens != Some(20))
        .map(|r| (r.request_index, &r.error, r.output_tokens))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {n} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
}
