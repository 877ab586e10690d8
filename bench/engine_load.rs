//! specreplay's engine alone, without Python: a closed-loop point against a
//! server in another process, drained into Arrow batches on the main thread
//! as the binding drains them. For profiles (`perf record`, `valgrind
//! --tool=callgrind`, `heaptrack`), where the Python around the engine is
//! noise.
//!
//!     cargo run --release -p specreplay-core --example engine_load -- stream URL CONCURRENCY REQUESTS [DURATION_S]
//!     cargo run --release -p specreplay-core --example engine_load -- mem URL STREAMS SETTLE_S SAMPLE_S
//!
//! URL is the server's `/v1` base (`bench/client_bench.py _sim CONFIG` serves
//! one and prints it).
//!
//! `stream` prints one JSON line: requests, text chunks, CPU seconds of the
//! process over the run (getrusage: total, user, system), CPU µs per chunk, the share of chunks
//! with a kernel stamp. `mem` runs a short warm-up, takes the base RSS, starts
//! STREAMS requests at once and samples RSS every 250 ms from SETTLE_S to
//! SETTLE_S + SAMPLE_S after their start, then cancels them and exits.
//! Asserts nothing; bounded by REQUESTS and DURATION_S (default 60).

#![allow(clippy::print_stdout)] // a bench prints its figures

#[path = "process_stats.rs"]
mod process_stats;

use std::time::{Duration, Instant};

use process_stats::{arg, chat_body, process_cpu_s, sample_rss};
use specreplay_core::engine::batch::to_record_batch;
use specreplay_core::engine::{self, EngineRun, PreparedRequest, RunSpec};
use tokio::runtime::Runtime;

/// The bench's 64 prompts (client_bench.payloads).
fn prepared(url: &str, max_tokens: u32) -> Vec<PreparedRequest> {
    (0..64)
        .map(|i| {
            PreparedRequest::new(
                format!("q{i}"),
                "chat",
                &format!("{url}/chat/completions"),
                chat_body(i, max_tokens),
                0.0,
            )
            .expect("a valid request")
        })
        .collect()
}

fn start(rt: &Runtime, url: &str, concurrency: usize, requests: u64, max_tokens: u32) -> EngineRun {
    let spec: RunSpec = serde_json::from_value(serde_json::json!({
        "load": {"mode": "concurrency", "concurrency": concurrency},
        "num_requests": requests,
        "duration_s": 60,
        "timeout_s": 120,
    }))
    .expect("a valid spec");
    engine::start(spec, prepared(url, max_tokens), rt.handle()).expect("the run starts")
}

/// Drains the run as the binding does (Arrow batches of up to 4096 rows):
/// (rows, failed, chunks, chunks with a kernel stamp).
fn drain(rt: &Runtime, run: &mut EngineRun) -> (usize, usize, usize, usize) {
    let (mut rows, mut failed, mut chunks, mut kernel) = (0, 0, 0, 0);
    while let Some(records) = rt.block_on(run.next_records(4096, Duration::from_millis(250))) {
        for r in &records {
            failed += usize::from(r.error.is_some());
            chunks += r.chunks.len();
            kernel += r.chunks.iter().filter(|c| c.delay_us.is_some()).count();
        }
        rows += records.len();
        if !records.is_empty() {
            to_record_batch(&records).expect("a batch");
        }
    }
    (rows, failed, chunks, kernel)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode: String = arg(&args, 1, "MODE");
    let url: String = arg(&args, 2, "URL");
    // The binding's engine runtime (specreplay-py's runtime.rs): one worker per core.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("specreplay")
        .build()
        .expect("a tokio runtime");
    match mode.as_str() {
        "stream" => {
            let concurrency: usize = arg(&args, 3, "CONCURRENCY");
            let requests: u64 = arg(&args, 4, "REQUESTS");
            let ((user0, sys0), wall0) = (process_cpu_s(), Instant::now());
            let mut run = start(&rt, &url, concurrency, requests, 4096);
            let (rows, failed, chunks, kernel) = drain(&rt, &mut run);
            let (user1, sys1) = process_cpu_s();
            let (cpu, wall) = (user1 - user0 + sys1 - sys0, wall0.elapsed().as_secs_f64());
            println!(
                "{}",
                serde_json::json!({
                    "requests": rows, "failed": failed, "chunks": chunks, "wall_s": wall, "cpu_s": cpu,
                    "user_s": user1 - user0, "sys_s": sys1 - sys0,
                    "cpu_us_per_chunk": cpu * 1e6 / chunks.max(1) as f64,
                    "kernel_stamped": kernel as f64 / chunks.max(1) as f64,
                })
            );
        }
        "mem" => {
            let streams: usize = arg(&args, 3, "STREAMS");
            let (settle_s, sample_s): (f64, f64) =
                (arg(&args, 4, "SETTLE_S"), arg(&args, 5, "SAMPLE_S"));
            drain(&rt, &mut start(&rt, &url, 4, 8, 2));
            let base = process_stats::rss_kib();
            let started = Instant::now();
            let run = start(&rt, &url, streams, streams as u64, 4096);
            let progress = run.progress_handle();
            let (samples, counts) = sample_rss(started, settle_s, sample_s, || {
                let p = progress.snapshot();
                p.sent - p.finished
            });
            println!(
                "{}",
                serde_json::json!({"rss_base_kib": base, "rss_samples_kib": samples, "in_flight": counts})
            );
            std::process::exit(0);
        }
        _ => panic!("MODE is stream or mem; see the module doc"),
    }
}
