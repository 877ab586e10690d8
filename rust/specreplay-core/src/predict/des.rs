//! The server side of a prediction: a discrete-event simulation of the
//! engine's iterations, batching as the simulator's capacity model does (the
//! same `Capacity` admission rule, decode-step formula and token budget, the
//! same `PrefixCache`) with the calibrated costs. An iteration is one loop
//! turn; each iteration's end is a chunk of every request in it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::model::ServerModel;
use super::plan::Planned;
use crate::decode::Channel;
use crate::engine::record::{Chunk, ChunkTokenSource, ErrorKind, RequestRecord, TokenSource};
use crate::engine::RunSpec;
use crate::sim::capacity::Capacity;
use crate::sim::prefix::PrefixCache;

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

pub(super) struct Des<'a> {
    model: &'a ServerModel,
    capacity: Capacity,
    step_us: u64,
    planned: Vec<Planned>,
    pub(super) records: Vec<RequestRecord>,
    /// Request → its unit and position there.
    unit_of: Vec<(usize, usize)>,
    /// (ready at, request): sent, in their frontend delay.
    arriving: BinaryHeap<Reverse<(i64, usize)>>,
    waiting: VecDeque<usize>,
    running: Vec<Live>,
    kv_used: u64,
    prefix: Option<PrefixCache>,
    pub(super) sent_order: Vec<usize>,
    pub(super) closed_loop: bool,
    pub(super) next_unit: usize,
    /// Closed loop: when each unit that ended freed its place.
    pending_units: Vec<i64>,
    duration_us: Option<i64>,
    pub(super) stats: PredictStats,
    /// The server's speed now (a factor on iteration costs) and until when.
    speed: f64,
    speed_until: i64,
    speed_rng: ChaCha8Rng,
    /// Draws `cached_co_launch`'s race (a stream of its own: the other
    /// draws stay the same whatever it decides).
    launch_rng: ChaCha8Rng,
}

impl<'a> Des<'a> {
    pub(super) fn new(model: &'a ServerModel, planned: Vec<Planned>, spec: &RunSpec) -> Des<'a> {
        let capacity = model.capacity();
        let n = planned.len();
        let digest = trace_digest(&planned);
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
            speed: 1.0,
            speed_until: i64::MIN,
            speed_rng: ChaCha8Rng::seed_from_u64(model.seed ^ digest ^ 0x5eed_0f5b_eed0_0000),
            launch_rng: ChaCha8Rng::seed_from_u64(model.seed ^ digest ^ 0x1a0c_c0a1_e5ce_0000),
        }
    }

    /// Starts unit `u` at `at`: sends its first request.
    pub(super) fn send_unit(&mut self, units: &[Vec<usize>], u: usize, at: i64) {
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

    pub(super) fn run(&mut self, units: &[Vec<usize>]) {
        let mut last_end: Option<i64> = None;
        loop {
            self.start_pending_units(units);
            let idle = self.running.is_empty() && self.waiting.is_empty();
            let start = if idle {
                let Some(&Reverse((ready, _))) = self.arriving.peek() else {
                    break;
                };
                last_end.map_or(ready, |end| end.max(ready))
            } else {
                last_end.expect("a busy engine has run an iteration")
            };
            self.queue_arrivals(start);
            let cached_us = self.admit(idle);
            let decoding = self.running.iter().filter(|l| l.decoding).count();
            let prefill_us = self.prefill(decoding) + cached_us;
            let busy = self.capacity.decode_step_us(self.step_us, decoding) + prefill_us;
            let busy = (busy as f64 * self.speed_at(start)).round() as u64;
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

    /// The speed factor of an iteration starting at `at`: one log-normal
    /// draw per window of `speed_window_us` (windows on the virtual clock).
    fn speed_at(&mut self, at: i64) -> f64 {
        let (spread, window) = (
            self.model.speed_spread,
            self.model.speed_window_us.round() as i64,
        );
        if spread <= 0.0 || window <= 0 {
            return 1.0;
        }
        if at >= self.speed_until {
            // Box-Muller: a standard normal from two uniforms in (0, 1].
            let u1: f64 = 1.0 - self.speed_rng.random::<f64>();
            let u2: f64 = self.speed_rng.random::<f64>();
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            self.speed = (spread * z).exp();
            self.speed_until = (at.div_euclid(window) + 1) * window;
        }
        self.speed
    }

    /// Queues the requests that reached the server by `start`. When one is
    /// queued, so are those sent by `start` and still in their frontend
    /// time: the loop takes about as long to launch a queued request as a
    /// request takes to reach it (llama.cpp: 3–5 ms to launch an uncached
    /// slot, 4–17 ms from send to first byte), so a closed loop's next
    /// request, sent on its predecessor's last chunk, is launched with the
    /// one queued behind it (two llama.cpp requests sent 14 ms apart, one
    /// iteration, shared their prefill and stayed in lockstep). Only with
    /// `co_launch` (calibrated: the simulator and vLLM start at once).
    fn queue_arrivals(&mut self, start: i64) {
        while let Some(&Reverse((ready, r))) = self.arriving.peek() {
            if ready > start {
                break;
            }
            self.arriving.pop();
            self.waiting.push_back(r);
        }
        if self.waiting.is_empty() || !self.model.co_launch {
            return;
        }
        let horizon =
            start + (self.model.frontend_us + self.model.frontend_jitter_us / 2.0).ceil() as i64;
        let mut later = Vec::new();
        while let Some(&Reverse((ready, r))) = self.arriving.peek() {
            if ready > horizon {
                break;
            }
            self.arriving.pop();
            if self.records[r].sent_us.is_some_and(|sent| sent <= start) {
                self.waiting.push_back(r);
            } else {
                later.push(Reverse((ready, r)));
            }
        }
        self.arriving.extend(later);
    }

    /// The usage probe's request ran before the point: its prompt is cached.
    pub(super) fn warm_prefix(&mut self, r: usize) {
        if let Some(cache) = &mut self.prefix {
            cache.admit(&self.planned[r].prefix_blocks);
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
    ///
    /// `idle`: the engine had nothing to run, so this iteration starts at
    /// the first arrival. A prompt found cached whole then starts it alone:
    /// llama.cpp's loop launches a slot that holds the prompt in 0.2 ms and
    /// runs the iteration at once, before a request sent in the same
    /// millisecond is queued (an uncached prompt's launch, 3–5 ms while its
    /// slot's old prompt goes to the cache, lets those queue and join). The
    /// usage probe's first request meets it at every closed loop's start:
    /// the requests sent with it are prefilled in its first decode gap.
    /// That is a race: with `cached_co_launch` measured, its chance decides;
    /// without, the arrival order (`launches_alone`).
    fn admit(&mut self, idle: bool) -> u64 {
        let mut prefill = 0.0;
        let mut alone = false;
        let first_alone = self.launches_alone(idle);
        while let Some(&r) = self.waiting.front() {
            let p = &self.planned[r];
            let kv = u64::from(p.prompt_tokens) + u64::from(p.reasoning + p.content);
            if alone || !self.capacity.admits(self.running.len(), self.kv_used, kv) {
                break;
            }
            self.waiting.pop_front();
            let cached = match &mut self.prefix {
                // As in vLLM (and the simulator), the last prompt token is always computed.
                Some(cache) => {
                    let words = cache.admit(&p.prefix_blocks).min(p.words.saturating_sub(1));
                    ((f64::from(words) * self.model.prompt_tokens_per_word).round() as u32)
                        .max(self.model.template_cached_tokens)
                        .min(p.prompt_tokens - 1)
                }
                None => 0,
            };
            alone = first_alone;
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

    /// Whether this iteration, at an idle engine, launches a prompt found
    /// cached whole alone (moved to the queue's head). With
    /// `cached_co_launch` measured, drawn with its odds whatever the
    /// arrival order; without, when that prompt reached the server first.
    fn launches_alone(&mut self, idle: bool) -> bool {
        if !(self.model.co_launch && idle && self.running.is_empty()) {
            return false;
        }
        let Some(cache) = &self.prefix else {
            return false;
        };
        let whole = |r: &usize| cache.holds_whole(&self.planned[*r].prefix_blocks);
        let Some(share) = self.model.cached_co_launch else {
            return self.waiting.front().is_some_and(whole);
        };
        let Some(at) = self.waiting.iter().position(whole) else {
            return false;
        };
        if self.launch_rng.random::<f64>() < share {
            return false;
        }
        let r = self.waiting.remove(at).expect("a position in the queue");
        self.waiting.push_front(r);
        true
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

/// The run's requests folded into one number (their prompts, in order):
/// the server's own streams (speed, the launch race) are seeded with it
/// beside the model's seed, so that two traces predicted with one seed
/// draw them independently, as two real runs would (a point run in parts,
/// each on its own trace, drew the same speed spells and the same launch
/// coin in every part), while one trace at several loads keeps the same
/// draws (the capacity search's common random numbers).
fn trace_digest(planned: &[Planned]) -> u64 {
    planned.iter().fold(0xcbf2_9ce4_8422_2325, |h, p| {
        (h ^ p.prompt_hash).wrapping_mul(0x0000_0100_0000_01b3)
    })
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
