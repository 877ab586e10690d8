//! Capacity of the simulated server: can one core keep the chunk schedule of
//! N concurrent streams? Prints figures; asserts nothing.
//!
//!     cargo run --release -p specreplay-core --example sim_capacity -- [N...] [--tpot-ms X] [--capacity]
//!     cargo run --release -p specreplay-core --example sim_capacity -- --knee
//!
//! `--knee` measures the capacity model's knee instead: p99 TTFT of
//! constant-rate runs at fractions of the rate the config implies (the
//! example of "The knee" in docs/simulator.md).
//!
//! `--capacity` runs the same streams through the capacity model's engine
//! (one batch as large as N, no step cost per sequence, so the schedule is the
//! same) to measure what the scheduler costs; a stream's first token then
//! waits for the next iteration boundary, up to one step more.
//!
//! The server runs alone on a current-thread (1-worker) runtime in its own
//! thread; the clients run on another current-thread runtime (the machine
//! has 2 cores). Clients speak raw HTTP/1.1 over TCP, open their connections
//! over a short ramp (a burst of thousands of SYNs overflows the listen
//! backlog and measures the kernel, not the simulator), and read the
//! `sim_sent_us` stamp the server puts on every chunk.
//!
//! Figures per N (µs):
//! - first-token lateness: stamp of the first chunk − (client send + ttft);
//!   an upper bound of the server's lateness (it includes connect and accept).
//! - step lateness: stamp of step k − (stamp of step 0 + k × tpot): how late
//!   the decode steps drift from their absolute schedule once a stream runs.
//! - delivery lag: client read time − stamp (how far behind the client reads).

#![allow(clippy::print_stdout)] // a bench prints its figures

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use memchr::memmem;
use specreplay_core::clock::now_us;
use specreplay_core::sim::{Capacity, SimConfig, SimServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TTFT_MS: f64 = 100.0;
/// Default decode step; `--tpot-ms X` changes it.
const TPOT_MS: f64 = 40.0;
const REASONING: u32 = 100;
const CONTENT: u32 = 100;
/// Time over which the N connections are opened.
const RAMP: Duration = Duration::from_secs(2);

#[derive(Default)]
struct StreamResult {
    send_us: i64,
    stamps: Vec<i64>,
    lags: Vec<i64>,
    ok: bool,
}

async fn one_stream(addr: SocketAddr, body: &'static str) -> StreamResult {
    let mut out = StreamResult::default();
    let Ok(mut tcp) = TcpStream::connect(addr).await else {
        return out;
    };
    let _ = tcp.set_nodelay(true);
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    out.send_us = now_us();
    if tcp.write_all(request.as_bytes()).await.is_err() {
        return out;
    }
    let finder = memmem::Finder::new(b"\"sim_sent_us\":");
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = [0u8; 4096];
    loop {
        let n = match tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let recv = now_us();
        buf.extend_from_slice(&chunk[..n]);
        // Take every complete stamp; keep the unscanned tail for the next read.
        let mut consumed = 0;
        while let Some(at) = finder.find(&buf[consumed..]) {
            let start = consumed + at + finder.needle().len();
            let digits = buf[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if start + digits >= buf.len() {
                break; // the number may continue in the next read
            }
            let value: i64 = std::str::from_utf8(&buf[start..start + digits])
                .unwrap()
                .parse()
                .unwrap();
            out.stamps.push(value);
            out.lags.push(recv - value);
            consumed = start + digits;
        }
        if memmem::find(&buf[consumed..], b"data: [DONE]").is_some() {
            out.ok = true;
        }
        buf.drain(..consumed);
        if buf.len() > 256 {
            // No stamp in a long stretch: keep only what a split pattern could need.
            buf.drain(..buf.len() - 32);
        }
    }
    out
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(v: &mut [i64]) -> String {
    v.sort_unstable();
    format!(
        "p50 {:>7} p99 {:>7} max {:>8}",
        pct(v, 0.5),
        pct(v, 0.99),
        v.last().copied().unwrap_or(0)
    )
}

async fn run(addr: SocketAddr, n: usize, tpot_ms: f64) {
    let body: &'static str = Box::leak(
        serde_json::json!({
            "model": "specreplay-sim",
            "messages": [{"role": "user", "content": "capacity"}],
            "stream": true,
        })
        .to_string()
        .into_boxed_str(),
    );
    let gap = RAMP / n as u32;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep_until((started + gap * i as u32).into()).await;
        tasks.push(tokio::spawn(one_stream(addr, body)));
    }
    let mut results = Vec::with_capacity(n);
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let elapsed = started.elapsed();

    let step_us = (tpot_ms * 1000.0) as i64;
    let (mut first_late, mut step_late, mut lags) = (Vec::new(), Vec::new(), Vec::new());
    let mut chunks = 0usize;
    let mut spans = Vec::new();
    for r in results.iter().filter(|r| r.ok && r.stamps.len() >= 2) {
        // stamps[0] is the role chunk, written together with step 0 (stamps[1]).
        let steps = &r.stamps[1..];
        first_late.push(steps[0] - (r.send_us + (TTFT_MS * 1000.0) as i64));
        for (k, s) in steps.iter().enumerate().skip(1) {
            step_late.push(s - (steps[0] + k as i64 * step_us));
        }
        lags.extend_from_slice(&r.lags);
        chunks += r.stamps.len();
        spans.push((r.stamps[0], *r.stamps.last().unwrap()));
    }
    // Peak number of streams between their first and last chunk at once.
    let mut edges: Vec<(i64, i32)> = spans.iter().flat_map(|&(a, b)| [(a, 1), (b, -1)]).collect();
    edges.sort_unstable();
    let (mut live, mut peak) = (0, 0);
    for (_, d) in edges {
        live += d;
        peak = peak.max(live);
    }
    let ok = results.iter().filter(|r| r.ok).count();
    println!(
        "N={n:>5}  completed {ok:>5}  peak concurrent {peak:>5}  chunks {chunks:>7} in {:.1} s ({:.0}/s)",
        elapsed.as_secs_f64(),
        chunks as f64 / elapsed.as_secs_f64()
    );
    println!("    first-token lateness µs  {}", summary(&mut first_late));
    println!("    step lateness µs         {}", summary(&mut step_late));
    println!("    delivery lag µs          {}", summary(&mut lags));
}

/// A server with `config` on its own current-thread runtime in its own
/// thread; send on the returned channel to stop it.
fn spawn_server(
    config: SimConfig,
) -> (
    std::thread::JoinHandle<()>,
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let server = SimServer::start(config, "127.0.0.1:0".parse().unwrap())
                .await
                .unwrap();
            addr_tx.send(server.local_addr()).unwrap();
            let _ = stop_rx.await;
            server.shutdown().await;
        });
    });
    (thread, addr_rx.recv().unwrap(), stop_tx)
}

/// Fractions of the knee the `--knee` mode runs at, and how long each runs.
const KNEE_FRACTIONS: [f64; 7] = [0.5, 0.8, 0.9, 0.95, 1.05, 1.1, 1.2];
const KNEE_RUN: Duration = Duration::from_secs(2);

/// p99 TTFT (client read of the first chunk − send), ms, of constant
/// arrivals at `rate` for `KNEE_RUN`.
async fn p99_ttft_ms(addr: SocketAddr, body: &'static str, rate: f64) -> (f64, usize) {
    let n = (rate * KNEE_RUN.as_secs_f64()) as usize;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep_until((started + Duration::from_secs_f64(i as f64 / rate)).into()).await;
        tasks.push(tokio::spawn(one_stream(addr, body)));
    }
    let mut ttft = Vec::with_capacity(n);
    for t in tasks {
        let r = t.await.unwrap();
        if r.ok && !r.stamps.is_empty() {
            ttft.push(r.stamps[0] + r.lags[0] - r.send_us);
        }
    }
    ttft.sort_unstable();
    (pct(&ttft, 0.99) as f64 / 1000.0, ttft.len())
}

fn knee_mode() {
    let config = SimConfig {
        ttft_ms: 10.0,
        prefill_us_per_token: 100.0,
        tpot_ms: 5.0,
        send_timestamps: true,
        capacity: Some(Capacity {
            max_num_seqs: 8,
            kv_cache_tokens: 0,
            batch_step_cost: 0.05,
            ..Capacity::default()
        }),
        ..SimConfig::default()
    };
    // Ten prompt tokens (six words and the chat template's four), ten answer tokens.
    let body: &'static str = Box::leak(
        serde_json::json!({
            "messages": [{"role": "user", "content": "a b c d e f"}],
            "max_tokens": 10, "min_tokens": 10, "ignore_eos": true, "stream": true,
        })
        .to_string()
        .into_boxed_str(),
    );
    let knee = config.knee_rate(config.capacity.as_ref().unwrap(), 10, 10);
    println!(
        "sim_capacity --knee: tpot 5 ms, prefill 100 µs/token, P = O = 10, max_num_seqs 8, \
         batch_step_cost 0.05: knee {knee:.1} req/s; constant arrivals, {KNEE_RUN:?} per rate"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A first round warms the process (its first connections and tasks are
    // slower) and is not reported.
    for (round, fraction) in std::iter::once(0.5).chain(KNEE_FRACTIONS).enumerate() {
        let (thread, addr, stop) = spawn_server(config.clone());
        let (p99, n) = rt.block_on(p99_ttft_ms(addr, body, fraction * knee));
        if round > 0 {
            println!("    rate {fraction:.2} × knee: p99 TTFT {p99:>7.1} ms over {n} requests");
        }
        let _ = stop.send(());
        thread.join().unwrap();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--knee") {
        knee_mode();
        return;
    }
    let mut tpot_ms = TPOT_MS;
    let mut ns = Vec::new();
    let mut capacity = None;
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--capacity" {
            capacity = Some(Capacity {
                max_num_seqs: specreplay_core::sim::capacity::MAX_NUM_SEQS,
                kv_cache_tokens: 0,
                batch_step_cost: 0.0,
                ..Capacity::default()
            });
        } else if args[i] == "--tpot-ms" {
            tpot_ms = args
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .expect("--tpot-ms needs a number");
            i += 1;
        } else {
            ns.push(
                args[i]
                    .parse::<usize>()
                    .expect("arguments: N... [--tpot-ms X] [--capacity], or --knee"),
            );
        }
        i += 1;
    }
    if ns.is_empty() {
        ns = vec![1000, 2000, 4000];
    }

    let config = SimConfig {
        ttft_ms: TTFT_MS,
        prefill_us_per_token: 0.0,
        tpot_ms,
        reasoning_tokens: [REASONING, REASONING],
        content_tokens: [CONTENT, CONTENT],
        send_timestamps: true,
        capacity,
        ..SimConfig::default()
    };
    let model = if config.capacity.is_some() {
        "capacity model on"
    } else {
        "no capacity model"
    };
    let (server_thread, addr, stop_tx) = spawn_server(config);
    println!(
        "sim_capacity: server on 1 current-thread runtime ({model}); {} tokens per stream, \
         ttft {TTFT_MS} ms, tpot {tpot_ms} ms, connections opened over {:?}",
        REASONING + CONTENT,
        RAMP
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for n in ns {
        rt.block_on(run(addr, n, tpot_ms));
    }
    let _ = stop_tx.send(());
    server_thread.join().unwrap();
}
