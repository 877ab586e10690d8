//! How fast a prediction runs: simulated seconds per wall second of
//! `specreplay_core::predict::predict_point` at 1,000 concurrent streams
//! (closed loop), the records built as a replay's (docs/predict.md, "Speed").
//!
//! `cargo run --release -p specreplay-core --example predict_speed -- [STREAMS] [SIMULATED_S]`

#![allow(clippy::print_stdout)] // a bench prints its figures

use std::time::Instant;

use specreplay_core::engine::{PreparedRequest, RunSpec};
use specreplay_core::predict::{predict_point, ServerModel};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let streams: usize = args.get(1).map_or(1000, |a| a.parse().expect("STREAMS"));
    let simulated_s: f64 = args
        .get(2)
        .map_or(600.0, |a| a.parse().expect("SIMULATED_S"));
    // A GPU-server-like model: 20 ms step, +0.2% per extra sequence, 50 µs per prompt token.
    let model: ServerModel = serde_json::from_value(serde_json::json!({
        "frontend_us": 2000.0, "frontend_jitter_us": 1000.0, "prefill_us_per_token": 50.0,
        "step_us": 20000.0, "batch_step_cost": 0.002, "max_num_seqs": 1024,
    }))
    .expect("model");
    // Enough requests that the loop never runs dry: 256 tokens each, about 15 s per request.
    let requests = (streams as f64 * simulated_s / 10.0) as usize + streams;
    let prompt: String = (0..500).map(|i| format!("w{} ", i % 97)).collect();
    let prepared: Vec<(PreparedRequest, u64)> = (0..requests)
        .map(|i| {
            let body = serde_json::json!({
                "messages": [{"role": "user", "content": format!("{i} {prompt}")}],
                "max_tokens": 256, "min_tokens": 256, "ignore_eos": true, "stream": true,
            });
            let req = PreparedRequest::new(
                format!("r{i}"),
                "chat",
                "http://predicted.invalid/v1/chat/completions",
                serde_json::to_vec(&body).expect("body"),
                0.0,
            )
            .expect("request");
            (req, 0)
        })
        .collect();
    let spec: RunSpec = serde_json::from_value(serde_json::json!({
        "load": {"mode": "concurrency", "concurrency": streams}, "duration_s": simulated_s,
    }))
    .expect("spec");
    let started = Instant::now();
    let (records, stats) = predict_point(&model, &spec, &prepared, 0).expect("prediction");
    let wall_s = started.elapsed().as_secs_f64();
    let chunks: usize = records.iter().map(|r| r.chunks.len()).sum();
    let span_s = stats.span_us as f64 / 1e6;
    println!(
        "streams {streams}  simulated {span_s:.0} s  wall {wall_s:.2} s  -> {:.0} simulated s per wall s  \
         ({} requests, {} iterations, {} chunks, peak running {})",
        span_s / wall_s, records.len(), stats.iterations, chunks, stats.peak_running
    );
}
