//! Kernel receive stamps and preconnected connections, end to end against the
//! simulator over plain TCP and HTTP/1.1 (TLS and HTTP/2: tests/test_tls.py).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use specreplay_core::engine::record::StampSource;
use specreplay_core::engine::{self, PreparedRequest, RequestRecord, RunSpec};
use specreplay_core::sim::{SimConfig, SimServer};

mod common;
use common::drain;

fn requests(url: &str, n: usize) -> Vec<PreparedRequest> {
    (0..n)
        .map(|i| {
            let body = serde_json::json!({
                "model": "m",
                "stream": true,
                "messages": [{"role": "user", "content": format!("question {i}")}],
            });
            PreparedRequest::new(
                format!("r{i}"),
                "chat",
                url,
                body.to_string().into_bytes(),
                0.0,
            )
            .unwrap()
        })
        .collect()
}

fn spec(concurrency: usize, n: u64, preconnect: Option<bool>, server_stamps: bool) -> RunSpec {
    let json = serde_json::json!({
        "load": {"mode": "concurrency", "concurrency": concurrency},
        "num_requests": n,
        "timeout_s": 30.0,
        "server_stamps": server_stamps,
        "preconnect": preconnect,
    });
    serde_json::from_value(json).unwrap()
}

async fn sim(send_timestamps: bool) -> SimServer {
    let config = SimConfig {
        ttft_ms: 5.0,
        prefill_us_per_token: 0.0,
        tpot_ms: 2.0,
        reasoning_tokens: [5, 10],
        content_tokens: [3, 6],
        send_timestamps,
        ..SimConfig::default()
    };
    SimServer::start(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
}

async fn run(spec: RunSpec, requests: Vec<PreparedRequest>) -> Vec<RequestRecord> {
    let run = engine::start(spec, requests, &tokio::runtime::Handle::current()).unwrap();
    let mut out = drain(run).await;
    out.sort_by_key(|r| r.request_index);
    out
}

/// A TCP relay in front of `upstream` that counts the connections it accepts.
async fn counting_relay(upstream: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (addr, accepted)
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_chunk_has_the_kernel_stamp_between_the_servers_write_and_the_engines_read() {
    let server = sim(true).await;
    let url = format!("http://{}/v1/chat/completions", server.local_addr());
    let records = run(spec(4, 12, None, true), requests(&url, 12)).await;
    assert_eq!(records.len(), 12);
    for r in &records {
        assert_eq!(r.error, None, "{:?}", r.error);
        assert_eq!(StampSource::of(&r.chunks), Some(StampSource::Kernel));
        for (chunk, sent) in r.chunks.iter().zip(&r.server_stamps) {
            // The simulator stamps a chunk just before writing it, in this
            // process's clock: the kernel got it after that, and the engine
            // read it after the kernel got it.
            let sent = sent.expect("the simulator stamps every chunk");
            let delay = chunk.delay_us.expect("a kernel stamp");
            assert!(
                sent <= chunk.ts_us + 1,
                "sent {sent} > kernel {}",
                chunk.ts_us
            );
            assert!(
                delay >= 0,
                "the engine got the chunk {delay} µs before the kernel"
            );
        }
        assert_eq!(r.first_token_us, r.chunks.first().map(|c| c.ts_us));
        // The head's first byte (the first read after the request was
        // written, kernel-stamped too) comes after the send and not after
        // the first chunk.
        let (sent, head, first) = (
            r.sent_us.unwrap(),
            r.first_byte_us.unwrap(),
            r.first_token_us.unwrap(),
        );
        assert!(
            sent <= head && head <= first,
            "sent {sent}, head {head}, first chunk {first}"
        );
    }
    server.shutdown().await;
}

/// Eight requests, four at a time, through a relay that counts connections:
/// the records and the number of connections the server saw.
async fn through_relay(preconnect: Option<bool>) -> (Vec<RequestRecord>, usize) {
    let server = sim(false).await;
    let (relay, accepted) = counting_relay(server.local_addr()).await;
    let url = format!("http://{relay}/v1/chat/completions");
    let records = run(spec(4, 8, preconnect, false), requests(&url, 8)).await;
    server.shutdown().await;
    assert!(records.iter().all(|r| r.error.is_none()), "{records:?}");
    (records, accepted.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preconnected_connections_carry_the_first_wave_and_its_rows_have_no_connect_time() {
    let (records, accepted) = through_relay(None).await;
    // The first four requests went out on the four connections opened before
    // the clock. A request that found no idle connection later (hyper returns
    // one to the pool a moment after its body ends) opened its own and says so.
    assert!(
        records[..4].iter().all(|r| r.connect_us.is_none()),
        "{:?}",
        records
    );
    let connected = records.iter().filter(|r| r.connect_us.is_some()).count();
    // A connection hyper-util opened for a request that then took an idle
    // one is kept idle and may serve nobody: no row claims it.
    assert!(
        accepted >= 4 + connected,
        "{accepted} connections, {connected} claimed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_preconnect_the_first_wave_connects_and_reports_it() {
    let (records, accepted) = through_relay(Some(false)).await;
    for r in &records[..4] {
        let us = r
            .connect_us
            .expect("a first-wave request opened its connection");
        assert!(us > 0 && us < 10_000_000, "{us}");
    }
    let connected = records.iter().filter(|r| r.connect_us.is_some()).count();
    assert!(
        connected >= 4 && accepted >= connected,
        "{accepted} connections, {connected} claimed"
    );
}
