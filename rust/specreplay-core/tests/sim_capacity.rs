//! The capacity model end to end: a real `SimServer` with `capacity` set, real
//! streaming clients over loopback, the server's own stamps (`sim_sent_us`)
//! to read its schedule, and `/metrics` for its queue. Every load loop is
//! bounded in count and time. Figures are compared with the formulas of
//! "Capacity model" in docs/simulator.md, with tolerances for a shared
//! machine (the schedule is computed in absolute time, so a late wake-up
//! delays a write but shifts nothing after it).

mod sim_support;

use std::time::{Duration, Instant};

use serde_json::json;
use serde_json::Value;
use sim_support::{chat, chat_with_fault, finished, fixed_length, metric, scrape, start, Reply};
use specreplay_core::sim::{Capacity, SimConfig};

/// Ten prompt tokens: six words and the chat template's four.
const PROMPT: &str = "a b c d e f";

fn config(capacity: Capacity) -> SimConfig {
    SimConfig {
        ttft_ms: 10.0,
        prefill_us_per_token: 0.0,
        tpot_ms: 8.0,
        send_timestamps: true,
        capacity: Some(capacity),
        ..SimConfig::default()
    }
}

/// The mix of the knee tests: 100 µs of prefill per prompt token, 5 ms
/// steps, 5% more per extra sequence decoding, `slots` sequences at most.
fn knee_config(slots: u32) -> SimConfig {
    SimConfig {
        prefill_us_per_token: 100.0,
        tpot_ms: 5.0,
        ..config(Capacity {
            max_num_seqs: slots,
            kv_cache_tokens: 0,
            batch_step_cost: 0.05,
            ..Capacity::default()
        })
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Gaps between consecutive token chunks, server side, in ms.
fn gaps_ms(reply: &Reply) -> Vec<f64> {
    reply
        .chunks
        .windows(2)
        .map(|w| (w[1].sent_us - w[0].sent_us) as f64 / 1000.0)
        .collect()
}

#[tokio::test]
async fn a_lone_request_keeps_its_own_schedule() {
    let server = start(config(Capacity {
        max_num_seqs: 8,
        batch_step_cost: 0.5,
        ..Capacity::default()
    }))
    .await;
    let reply = chat(server.local_addr(), &fixed_length(PROMPT, 20)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.chunks.len(), 20);
    // Alone in the batch: one step is tpot, whatever batch_step_cost says.
    let gap = median(gaps_ms(&reply));
    assert!((7.0..=9.5).contains(&gap), "median gap {gap} ms");
    server.shutdown().await;
}

#[tokio::test]
async fn decode_steps_slow_down_with_the_batch_as_configured() {
    // Six requests decoding together: a step is 8 ms × (1 + 0.1 × 5) = 12 ms.
    let server = start(config(Capacity {
        max_num_seqs: 16,
        batch_step_cost: 0.1,
        ..Capacity::default()
    }))
    .await;
    let addr = server.local_addr();
    let body = fixed_length(PROMPT, 40);
    let replies = concurrently(addr, &body, 6).await;
    // The steps that all six shared (away from either end: joins may be one
    // iteration apart).
    let mut shared = Vec::new();
    for r in &replies {
        assert_eq!(r.chunks.iter().map(|c| c.tokens).sum::<u64>(), 40);
        let g = gaps_ms(r);
        shared.extend_from_slice(&g[4..g.len() - 4]);
    }
    let step = median(shared);
    assert!(
        (11.0..=13.5).contains(&step),
        "median step {step} ms, want 12"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_queue_is_fifo_and_the_batch_is_capped() {
    let server = start(config(Capacity {
        max_num_seqs: 2,
        batch_step_cost: 0.0,
        ..Capacity::default()
    }))
    .await;
    let addr = server.local_addr();
    let body = fixed_length(PROMPT, 20);
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let body = body.clone();
        tasks.push(tokio::spawn(async move { chat(addr, &body).await }));
        // Arrivals in a known order.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    // All six past their frontend delay, the first two in their answers.
    tokio::time::sleep(Duration::from_millis(40)).await;
    let page = scrape(addr).await;
    assert_eq!(metric(&page, "vllm:num_requests_running", &[]), 2.0);
    assert_eq!(metric(&page, "vllm:num_requests_waiting", &[]), 4.0);
    let mut replies = Vec::new();
    for t in tasks {
        replies.push(t.await.unwrap());
    }
    // Pairs in arrival order: the next pair starts as the previous one ends.
    for i in 2..6 {
        let (earlier, later) = (&replies[i - 2], &replies[i]);
        assert!(
            later.first_token_us() >= earlier.last_token_us(),
            "request {i} started before request {} ended",
            i - 2
        );
        assert!(replies[i].first_token_us() >= replies[i - 1].first_token_us());
    }
    let page = scrape(addr).await;
    assert_eq!(metric(&page, "vllm:num_requests_running", &[]), 0.0);
    assert_eq!(metric(&page, "vllm:num_requests_waiting", &[]), 0.0);
    server.shutdown().await;
}

#[tokio::test]
async fn the_kv_budget_holds_requests_back() {
    // Each request holds 10 + 40 = 50 tokens: a budget of 120 fits two.
    let server = start(config(Capacity {
        max_num_seqs: 8,
        kv_cache_tokens: 120,
        batch_step_cost: 0.0,
        ..Capacity::default()
    }))
    .await;
    let addr = server.local_addr();
    let body = fixed_length(PROMPT, 40);
    let all = tokio::spawn(async move { concurrently(addr, &body, 4).await });
    tokio::time::sleep(Duration::from_millis(60)).await;
    let page = scrape(addr).await;
    assert_eq!(metric(&page, "vllm:num_requests_running", &[]), 2.0);
    assert_eq!(metric(&page, "vllm:num_requests_waiting", &[]), 2.0);
    let usage = metric(&page, "vllm:kv_cache_usage_perc", &[]);
    assert!((usage - 100.0 / 120.0).abs() < 1e-9, "{usage}");
    for reply in all.await.unwrap() {
        assert_eq!(reply.chunks.len(), 40);
    }
    // A request that could never fit is refused at once.
    let too_big = chat(addr, &fixed_length(PROMPT, 200)).await;
    assert_eq!(too_big.status, 400);
    assert!(
        too_big.body.contains("kv_cache_tokens 120"),
        "{}",
        too_big.body
    );
    server.shutdown().await;
}

/// Sends `n` copies of `body` at once and waits for every answer.
async fn concurrently(addr: std::net::SocketAddr, body: &Value, n: usize) -> Vec<Reply> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let body = body.clone();
            tokio::spawn(async move { chat(addr, &body).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// Sends fixed-length requests at a constant `rate` for `duration`; returns
/// the replies of those that finished within `limit` of the start.
async fn open_loop(
    addr: std::net::SocketAddr,
    body: &Value,
    rate: f64,
    duration: Duration,
    limit: Duration,
) -> Vec<Reply> {
    let start = tokio::time::Instant::now();
    let n = (rate * duration.as_secs_f64()) as usize;
    let mut tasks = Vec::new();
    for i in 0..n {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
        let body = body.clone();
        tasks.push(tokio::spawn(async move { chat(addr, &body).await }));
    }
    let deadline = start + limit;
    let mut replies = Vec::new();
    for t in tasks {
        if let Ok(Ok(r)) = tokio::time::timeout_at(deadline, t).await {
            replies.push(r);
        }
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_saturates_at_the_computed_knee() {
    // 10 prompt tokens at 100 µs each, 20 answer tokens, 5 ms steps, four
    // slots, 5% per extra sequence: an iteration admits 0.2 and decodes 3.8
    // on average, lasting 5 ms × (1 + 0.05 × 2.8) + 1 ms × 0.2 = 5.9 ms, so
    // the knee is 0.2 / 5.9 ms ≈ 33.9 req/s.
    let config = knee_config(4);
    let knee = config.knee_rate(config.capacity.as_ref().unwrap(), 10, 20);
    assert!((knee - 0.2 / 0.0059).abs() < 0.01, "{knee}");
    let server = start(config).await;
    let addr = server.local_addr();
    let body = fixed_length(PROMPT, 20);

    // Twice the knee for 2 s: the server finishes requests at the knee.
    let began = Instant::now();
    let replies = open_loop(
        addr,
        &body,
        2.0 * knee,
        Duration::from_millis(2000),
        Duration::from_millis(2100),
    )
    .await;
    let page = scrape(addr).await;
    assert!(metric(&page, "vllm:num_requests_waiting", &[]) > 10.0);
    let base_us =
        specreplay_core::clock::now_us() - i64::try_from(began.elapsed().as_micros()).unwrap();
    let in_window = |r: &&Reply| {
        let end = r.last_token_us() - base_us;
        (500_000..2_000_000).contains(&end)
    };
    // Finished per second over the last 1.5 s (the first 0.5 s fills the batch).
    let rate = replies.iter().filter(in_window).count() as f64 / 1.5;
    assert!(
        (rate - knee).abs() <= 0.1 * knee,
        "{rate:.1} finished per second at saturation, the knee is {knee:.1}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_knee_nothing_waits() {
    let config = knee_config(4);
    let knee = config.knee_rate(config.capacity.as_ref().unwrap(), 10, 20);
    let server = start(config).await;
    let addr = server.local_addr();
    let replies = open_loop(
        addr,
        &fixed_length(PROMPT, 20),
        0.6 * knee,
        Duration::from_millis(1000),
        Duration::from_millis(2000),
    )
    .await;
    assert!(replies.len() >= 19, "{} replies", replies.len());
    // TTFT = frontend 10 ms + at most one iteration to the boundary + the
    // prefill iteration (≤ 2 × 6.5 ms); 40 ms leaves room for a slow client.
    let mut ttft: Vec<f64> = replies
        .iter()
        .map(|r| (r.chunks[0].read - r.sent).as_secs_f64() * 1000.0)
        .collect();
    ttft.sort_by(f64::total_cmp);
    // p90: one stall of this shared machine must not decide it.
    let p90 = ttft[ttft.len() * 9 / 10];
    assert!(p90 < 40.0, "p90 TTFT {p90} ms below the knee: {ttft:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn reasoning_speculation_and_faults_work_inside_the_model() {
    // One slot: each request below runs only once the one before has left.
    let server = start(SimConfig {
        reasoning_tokens: [10, 20],
        content_tokens: [5, 10],
        spec_draft_len: 3,
        spec_acceptance: 0.8,
        fault_stall_ms: 100.0,
        ..config(Capacity {
            max_num_seqs: 1,
            ..Capacity::default()
        })
    })
    .await;
    let addr = server.local_addr();
    let limit = Duration::from_secs(10);
    let ordinary = json!({
        "messages": [{"role": "user", "content": "why"}],
        "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true},
    });

    // A connection reset mid-stream gives its slot back.
    let reset = chat_with_fault(addr, &ordinary, Some("reset_mid_stream"));
    let reset = tokio::time::timeout(limit, reset).await.unwrap();
    assert!(!reset.body.contains("[DONE]"));

    // Reasoning, then content, several tokens a step, exact usage.
    let r = tokio::time::timeout(limit, chat(addr, &ordinary))
        .await
        .unwrap();
    assert!(r.body.contains("reasoning_content") && r.body.contains("\"content\":\" "));
    assert!(r.chunks.iter().any(|c| c.tokens > 1), "speculative steps");
    let usage = final_usage(&r);
    let total = usage["completion_tokens"].as_u64().unwrap();
    assert_eq!(r.chunks.iter().map(|c| c.tokens).sum::<u64>(), total);
    assert!(
        usage["completion_tokens_details"]["reasoning_tokens"]
            .as_u64()
            .unwrap()
            >= 10
    );

    // A stall between tokens: one gap of the stall, then the stream ends.
    let stalled = chat_with_fault(addr, &ordinary, Some("stall_between_tokens"));
    let stalled = tokio::time::timeout(limit, stalled).await.unwrap();
    assert!(stalled.body.ends_with("data: [DONE]\n\n"));
    // One gap of the stall (100 ms) plus a step, the others a step (about
    // 10 ms); a chunk before it written late on a busy machine shortens it.
    let gaps = gaps_ms(&stalled);
    let longest = gaps.iter().copied().fold(0.0, f64::max);
    assert!(longest >= 90.0, "longest gap {longest} ms");
    assert!(longest > 5.0 * median(gaps), "one stall, not slow steps");

    // The same request, now one of two in flight (one waits): the same
    // tokens in the same steps, whatever the load.
    let steps = |r: &Reply| r.chunks.iter().map(|c| c.tokens).collect::<Vec<_>>();
    let again = tokio::time::timeout(limit, concurrently(addr, &ordinary, 2))
        .await
        .unwrap();
    assert!(again.iter().all(|a| steps(a) == steps(&r)));

    // A plain (non-streaming) answer waits for its turn as well.
    let plain = json!({"messages": [{"role": "user", "content": "why"}]});
    let plain = tokio::time::timeout(limit, chat(addr, &plain))
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&plain.body).unwrap();
    assert_eq!(answer["usage"]["completion_tokens"], total);

    let page = scrape(addr).await;
    assert_eq!(metric(&page, "vllm:num_requests_running", &[]), 0.0);
    assert_eq!(
        (finished(&page, "stop"), finished(&page, "abort")),
        (5.0, 1.0)
    );
    server.shutdown().await;
}

/// p90 TTFT (ms, client side) of a constant-rate run at `rate`.
async fn p90_ttft_ms(config: &SimConfig, rate: f64, duration: Duration) -> f64 {
    let server = start(config.clone()).await;
    let replies = open_loop(
        server.local_addr(),
        &fixed_length(PROMPT, 10),
        rate,
        duration,
        duration * 4,
    )
    .await;
    server.shutdown().await;
    let mut ttft: Vec<f64> = replies
        .iter()
        .map(|r| (r.chunks[0].read - r.sent).as_secs_f64() * 1000.0)
        .collect();
    ttft.sort_by(f64::total_cmp);
    ttft[(ttft.len() * 9).div_ceil(10) - 1]
}

/// What a capacity search relies on: with constant arrivals of a fixed mix,
/// TTFT stays near its unloaded value up to the knee the config implies and
/// climbs past it (the queue grows by (rate − knee) × run length), so the
/// highest rate that holds `p90 TTFT < 100 ms` lies within 20% of the knee.
/// The margins are wide so that this shared machine's stalls cannot decide
/// the test (p90 rather than p99, 0.8 and 1.2 × the knee);
/// `bench/sim_capacity.rs --knee` measures p99 at 0.95 and 1.05 × the knee.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_crosses_an_slo_at_the_knee() {
    let config = knee_config(8);
    // 10 tokens (9 steps after the first), 8 slots: 0.8 admitted and 7.2
    // decoding per iteration, T = 5 ms × (1 + 0.05 × 6.2) + 1 ms × 0.8 =
    // 7.35 ms, so the knee is 0.8 / 7.35 ms ≈ 108.8 req/s.
    let knee = config.knee_rate(config.capacity.as_ref().unwrap(), 10, 10);
    assert!((knee - 0.8 / 0.00735).abs() < 0.01, "{knee}");
    let run = Duration::from_millis(1500);
    let below = p90_ttft_ms(&config, 0.8 * knee, run).await;
    let above = p90_ttft_ms(&config, 1.2 * knee, run).await;
    assert!(below < 100.0, "p90 TTFT {below} ms at 0.8 × the knee");
    assert!(above > 100.0, "p90 TTFT {above} ms at 1.2 × the knee");
}

/// A chat request: a long shared system prompt, then `question`.
fn with_system(system: &str, question: &str) -> Value {
    json!({
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ],
        "max_tokens": 4, "min_tokens": 4, "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true},
    })
}

/// The usage chunk's `usage` (`stream_options.include_usage`).
fn final_usage(r: &Reply) -> Value {
    r.body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v["choices"].as_array().is_some_and(|c| c.is_empty()))
        .expect("a usage chunk")["usage"]
        .clone()
}

#[tokio::test]
async fn a_cached_prefix_costs_no_prefill() {
    // 1 ms of prefill per token. The system message is 4 template tokens and
    // 60 words: exactly four 16-token blocks, cached after the first request.
    let server = start(SimConfig {
        prefill_us_per_token: 1000.0,
        ..config(Capacity::default())
    })
    .await;
    let addr = server.local_addr();
    let system: String = (0..60).map(|i| format!("rule{i} ")).collect();
    let ttft_ms = |r: &Reply| (r.chunks[0].read - r.sent).as_secs_f64() * 1000.0;
    // 69 prompt tokens, none cached: 10 ms frontend + 69 ms prefill.
    let first = chat(addr, &with_system(&system, "first")).await;
    // The same system prompt: 64 of its 69 tokens cached, 5 ms of prefill.
    let second = chat(addr, &with_system(&system, "second")).await;
    // Another system prompt: nothing cached.
    let other = chat(
        addr,
        &with_system(&system.replace("rule1 ", "law1 "), "third"),
    )
    .await;
    let (a, b, c) = (ttft_ms(&first), ttft_ms(&second), ttft_ms(&other));
    assert!(a >= 79.0 && c >= 79.0, "uncached TTFT {a} and {c} ms");
    assert!(b < a - 40.0, "cached TTFT {b} ms against {a} ms");
    // Each answer's usage says what the cache served, as vLLM's does with
    // --enable-prompt-tokens-details: what `calibrate` fits a hit's cost from.
    let cached = |r: &Reply| final_usage(r)["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert_eq!(
        [cached(&first), cached(&second), cached(&other)],
        [Some(0), Some(64), Some(0)]
    );
    let page = scrape(addr).await;
    assert_eq!(
        metric(&page, "vllm:prefix_cache_queries_total", &[]),
        3.0 * 69.0
    );
    assert_eq!(metric(&page, "vllm:prefix_cache_hits_total", &[]), 64.0);
    assert_eq!(metric(&page, "vllm:prompt_tokens_total", &[]), 3.0 * 69.0);
    server.shutdown().await;

    // Without prefix caching, the second request pays its whole prefill.
    let server = start(SimConfig {
        prefill_us_per_token: 1000.0,
        ..config(Capacity {
            prefix_caching: false,
            ..Capacity::default()
        })
    })
    .await;
    let addr = server.local_addr();
    chat(addr, &with_system(&system, "first")).await;
    let again = chat(addr, &with_system(&system, "second")).await;
    assert!(ttft_ms(&again) >= 79.0, "{} ms", ttft_ms(&again));
    assert!(final_usage(&again).get("prompt_tokens_details").is_none());
    let page = scrape(addr).await;
    assert!(!page.keys().any(|k| k.contains("prefix_cache")));
    server.shutdown().await;
}

/// Sends each body at once and waits for every answer, in order.
async fn together(addr: std::net::SocketAddr, bodies: Vec<Value>) -> Vec<Reply> {
    let tasks: Vec<_> = bodies
        .into_iter()
        .map(|body| tokio::spawn(async move { chat(addr, &body).await }))
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test]
async fn each_model_steps_at_its_own_speed_and_adapters_share_the_batch() {
    // base and lora-a (the base's speed) share one batch; slow (its own
    // tpot) runs in its own engine. A step of two sequences costs 1.5 ×.
    let server = start(SimConfig {
        model: "base".into(),
        models: vec![
            specreplay_core::sim::ModelSpec {
                name: "lora-a".into(),
                ..Default::default()
            },
            specreplay_core::sim::ModelSpec {
                name: "slow".into(),
                tpot_ms: Some(24.0),
                ..Default::default()
            },
        ],
        ..config(Capacity {
            max_num_seqs: 8,
            batch_step_cost: 0.5,
            ..Capacity::default()
        })
    })
    .await;
    let addr = server.local_addr();
    let body = |model: &str| {
        let mut b = fixed_length(PROMPT, 20);
        b["model"] = model.into();
        b
    };
    let replies = together(addr, vec![body("base"), body("lora-a"), body("slow")]).await;
    // The steps away from either end (joins may be one iteration apart).
    let step = |r: &Reply| {
        assert_eq!(r.chunks.iter().map(|c| c.tokens).sum::<u64>(), 20);
        let g = gaps_ms(r);
        median(g[3..g.len() - 3].to_vec())
    };
    let (base, lora, slow) = (step(&replies[0]), step(&replies[1]), step(&replies[2]));
    // base and lora-a decode together: 8 ms × 1.5 = 12 ms each; slow is
    // alone in its batch: 24 ms (it would be 8 × 1.5 = 12 in the base's
    // batch, or 36 if the others joined its one).
    assert!(
        (10.5..=14.0).contains(&base),
        "base step {base} ms, want 12"
    );
    assert!(
        (10.5..=14.0).contains(&lora),
        "lora-a step {lora} ms, want 12"
    );
    let ratio = slow / base;
    assert!((1.6..=2.4).contains(&ratio), "slow/base {ratio}, want 2");
    server.shutdown().await;
}

/// The longest gap of a decoding request while a 404-token prompt joins
/// its batch, ms: 100 µs per prompt token, 8 ms steps.
async fn stall_behind_a_long_prompt(max_num_batched_tokens: u32) -> f64 {
    let server = start(SimConfig {
        prefill_us_per_token: 100.0,
        ..config(Capacity {
            batch_step_cost: 0.0,
            max_num_batched_tokens,
            ..Capacity::default()
        })
    })
    .await;
    let addr = server.local_addr();
    let decoding = tokio::spawn(async move { chat(addr, &fixed_length(PROMPT, 40)).await });
    tokio::time::sleep(Duration::from_millis(80)).await;
    let long: String = (0..400).map(|i| format!("w{i} ")).collect();
    let newcomer = chat(addr, &fixed_length(&long, 4)).await;
    let first = decoding.await.unwrap();
    assert_eq!((first.status, newcomer.status), (200, 200));
    server.shutdown().await;
    gaps_ms(&first).into_iter().fold(0.0, f64::max)
}

#[tokio::test]
async fn a_token_budget_chunks_a_long_prefill_between_decode_steps() {
    // Whole (no budget): one 8 + 40.4 ms iteration. With 50 tokens an
    // iteration, 49 prompt tokens ride with the decode token: 8 + 4.9 ms.
    let whole = stall_behind_a_long_prompt(0).await;
    let chunked = stall_behind_a_long_prompt(50).await;
    assert!(whole >= 45.0, "stall without a budget {whole} ms, want ~48");
    assert!(
        chunked <= 20.0,
        "stall with a 50-token budget {chunked} ms, want ~13"
    );
}
