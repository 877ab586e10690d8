//! The prediction's schedule to the µs on small cases.

use super::model::ServerModel;
use super::point::predict_point;
use crate::engine::{PreparedRequest, RunSpec};

fn model(max_num_seqs: Option<u32>) -> ServerModel {
    serde_json::from_value(serde_json::json!({
        "frontend_us": 1000.0, "prefill_us_per_token": 10.0, "step_us": 100.0,
        "batch_step_cost": 0.5, "max_num_seqs": max_num_seqs,
    }))
    .unwrap()
}

fn requests(n: usize, words: usize, tokens: u32) -> Vec<(PreparedRequest, u64)> {
    let content: String = (0..words).map(|i| format!("w{i} ")).collect();
    (0..n)
        .map(|i| {
            let body = serde_json::json!({
                "messages": [{"role": "user", "content": format!("{content}")}],
                "max_tokens": tokens, "ignore_eos": true, "seed": i,
            });
            let url = "http://x.invalid/v1/chat/completions";
            let req =
                PreparedRequest::new(format!("r{i}"), "chat", url, body.to_string().into(), 0.0);
            (req.unwrap(), 0)
        })
        .collect()
}

fn closed_loop(n: usize) -> RunSpec {
    serde_json::from_value(serde_json::json!({"load": {"mode": "concurrency", "concurrency": n}}))
        .unwrap()
}

#[test]
fn a_lone_request_keeps_the_models_schedule() {
    // 10 words + 4 template tokens: 14 prompt tokens, 140 µs of prefill.
    let (rows, stats) =
        predict_point(&model(None), &closed_loop(1), &requests(1, 10, 5), 0).unwrap();
    let r = &rows[0];
    assert_eq!(r.prompt_tokens, Some(14));
    assert_eq!(r.first_token_us, Some(1140));
    let stamps: Vec<i64> = r.chunks.iter().map(|c| c.ts_us).collect();
    assert_eq!(stamps, vec![1140, 1240, 1340, 1440, 1540]);
    assert_eq!((r.end_us, r.output_tokens), (Some(1540), Some(5)));
    assert_eq!(r.finish_reason.as_deref(), Some("length"));
    assert_eq!(stats.peak_running, 1);
}

#[test]
fn decoding_together_costs_the_batch_step_and_the_limit_queues() {
    // Two at once, unlimited: one shared prefill iteration (280 µs), then
    // steps of 100 × (1 + 0.5 × 1) = 150 µs.
    let (rows, _) = predict_point(&model(None), &closed_loop(2), &requests(2, 10, 3), 0).unwrap();
    for r in &rows {
        let stamps: Vec<i64> = r.chunks.iter().map(|c| c.ts_us).collect();
        assert_eq!(stamps, vec![1280, 1430, 1580]);
    }
    // One slot: the second waits for the first to end, then runs alone.
    let (rows, stats) =
        predict_point(&model(Some(1)), &closed_loop(2), &requests(2, 10, 3), 0).unwrap();
    assert_eq!(rows[0].end_us, Some(1340));
    assert_eq!(rows[1].first_token_us, Some(1340 + 140));
    assert_eq!((stats.peak_running, stats.peak_waiting), (1, 1));
}

#[test]
fn a_step_table_sets_the_step_of_each_batch_size() {
    // Two decoding: the table's 2.4 × 100 µs, not the line's 150.
    let mut m = model(None);
    m.batch_step_factors = vec![1.0, 2.4];
    let (rows, _) = predict_point(&m, &closed_loop(2), &requests(2, 10, 3), 0).unwrap();
    for r in &rows {
        let stamps: Vec<i64> = r.chunks.iter().map(|c| c.ts_us).collect();
        assert_eq!(stamps, vec![1280, 1520, 1760]);
    }
    // Three: beyond the table, its last size plus batch_step_cost: 2.4 + 0.5.
    let (rows, _) = predict_point(&m, &closed_loop(3), &requests(3, 10, 2), 0).unwrap();
    let stamps: Vec<i64> = rows[0].chunks.iter().map(|c| c.ts_us).collect();
    assert_eq!(stamps, vec![1420, 1420 + 290]);
    m.batch_step_factors = vec![1.0, f64::INFINITY];
    let err = m.validate().unwrap_err().to_string();
    assert!(err.contains("model.batch_step_factors[1]"), "{err}");
}

#[test]
fn a_token_budget_prefills_in_chunks_between_decode_steps() {
    // 14-token prompts, a 10-token budget. The first runs alone: chunks of
    // 10 and 4 (100 + 40 µs), first token at 1000 + 140. A second sent
    // at once prefills with it: 10 + 0 then 4 + 6 then 0 + 8.
    let mut m = model(None);
    m.max_num_batched_tokens = Some(10);
    let (rows, stats) = predict_point(&m, &closed_loop(1), &requests(1, 10, 3), 0).unwrap();
    let stamps: Vec<i64> = rows[0].chunks.iter().map(|c| c.ts_us).collect();
    assert_eq!(stamps, vec![1100 + 40, 1240, 1340]);
    assert_eq!(stats.iterations, 4);
    let (rows, _) = predict_point(&m, &closed_loop(2), &requests(2, 10, 3), 0).unwrap();
    // Iterations: 100 (10+0), 100 (4+6): the first's token at 1200;
    // then 1 decode + 8 prompt tokens: 100 + 80 = 180 → both at 1380.
    assert_eq!(rows[0].first_token_us, Some(1200));
    assert_eq!(rows[1].first_token_us, Some(1380));
    assert_eq!(rows[0].chunks[1].ts_us, 1380);
    // The rule is the simulator's: Capacity::prefill_chunks.
    assert_eq!(m.capacity().prefill_chunks(1, &[8]), vec![8]);
}

#[test]
fn a_closed_loop_sends_the_next_request_when_one_ends() {
    let (rows, _) = predict_point(&model(None), &closed_loop(1), &requests(3, 10, 2), 0).unwrap();
    assert_eq!(rows.len(), 3);
    for pair in rows.windows(2) {
        assert_eq!(pair[1].sent_us, pair[0].end_us);
    }
    let indices: Vec<i64> = rows.iter().map(|r| r.request_index).collect();
    assert_eq!(indices, vec![0, 1, 2]);
}

/// Requests that end by themselves (no fixed length), prompts of `words` words.
fn natural(words: &[usize]) -> Vec<(PreparedRequest, u64)> {
    words
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let content: String = (0..w).map(|k| format!("w{k} ")).collect();
            let body = serde_json::json!({"messages": [{"role": "user", "content": content}], "max_tokens": 100});
            let url = "http://x.invalid/v1/chat/completions";
            let req = PreparedRequest::new(format!("r{i}"), "chat", url, body.to_string().into(), 0.0);
            (req.unwrap(), 0)
        })
        .collect()
}

#[test]
fn output_lengths_come_from_the_prompts_length_class() {
    // Short prompts (≤ 20 tokens) answer 3 tokens, the rest of chat 7.
    let mut m = model(None);
    m.output = serde_json::from_value(serde_json::json!([
        {"api": "chat", "max_prompt_tokens": 20, "reasoning": [0], "content": [3]},
        {"api": "chat", "reasoning": [2], "content": [5]},
    ]))
    .unwrap();
    // 10 words + 4 template tokens = 14; 40 + 4 = 44, beyond every bucket.
    let (rows, _) = predict_point(&m, &closed_loop(1), &natural(&[10, 40]), 0).unwrap();
    assert_eq!(rows[0].output_tokens, Some(3));
    assert_eq!(
        (rows[1].reasoning_tokens, rows[1].content_tokens),
        (Some(2), Some(5))
    );
}

#[test]
fn the_usage_probe_leaves_the_first_prompt_cached() {
    let mut m = model(None);
    m.prefix_caching = true;
    m.usage_probe = true;
    let (rows, _) = predict_point(&m, &closed_loop(1), &requests(1, 40, 2), 0).unwrap();
    // 44 prompt tokens, every block but the last computed token cached (free).
    assert!(
        rows[0].cached_tokens.unwrap() >= 32,
        "{:?}",
        rows[0].cached_tokens
    );
    assert!(rows[0].first_token_us.unwrap() < 1000 + 440);
    m.usage_probe = false;
    let (rows, _) = predict_point(&m, &closed_loop(1), &requests(1, 40, 2), 0).unwrap();
    assert_eq!(rows[0].cached_tokens, Some(0));
    assert_eq!(rows[0].first_token_us, Some(1000 + 440));
}

#[test]
fn a_speed_spread_varies_the_steps_by_window_and_repeats_with_the_seed() {
    let mut m = model(None);
    m.speed_spread = 0.3;
    m.speed_window_us = 500.0;
    let gaps = |m: &ServerModel| -> Vec<i64> {
        let (rows, _) = predict_point(m, &closed_loop(1), &requests(1, 10, 60), 0).unwrap();
        rows[0]
            .chunks
            .windows(2)
            .map(|w| w[1].ts_us - w[0].ts_us)
            .collect()
    };
    let a = gaps(&m);
    assert_eq!(a, gaps(&m), "the same seed, the same draws");
    let distinct: std::collections::BTreeSet<i64> = a.iter().copied().collect();
    assert!(distinct.len() >= 3, "steps of one speed per window: {a:?}");
    // Within a window the speed holds: consecutive equal gaps occur.
    assert!(a.windows(2).any(|w| w[0] == w[1]), "{a:?}");
    let mean = a.iter().sum::<i64>() as f64 / a.len() as f64;
    assert!(
        (60.0..170.0).contains(&mean),
        "log-normal around the 100 µs step: {mean}"
    );
    m.seed = 7;
    assert_ne!(a, gaps(&m));
}

/// `n` requests of `words` words each, no two sharing a prompt block.
fn distinct(n: usize, words: usize, tokens: u32) -> Vec<(PreparedRequest, u64)> {
    distinct_in("", n, words, tokens)
}

/// `distinct`'s requests with their words marked `tag`: another trace of
/// the same shape.
fn distinct_in(tag: &str, n: usize, words: usize, tokens: u32) -> Vec<(PreparedRequest, u64)> {
    (0..n)
        .map(|i| {
            let content: String = (0..words).map(|k| format!("{tag}r{i}w{k} ")).collect();
            let body = serde_json::json!({
                "messages": [{"role": "user", "content": content}],
                "max_tokens": tokens, "ignore_eos": true,
            });
            let url = "http://x.invalid/v1/chat/completions";
            let req =
                PreparedRequest::new(format!("r{i}"), "chat", url, body.to_string().into(), 0.0);
            (req.unwrap(), 0)
        })
        .collect()
}

/// A 50 µs frontend, prefix caching, the first prompt left cached by the
/// usage probe.
fn after_the_usage_probe() -> ServerModel {
    let mut m = model(None);
    m.frontend_us = 50.0;
    m.prefix_caching = true;
    m.usage_probe = true;
    m
}

#[test]
fn a_whole_cache_hit_starts_an_idle_engine_alone_and_the_next_pair_shares_its_prefill() {
    // A 50 µs frontend. The usage probe left r0's prompt cached: 44 tokens,
    // 32 in cached blocks, 12 computed (120 µs). llama.cpp runs that
    // iteration alone and prefills r1 (44 tokens, 440 µs) in r0's first
    // decode gap (100 µs): r1's first token with r0's second.
    let mut m = after_the_usage_probe();
    let (rows, _) = predict_point(&m, &closed_loop(2), &distinct(4, 40, 3), 0).unwrap();
    let stamps: Vec<i64> = rows[0].chunks.iter().map(|c| c.ts_us).collect();
    assert_eq!(stamps, vec![170, 710, 860]);
    assert_eq!(
        (rows[1].first_token_us, rows[1].end_us),
        (Some(710), Some(960))
    );
    // r2, sent at r0's end (860), misses r1's last step; r3, sent at r1's end
    // (960) and still in its frontend time, is launched with r2: one
    // prefill iteration for the two (880 µs), the pair in lockstep again.
    assert_eq!(rows[2].first_token_us, Some(960 + 880));
    assert_eq!(rows[3].first_token_us, Some(960 + 880));
    // Nothing cached: the two sent together share their prefill iteration.
    m.usage_probe = false;
    let (rows, _) = predict_point(&m, &closed_loop(2), &distinct(2, 40, 3), 0).unwrap();
    assert_eq!(rows[0].first_token_us, Some(50 + 880));
    assert_eq!(rows[1].first_token_us, Some(50 + 880));
}

#[test]
fn the_template_prefix_is_cached_for_every_prompt() {
    // 14 prompt tokens, 4 of them the chat template's, found cached in the
    // slot whatever the prompt: 10 computed (100 µs), not 14.
    let mut m = model(None);
    m.prefix_caching = true;
    m.template_cached_tokens = 4;
    let (rows, _) = predict_point(&m, &closed_loop(1), &distinct(1, 10, 2), 0).unwrap();
    assert_eq!(rows[0].cached_tokens, Some(4));
    assert_eq!(rows[0].first_token_us, Some(1000 + 100));
}

#[test]
fn without_co_launch_the_first_arrival_starts_an_iteration_alone() {
    // r0 answers 3 tokens, r1 4: r0 ends at 1230, r1 at 1330 (a lone step
    // of 100 µs), so r2 (sent at 1230) is queued when r3 is sent (1330).
    let mut reqs = distinct(4, 40, 3);
    let long = distinct(2, 40, 4);
    reqs[1] = long[1].clone();
    let mut m = model(None);
    m.frontend_us = 50.0;
    let (rows, _) = predict_point(&m, &closed_loop(2), &reqs, 0).unwrap();
    assert_eq!((rows[0].end_us, rows[1].end_us), (Some(1230), Some(1330)));
    // llama.cpp's loop: r3, still in its frontend time, is launched with r2
    // (one prefill of 880 µs for the two).
    assert_eq!(rows[2].first_token_us, Some(1330 + 880));
    assert_eq!(rows[3].first_token_us, Some(1330 + 880));
    // vLLM's: r2 starts at once (440 µs), r3 is prefilled in r2's next
    // iteration with r2's decode step (440 + 100).
    m.co_launch = false;
    let (rows, _) = predict_point(&m, &closed_loop(2), &reqs, 0).unwrap();
    assert_eq!(rows[2].first_token_us, Some(1330 + 440));
    assert_eq!(rows[3].first_token_us, Some(1330 + 440 + 540));
    // And a prompt found cached whole does not start an iteration alone:
    // the two sent together share it (12 + 44 computed tokens).
    m.prefix_caching = true;
    m.usage_probe = true;
    let (rows, _) = predict_point(&m, &closed_loop(2), &distinct(2, 40, 3), 0).unwrap();
    assert_eq!(rows[0].first_token_us, Some(50 + 560));
    assert_eq!(rows[1].first_token_us, Some(50 + 560));
}

#[test]
fn a_measured_cached_co_launch_decides_whatever_the_arrival_order() {
    // The first case above with the race measured: share 1, the others
    // are launched with the cached one (12 + 44 computed tokens, 560 µs)
    // and the pair stays in lockstep.
    let mut m = after_the_usage_probe();
    m.cached_co_launch = Some(1.0);
    let (rows, _) = predict_point(&m, &closed_loop(2), &distinct(2, 40, 3), 0).unwrap();
    assert_eq!(rows[0].first_token_us, Some(50 + 560));
    assert_eq!(rows[1].first_token_us, Some(50 + 560));
    // A 40 µs frontend spread: which of the two reaches the server first
    // is drawn per seed. Not measured, that order decides (some seeds
    // alone, some together); share 0, alone at every seed; share 0.5,
    // some of each, every seed deciding the same way each time.
    m.frontend_jitter_us = 40.0;
    let together = |share: Option<f64>, seed: u64| {
        let mut m = m.clone();
        m.cached_co_launch = share;
        m.seed = seed;
        let (rows, _) = predict_point(&m, &closed_loop(2), &distinct(2, 40, 3), 0).unwrap();
        rows[0].first_token_us == rows[1].first_token_us
    };
    let count = |share: Option<f64>| (0..40).filter(|&s| together(share, s)).count();
    let by_order = count(None);
    assert!((4..=36).contains(&by_order), "{by_order} of 40 together");
    assert_eq!(count(Some(0.0)), 0);
    assert_eq!(count(Some(1.0)), 40);
    let half = count(Some(0.5));
    assert!((8..=32).contains(&half), "{half} of 40 together");
    assert_eq!(half, count(Some(0.5)));
    // Out of range: the error names the field.
    m.cached_co_launch = Some(1.5);
    let err = predict_point(&m, &closed_loop(2), &distinct(2, 40, 3), 0).unwrap_err();
    assert!(err.to_string().contains("model.cached_co_launch"), "{err}");
}

#[test]
fn two_traces_draw_the_servers_own_streams_apart_at_one_seed() {
    // A point measured in parts, each on its own trace, predicted with one
    // seed: each part draws its own launch coin and speed spells, as real
    // runs do (they drew the same ones in every part: three lone starts or
    // none), and one trace draws the same each time.
    let mut m = after_the_usage_probe();
    m.frontend_jitter_us = 40.0;
    m.cached_co_launch = Some(0.5);
    let together = |tag: &str| {
        let (rows, _) = predict_point(&m, &closed_loop(2), &distinct_in(tag, 2, 40, 3), 0).unwrap();
        rows[0].first_token_us == rows[1].first_token_us
    };
    let tags: Vec<String> = (0..40).map(|t| format!("t{t}")).collect();
    let count = tags.iter().filter(|t| together(t)).count();
    assert!((8..=32).contains(&count), "{count} of 40 traces together");
    assert!(tags.iter().all(|t| together(t) == together(t)));
    let mut m = model(None);
    m.speed_spread = 0.3;
    m.speed_window_us = 500.0;
    let gaps = |tag: &str| -> Vec<i64> {
        let (rows, _) =
            predict_point(&m, &closed_loop(1), &distinct_in(tag, 1, 10, 60), 0).unwrap();
        rows[0]
            .chunks
            .windows(2)
            .map(|w| w[1].ts_us - w[0].ts_us)
            .collect()
    };
    assert_eq!(gaps("a"), gaps("a"));
    assert_ne!(gaps("a"), gaps("b"));
}
