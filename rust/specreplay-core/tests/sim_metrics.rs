//! `GET /metrics` end to end: the counters agree with what the clients
//! received (tokens, chunks, finishes), the speculative-decoding counters
//! recover the configured acceptance within sampling error, and the gauges
//! follow the requests in flight. Bounded, loopback only.

mod sim_support;

use std::time::Duration;

use sim_support::{chat, finished, fixed_length, metric, scrape, start, Reply};
use specreplay_core::sim::SimConfig;

#[tokio::test]
async fn acceptance_from_the_counters_is_the_configured_one_and_the_clients() {
    let (k, a) = (4_u32, 0.6_f64);
    let server = start(SimConfig {
        ttft_ms: 1.0,
        tpot_ms: 1.0,
        spec_draft_len: k,
        spec_acceptance: a,
        spec_step_cost: 0.0,
        ..SimConfig::default()
    })
    .await;
    let addr = server.local_addr();
    // 24 answers of 400 tokens, eight at a time: about 4,000 drafts.
    let mut replies: Vec<Reply> = Vec::new();
    for round in 0..3 {
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let body = fixed_length(&format!("question {round} {i}"), 400);
                tokio::spawn(async move { chat(addr, &body).await })
            })
            .collect();
        for t in tasks {
            replies.push(t.await.unwrap());
        }
    }
    let page = scrape(addr).await;
    let drafts = metric(&page, "vllm:spec_decode_num_drafts_total", &[]);
    let draft_tokens = metric(&page, "vllm:spec_decode_num_draft_tokens_total", &[]);
    let accepted = metric(&page, "vllm:spec_decode_num_accepted_tokens_total", &[]);
    let per_pos: Vec<f64> = (0..k)
        .map(|p| {
            let pos = p.to_string();
            metric(
                &page,
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                &[("position", &pos)],
            )
        })
        .collect();

    // What the clients saw: step 0 (the prefill's token) is the first
    // token chunk; every later chunk is one verification step.
    let decode_chunks: Vec<u64> = replies
        .iter()
        .flat_map(|r| r.chunks[1..].iter().map(|c| c.tokens))
        .collect();
    assert_eq!(
        drafts,
        decode_chunks.len() as f64,
        "one draft per decode step"
    );
    assert_eq!(draft_tokens, f64::from(k) * drafts);
    assert_eq!(accepted, per_pos.iter().sum::<f64>());
    assert_eq!(
        metric(&page, "vllm:generation_tokens_total", &[]),
        24.0 * 400.0
    );
    // Accepted tokens the clients got: the cut last steps lose a few.
    let seen: u64 = decode_chunks.iter().map(|t| t - 1).sum();
    assert!(seen as f64 <= accepted && accepted - seen as f64 <= 24.0 * f64::from(k));

    // Each draft position is accepted with probability a once the one before
    // it was: a conditional rate of a at every position.
    let sd = (a * (1.0 - a) / drafts).sqrt();
    assert!(
        (per_pos[0] / drafts - a).abs() < 5.0 * sd,
        "{per_pos:?} / {drafts}"
    );
    for p in 1..k as usize {
        let rate = per_pos[p] / per_pos[p - 1];
        let sd = (a * (1.0 - a) / per_pos[p - 1]).sqrt();
        assert!((rate - a).abs() < 5.0 * sd, "position {p}: {rate}");
    }
    // Mean acceptance length 1 + accepted / drafts = 1 + a + … + a^k; the
    // clients' tokens per decode chunk agree with it.
    let expected: f64 = (0..=k).map(|i| a.powi(i as i32)).sum();
    let length = 1.0 + accepted / drafts;
    assert!((length - expected).abs() < 0.05, "{length} vs {expected}");
    let client = decode_chunks.iter().sum::<u64>() as f64 / decode_chunks.len() as f64;
    assert!(
        (client - length).abs() < 0.02,
        "client {client} vs server {length}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn gauges_and_finishes_follow_the_requests() {
    let server = start(SimConfig {
        ttft_ms: 5.0,
        tpot_ms: 10.0,
        ..SimConfig::default()
    })
    .await;
    let addr = server.local_addr();
    let page = scrape(addr).await;
    assert_eq!(metric(&page, "vllm:num_requests_running", &[]), 0.0);
    assert!(
        !page.keys().any(|k| k.contains("spec_decode")),
        "speculation is off"
    );

    // Five streams of 40 tokens (about 0.4 s), and one client that leaves.
    let tasks: Vec<_> = (0..5)
        .map(|i| {
            let body = fixed_length(&format!("q {i}"), 40);
            tokio::spawn(async move { chat(addr, &body).await })
        })
        .collect();
    let leaver = tokio::spawn(async move { chat(addr, &fixed_length("gone", 400)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let page = scrape(addr).await;
    assert_eq!(metric(&page, "vllm:num_requests_running", &[]), 6.0);
    assert_eq!(metric(&page, "vllm:num_requests_waiting", &[]), 0.0);
    leaver.abort();
    for t in tasks {
        assert_eq!(t.await.unwrap().status, 200);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let page = scrape(addr).await;
    assert_eq!(metric(&page, "vllm:num_requests_running", &[]), 0.0);
    // ignore_eos runs to the budget: `length`, as vLLM says.
    assert_eq!(finished(&page, "length"), 5.0);
    assert_eq!(finished(&page, "stop"), 0.0);
    assert_eq!(finished(&page, "abort"), 1.0);
    // Chat prompts: the words and the template's four tokens each.
    assert_eq!(
        metric(&page, "vllm:prompt_tokens_total", &[]),
        5.0 * (2.0 + 4.0) + (1.0 + 4.0)
    );
    assert_eq!(metric(&page, "vllm:kv_cache_usage_perc", &[]), 0.0);
    server.shutdown().await;
}
