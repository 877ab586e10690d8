//! The prediction itself: a discrete-event simulation of one sweep point on
//! a virtual clock. The client side schedules as the engine does (the same
//! `Schedule` for open loop, N units in flight for closed loop, a dependent
//! session's next turn at its predecessor's end plus its think time); the
//! server side batches as the simulator's capacity model does (the same
//! `Capacity` admission rule and decode-step formula, the same
//! `PrefixCache`), with the calibrated costs. Nothing sleeps: an iteration
//! is one loop turn, so an hour of traffic takes as long as its iterations
//! take to compute (bench/predict_speed.rs).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::model::ServerModel;
use crate::decode::{Channel, Dialect};
use crate::engine::record::{Chunk, ChunkTokenSource, ErrorKind, RequestRecord, TokenSource};
use crate::engine::schedule::Schedule;
use crate::engine::{LoadMode, PreparedRequest, RunSpec, SessionMode};
use crate::error::CoreError;
use crate::sim::capacity::Capacity;
use crate::sim::prefix::PrefixCache;
use crate::sim::request::{Endpoint, MediaRule, SimRequest};

/// What the prediction saw of its own server: to tell when it went beyond
/// what the calibration measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PredictStats {
    /// Most requests in the batch at once.
    pub peak_running: usize,
    /// Most requests waiting for a batch slot at once.
    pub peak_waiting: usize,
    /// Most KV-cache tokens held at once.
    pub peak_kv_tokens: u64,
    /// Engine iterations simulated.
    pub iterations: u64,
    /// Virtual time from the first send to the last end, µs.
    pub span_us: i64,
}

/// One request, read for the prediction.
struct Planned {
    trace_id: String,
    api: &'static str,
    prompt_tokens: u32,
    /// The prompt's blocks in the simulator's counting (for the prefix cache).
    prefix_blocks: Vec<u64>,
    /// The counted prompt tokens (the simulator's rule) per server token.
    words: u32,
    reasoning: u32,
    content: u32,
    finish: &'static str,
    rng: ChaCha8Rng,
    session: Option<(std::sync::Arc<str>, i32)>,
    think_us: Option<i64>,
    /// Turns of its session in this point (dependent sessions).
    session_turns: Option<i32>,
    error: Option<String>,
}

/// A request in the batch.
struct Live {
    req: usize,
    kv: u64,
    decoding: bool,
    /// Prompt tokens still to compute (chunked prefill); it gets its first
    /// token in the iteration that computes the last of them.
    prefill_left: u32,
    emitted: u32,
    /// Tokens already delivered in chunks.
    delivered: u32,
    steps: u64,
}

/// Predicts one point: one `RequestRecord` per request (timestamps from
/// `start_us` on the virtual clock), in the order they were sent.
pub fn predict_point(
    model: &ServerModel,
    spec: &RunSpec,
    requests: &[(PreparedRequest, u64)],
    start_us: i64,
) -> Result<(Vec<RequestRecord>, PredictStats), CoreError> {
    model.validate()?;
    let dependent = spec.sessions == SessionMode::Dependent;
    let mut planned = Vec::with_capacity(requests.len());
    for (req, lap) in requests {
        planned.push(plan(model, req, *lap)?);
    }
    // Units: a request, or a dependent session's turns (fed together, in order).
    let mut units: Vec<Vec<usize>> = Vec::new();
    for (i, (req, _)) in requests.iter().enumerate() {
        let same_session = dependent
            && i > 0
            && req.session.is_some()
            && planned[i].session.as_ref().map(|s| &s.0)
                == planned[i - 1].session.as_ref().map(|s| &s.0);
        match units.last_mut() {
            Some(unit) if same_session => unit.push(i),
            _ => units.push(vec![i]),
        }
    }
    if dependent {
        for unit in &units {
            if planned[unit[0]].session.is_some() {
                let turns = unit.len() as i32;
                for &r in unit {
                    planned[r].session_turns = Some(turns);
                }
            }
        }
    } else {
        for p in &mut planned {
            p.think_us = None;
        }
    }
    let mut sim = Des::new(model, planned, spec);
    match spec.load {
        LoadMode::Concurrency { concurrency } => {
            for u in 0..concurrency.min(units.len()) {
                sim.send_unit(&units, u, 0);
            }
            sim.next_unit = concurrency.min(units.len());
            sim.closed_loop = true;
        }
        load => {
            let mut schedule = Schedule::open_loop(load, spec.seed)
                .ok_or_else(|| CoreError::config("load", "no open-loop schedule"))?;
            for (u, unit) in units.iter().enumerate() {
                let (first, lap) = (&requests[unit[0]].0, requests[unit[0]].1);
                let at = schedule.next_offset_us(first.arrival_s, lap);
                sim.send_unit(&units, u, at);
            }
        }
    }
    sim.run(&units);
    let Des {
        mut records,
        sent_order,
        stats,
        ..
    } = sim;
    let mut out = Vec::with_capacity(sent_order.len());
    let first_send = sent_order
        .first()
        .and_then(|&i| records[i].sent_us)
        .unwrap_or(0);
    let mut last_end = first_send;
    for (index, &i) in sent_order.iter().enumerate() {
        let mut record = std::mem::take(&mut records[i]);
        record.request_index = index as i64;
        record.warmup = (index as u64) < spec.warmup;
        last_end = last_end.max(record.end_us.unwrap_or(first_send));
        shift(&mut record, start_us);
        out.push(record);
    }
    let stats = PredictStats {
        span_us: last_end - first_send,
        ..stats
    };
    Ok((out, stats))
}

/// A prepared request as the simulator reads it. Media parts cost what the
/// simulator's default patch rule says: the calibration fits no media cost
/// yet (docs/predict.md).
pub fn parse_request(req: &PreparedRequest) -> Result<SimRequest, CoreError> {
    let endpoint = match req.dialect {
        Dialect::Completions => Endpoint::Completions,
        _ => Endpoint::Chat,
    };
    SimRequest::parse(endpoint, &req.body, &MediaRule::default())
        .map_err(|e| CoreError::config(format!("request {}", req.trace_id), e))
}

/// Reads one prepared request: prompt length (the simulator's counting,
/// scaled by the tokenizer ratio), its budget, and its output length
/// (fixed, or drawn from its class).
fn plan(model: &ServerModel, req: &PreparedRequest, lap: u64) -> Result<Planned, CoreError> {
    let field = || format!("request {}", req.trace_id);
    let parsed = parse_request(req)?;
    let api = req.dialect.as_str();
    let tokens = (f64::from(parsed.prompt_tokens) * model.prompt_tokens_per_word).round() as u32;
    let mut rng = ChaCha8Rng::seed_from_u64(
        model.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ parsed.prompt_hash,
    );
    let budget = parsed.max_tokens;
    let fixed = parsed.ignore_eos || budget.is_some_and(|b| parsed.min_tokens >= b);
    let (reasoning, content, finish) = match (fixed, budget) {
        (true, Some(b)) => (0, b, if parsed.ignore_eos { "length" } else { "stop" }),
        _ => {
            let class = model.output_class(api).ok_or_else(|| {
                CoreError::config(
                    field(),
                    format!(
                        "the model has no output lengths for {api} requests that end by themselves \
                         (calibrate from a run of such requests, or give the trace fixed lengths)"
                    ),
                )
            })?;
            let k = rng.random_range(0..class.content.len());
            let (r, c) = (class.reasoning[k], class.content[k]);
            let natural = (r + c).max(parsed.min_tokens).max(1);
            match budget {
                Some(b) if natural > b => (r.min(b), b - r.min(b), "length"),
                _ => (r, natural - r, "stop"),
            }
        }
    };
    let suffix = |s: &str| {
        if lap > 0 {
            format!("{s}#{lap}")
        } else {
            s.to_string()
        }
    };
    let session = req
        .session
        .as_ref()
        .map(|t| (std::sync::Arc::from(suffix(&t.session_id)), t.index));
    let think_us = req.session.as_ref().and_then(|t| t.think_time_us);
    let kv = u64::from(tokens) + u64::from(reasoning + content);
    let error = model.kv_cache_tokens.filter(|&b| kv > b).map(|b| {
        format!("the request needs {kv} KV-cache tokens, more than the whole cache ({b})")
    });
    Ok(Planned {
        trace_id: suffix(&req.trace_id),
        api,
        prompt_tokens: tokens.max(1),
        prefix_blocks: parsed.prefix_blocks,
        words: parsed.prompt_tokens,
        reasoning,
        content,
        finish,
        rng,
        session,
        think_us,
        session_turns: None,
        error,
    })
}

struct Des<'a> {
    model: &'a ServerModel,
    capacity: Capacity,
    step_us: u64,
    planned: Vec<Planned>,
    records: Vec<RequestRecord>,
    /// Request → its unit and position there.
    unit_of: Vec<(usize, usize)>,
    /// (ready at, request): sent, in their frontend delay.
    arriving: BinaryHeap<Reverse<(i64, usize)>>,
    waiting: VecDeque<usize>,
    running: Vec<Live>,
    kv_used: u64,
    prefix: Option<PrefixCache>,
    sent_order: Vec<usize>,
    closed_loop: bool,
    next_unit: usize,
    /// Closed loop: when each unit that ended freed its place.
    pending_units: Vec<i64>,
    duration_us: Option<i64>,
    stats: PredictStats,
}

impl<'a> Des<'a> {
    fn new(model: &'a ServerModel, planned: Vec<Planned>, spec: &RunSpec) -> Des<'a> {
        let capacity = model.capacity();
        let n = planned.len();
        Des {
            model,
            step_us: model.decode_step_us(),
            prefix: capacity
                .prefix_caching
                .then(|| PrefixCache::new(capacity.prefix_cache_tokens())),
            capacity,
            planned,
            records: vec![RequestRecord::default(); n],
            unit_of: vec![(0, 0); n],
            arriving: BinaryHeap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv_used: 0,
            sent_order: Vec::with_capacity(n),
            closed_loop: false,
            next_unit: 0,
            pending_units: Vec::new(),
            duration_us: spec.duration_s.map(|s| (s * 1e6).round() as i64),
            stats: PredictStats::default(),
        }
    }

    /// Starts unit `u` at `at`: sends its first request.
    fn send_unit(&mut self, units: &[Vec<usize>], u: usize, at: i64) {
        for (k, &r) in units[u].iter().enumerate() {
            self.unit_of[r] = (u, k);
        }
        self.send(units[u][0], at);
    }

    fn send(&mut self, r: usize, at: i64) {
        if self.duration_us.is_some_and(|d| at > d) {
            return;
        }
        let p = &self.planned[r];
        let record = &mut self.records[r];
        record.trace_id = p.trace_id.clone();
        record.api = p.api;
        record.scheduled_us = at;
        record.sent_us = Some(at);
        record.attempts = 1;
        record.session_id = p.session.as_ref().map(|s| s.0.clone());
        record.turn_index = p.session.as_ref().map(|s| s.1);
        record.session_turns = p.session_turns;
        record.think_time_us = p.think_us.filter(|_| p.session_turns.is_some());
        self.sent_order.push(r);
        if let Some(message) = p.error.clone() {
            record.http_status = Some(400);
            record.end_us = Some(at);
            record.first_byte_us = Some(at);
            record.error = Some((ErrorKind::Http, message));
            self.finished(r, at);
            return;
        }
        let jitter = self.model.frontend_jitter_us;
        let spread = if jitter > 0.0 {
            self.planned[r].rng.random_range(-0.5..0.5) * jitter
        } else {
            0.0
        };
        let ready = at + (self.model.frontend_us + spread).max(0.0).round() as i64;
        self.arriving.push(Reverse((ready, r)));
    }

    /// `r` ended at `end`: its session's next turn, or the next unit of a closed loop.
    fn finished(&mut self, r: usize, end: i64) {
        let k = self.unit_of[r].1;
        if let Some(next) = self.next_turn(r, k) {
            self.records[next].predecessor_end_us = Some(end);
            let think = self.planned[next].think_us.unwrap_or(0);
            self.send(next, end + think);
            return;
        }
        if self.closed_loop {
            self.pending_units.push(end);
        }
    }

    fn next_turn(&self, r: usize, k: usize) -> Option<usize> {
        let turns = self.planned[r].session_turns? as usize;
        (k + 1 < turns).then(|| r + 1)
    }

    fn run(&mut self, units: &[Vec<usize>]) {
        let mut last_end: Option<i64> = None;
        loop {
            self.start_pending_units(units);
            let start = if self.running.is_empty() && self.waiting.is_empty() {
                let Some(&Reverse((ready, _))) = self.arriving.peek() else {
                    break;
                };
                last_end.map_or(ready, |end| end.max(ready))
            } else {
                last_end.expect("a busy engine has run an iteration")
            };
            while let Some(&Reverse((ready, r))) = self.arriving.peek() {
                if ready > start {
                    break;
                }
                self.arriving.pop();
                self.waiting.push_back(r);
            }
            let cached_us = self.admit();
            let decoding = self.running.iter().filter(|l| l.decoding).count();
            let prefill_us = self.prefill(decoding) + cached_us;
            let busy = self.capacity.decode_step_us(self.step_us, decoding) + prefill_us;
            // A free iteration would not advance the clock: one µs keeps order.
            let end = start + busy.max(1) as i64;
            self.stats.iterations += 1;
            self.stats.peak_running = self.stats.peak_running.max(self.running.len());
            self.stats.peak_waiting = self.stats.peak_waiting.max(self.waiting.len());
            self.stats.peak_kv_tokens = self.stats.peak_kv_tokens.max(self.kv_used);
            self.step_all(end);
            last_end = Some(end);
        }
    }

    fn start_pending_units(&mut self, units: &[Vec<usize>]) {
        let pending = std::mem::take(&mut self.pending_units);
        for at in pending {
            if self.next_unit < units.len() {
                let u = self.next_unit;
                self.next_unit += 1;
                self.send_unit(units, u, at);
            }
        }
    }

    /// Computes this iteration's prompt chunks (the capacity model's token
    /// budget); returns their cost, µs.
    fn prefill(&mut self, decoding: usize) -> u64 {
        let left: Vec<u32> = self
            .running
            .iter()
            .filter(|l| !l.decoding)
            .map(|l| l.prefill_left)
            .collect();
        let chunks = self.capacity.prefill_chunks(decoding, &left);
        let mut computed = 0u64;
        for (live, chunk) in self.running.iter_mut().filter(|l| !l.decoding).zip(chunks) {
            live.prefill_left -= chunk;
            computed += u64::from(chunk);
        }
        (self.model.prefill_us_per_token * computed as f64).round() as u64
    }

    /// Admits from the head of the queue while a slot and KV room are free;
    /// returns the cost of the admitted prompts' cached tokens, µs (their
    /// computed tokens are charged by `prefill`, chunk by chunk).
    fn admit(&mut self) -> u64 {
        let mut prefill = 0.0;
        while let Some(&r) = self.waiting.front() {
            let p = &self.planned[r];
            let kv = u64::from(p.prompt_tokens) + u64::from(p.reasoning + p.content);
            if !self.capacity.admits(self.running.len(), self.kv_used, kv) {
                break;
            }
            self.waiting.pop_front();
            let cached = match &mut self.prefix {
                // As in vLLM (and the simulator), the last prompt token is always computed.
                Some(cache) => {
                    let words = cache.admit(&p.prefix_blocks).min(p.words.saturating_sub(1));
                    ((f64::from(words) * self.model.prompt_tokens_per_word).round() as u32)
                        .min(p.prompt_tokens - 1)
                }
                None => 0,
            };
            let computed = p.prompt_tokens - cached;
            prefill += self.model.prefill_us_per_cached_token * f64::from(cached);
            let record = &mut self.records[r];
            record.prompt_tokens = Some(i64::from(p.prompt_tokens));
            record.cached_tokens = self.prefix.as_ref().map(|_| i64::from(cached));
            self.kv_used += kv;
            self.running.push(Live {
                req: r,
                kv,
                decoding: false,
                prefill_left: computed,
                emitted: 0,
                delivered: 0,
                steps: 0,
            });
        }
        prefill.round() as u64
    }

    /// The iteration ended at `end`: every running request takes its step.
    fn step_all(&mut self, end: i64) {
        let mut done = Vec::new();
        let per_chunk = self.model.steps_per_chunk;
        let acceptance = &self.model.spec_acceptance;
        let mut i = 0;
        while i < self.running.len() {
            let live = &mut self.running[i];
            if live.prefill_left > 0 {
                // Still prefilling in chunks: no token this iteration.
                i += 1;
                continue;
            }
            let p = &mut self.planned[live.req];
            let total = p.reasoning + p.content;
            let mut tokens = 1;
            if live.decoding {
                for &a in acceptance {
                    if !p.rng.random_bool(a) {
                        break;
                    }
                    tokens += 1;
                }
            }
            let tokens = tokens.min(total - live.emitted);
            live.emitted += tokens;
            let last = live.emitted >= total;
            let record = &mut self.records[live.req];
            // Step 0 is a chunk; later steps are delivered every `per_chunk` steps.
            let delivers = !live.decoding
                || last
                || (live.steps as f64 / per_chunk).floor()
                    > ((live.steps - 1) as f64 / per_chunk).floor();
            live.steps += 1;
            live.decoding = true;
            if delivers {
                push_chunks(
                    record,
                    p.reasoning,
                    live.delivered,
                    live.emitted - live.delivered,
                    end,
                );
                live.delivered = live.emitted;
            }
            if last {
                record.end_us = Some(end);
                record.last_token_us = record.chunks.last().map(|c| c.ts_us);
                record.http_status = Some(200);
                record.finish_reason = Some(p.finish.to_string());
                record.reasoning_tokens = Some(i64::from(p.reasoning));
                record.content_tokens = Some(i64::from(p.content));
                record.output_tokens = Some(i64::from(total));
                record.token_source = Some(TokenSource::ContinuousUsage);
                record.chunk_token_source = Some(ChunkTokenSource::ContinuousUsage);
                self.kv_used -= live.kv;
                done.push(live.req);
                self.running.swap_remove(i);
            } else {
                i += 1;
            }
        }
        // Requests leave in batch order: keep sends deterministic whatever swap_remove did.
        done.sort_unstable();
        for r in done {
            self.finished(r, end);
        }
    }
}

/// Delivers tokens `first..first + count` at `ts` as one chunk per channel.
fn push_chunks(record: &mut RequestRecord, reasoning: u32, first: u32, count: u32, ts: i64) {
    let in_reasoning = reasoning.saturating_sub(first).min(count);
    for (channel, n) in [
        (Channel::Reasoning, in_reasoning),
        (Channel::Content, count - in_reasoning),
    ] {
        if n == 0 {
            continue;
        }
        record.chunks.push(Chunk {
            ts_us: ts,
            delay_us: None,
            tokens: n as i32,
            channel,
        });
        record.first_token_us.get_or_insert(ts);
        record.first_byte_us.get_or_insert(ts);
        match channel {
            Channel::Reasoning => record.first_reasoning_us.get_or_insert(ts),
            _ => record.first_content_us.get_or_insert(ts),
        };
    }
}

/// Moves a record's virtual timestamps to start at `start_us`.
fn shift(record: &mut RequestRecord, start_us: i64) {
    record.scheduled_us += start_us;
    for ts in [
        &mut record.sent_us,
        &mut record.first_byte_us,
        &mut record.first_token_us,
        &mut record.first_reasoning_us,
        &mut record.first_content_us,
        &mut record.last_token_us,
        &mut record.end_us,
        &mut record.predecessor_end_us,
    ]
    .into_iter()
    .flatten()
    {
        *ts += start_us;
    }
    for chunk in &mut record.chunks {
        chunk.ts_us += start_us;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                let req = PreparedRequest::new(
                    format!("r{i}"),
                    "chat",
                    url,
                    body.to_string().into(),
                    0.0,
                );
                (req.unwrap(), 0)
            })
            .collect()
    }

    fn closed_loop(n: usize) -> RunSpec {
        serde_json::from_value(
            serde_json::json!({"load": {"mode": "concurrency", "concurrency": n}}),
        )
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
        let (rows, _) =
            predict_point(&model(None), &closed_loop(2), &requests(2, 10, 3), 0).unwrap();
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
        let (rows, _) =
            predict_point(&model(None), &closed_loop(1), &requests(3, 10, 2), 0).unwrap();
        assert_eq!(rows.len(), 3);
        for pair in rows.windows(2) {
            assert_eq!(pair[1].sent_us, pair[0].end_us);
        }
        let indices: Vec<i64> = rows.iter().map(|r| r.request_index).collect();
        assert_eq!(indices, vec![0, 1, 2]);
    }
}
