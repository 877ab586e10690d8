//! The capacity model: one scheduler per batch (the base model and its
//! adapters share one; a model of its own speed has another), continuous
//! batching as vLLM does it. A request joins the FIFO waiting queue once its frontend delay
//! (`ttft_ms`) has passed. At each iteration boundary the head of the queue
//! is admitted while a batch slot (`max_num_seqs`) is free and the KV cache
//! holds its prompt plus its whole answer (a request waits, it is never
//! preempted). An iteration lasts the decode step of the sequences already
//! decoding (growing with their number) plus the prefill of those admitted
//! in it; when it ends, every running request gets its next step, the
//! admitted ones their first token. The formulas, and the knee they imply,
//! are in "Capacity model" in docs/simulator.md.
//!
//! An idle engine starts an iteration at the instant the request became
//! ready, not when the task woke up, and a busy one starts each iteration at
//! the end of the last: a lone request keeps exactly the schedule it has
//! without the model, and late wake-ups do not drift.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::config::{Capacity, SimConfig};
use super::exporter::Exporter;
use super::pace::Paced;
use super::prefix::PrefixCache;
use super::script::Script;
use super::stream::ShutdownSignal;

/// A request handed to the engine.
pub struct Job {
    /// When it joins the waiting queue (arrival + frontend delay).
    pub ready_at: Instant,
    /// The engine's copy of the plan: it draws the steps.
    pub script: Script,
    /// The prompt's full blocks, for the prefix cache.
    pub prefix_blocks: Vec<u64>,
    /// Where its steps go; closed when the client has gone.
    pub steps: mpsc::UnboundedSender<Paced>,
}

impl Job {
    /// KV-cache tokens the request holds while it runs: prompt and answer.
    pub fn kv_tokens(script: &Script) -> u64 {
        u64::from(script.prompt_tokens) + u64::from(script.total_tokens())
    }
}

/// The way in: submits jobs to the engine task.
#[derive(Clone)]
pub struct EngineHandle(mpsc::UnboundedSender<Job>);

impl EngineHandle {
    /// Starts the engine task on the current runtime; it ends at `shutdown`.
    pub fn spawn(
        config: &SimConfig,
        capacity: Capacity,
        exporter: Arc<Exporter>,
        shutdown: ShutdownSignal,
    ) -> EngineHandle {
        let (tx, inbox) = mpsc::unbounded_channel();
        let engine = Engine {
            step_us: config.step_us(),
            config: config.clone(),
            prefix: capacity
                .prefix_caching
                .then(|| PrefixCache::new(capacity.prefix_cache_tokens())),
            capacity,
            exporter,
            arriving: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv_used: 0,
            last_end: None,
        };
        tokio::spawn(engine.run(inbox, shutdown));
        EngineHandle(tx)
    }

    /// Queues `job`. A stopped engine drops it, and with it the sender of
    /// its steps: the request's pacer then ends the answer.
    pub fn submit(&self, job: Job) {
        let _ = self.0.send(job);
    }
}

/// A request in the batch.
struct Running {
    job: Job,
    kv: u64,
    /// Past its prefill iteration.
    decoding: bool,
    /// Prompt tokens still to compute (`capacity.max_num_batched_tokens`):
    /// no step until the last chunk is in.
    prefill_left: u32,
    /// Prompt tokens the prefix cache served (`None` without one).
    cached: Option<u32>,
}

struct Engine {
    /// The one-sequence decode step (speculation cost included), µs.
    step_us: u64,
    /// The config, for the prefill cost of a prompt.
    config: SimConfig,
    capacity: Capacity,
    prefix: Option<PrefixCache>,
    exporter: Arc<Exporter>,
    /// Submitted, still in their frontend delay.
    arriving: Vec<Job>,
    waiting: VecDeque<Job>,
    running: Vec<Running>,
    kv_used: u64,
    /// End of the last iteration.
    last_end: Option<Instant>,
}

impl Engine {
    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Job>, mut shutdown: ShutdownSignal) {
        loop {
            while let Ok(job) = inbox.try_recv() {
                self.arriving.push(job);
            }
            let start = if self.running.is_empty() && self.waiting.is_empty() {
                // Idle: wait for the first request to be ready, or a new one.
                let ready = self.arriving.iter().map(|j| j.ready_at).min();
                let wake = tokio::time::Instant::from_std(ready.unwrap_or_else(far_future));
                tokio::select! {
                    job = inbox.recv() => match job {
                        Some(job) => {
                            self.arriving.push(job);
                            continue;
                        }
                        None => return,
                    },
                    _ = tokio::time::sleep_until(wake), if ready.is_some() => {}
                    _ = &mut shutdown => return,
                }
                let ready = ready.expect("woken by the timer");
                self.last_end.map_or(ready, |end| end.max(ready))
            } else {
                self.last_end.expect("a busy engine has run an iteration")
            };
            self.promote(start);
            self.admit();
            let decoding = self.running.iter().filter(|r| r.decoding).count();
            let prefill_us = self.prefill(decoding);
            let busy_us = self.capacity.decode_step_us(self.step_us, decoding) + prefill_us;
            let end = start + Duration::from_micros(busy_us);
            self.publish();
            tokio::select! {
                _ = tokio::time::sleep_until(end.into()) => {}
                _ = &mut shutdown => return,
            }
            if busy_us == 0 {
                // A free iteration (tpot 0, no prefill cost): let the streams run.
                tokio::task::yield_now().await;
            }
            self.step_all(end);
            self.last_end = Some(end);
            self.publish();
        }
    }

    /// Moves the requests ready by `start` into the waiting queue, in order.
    fn promote(&mut self, start: Instant) {
        let (mut ready, later): (Vec<Job>, Vec<Job>) = std::mem::take(&mut self.arriving)
            .into_iter()
            .partition(|j| j.ready_at <= start);
        ready.sort_by_key(|j| j.ready_at);
        self.waiting.extend(ready);
        self.arriving = later;
    }

    /// Admits from the head of the queue while a slot and KV room are free
    /// (first come, first served: the head blocks those behind it).
    fn admit(&mut self) {
        while let Some(head) = self.waiting.front() {
            if head.steps.is_closed() {
                // The client went while it waited (its pacer counted the abort).
                self.waiting.pop_front();
                continue;
            }
            let kv = Job::kv_tokens(&head.script);
            if !self.capacity.admits(self.running.len(), self.kv_used, kv) {
                break;
            }
            let job = self.waiting.pop_front().expect("the head exists");
            let prompt = job.script.prompt_tokens;
            self.exporter.count_prompt(prompt);
            let hit = self
                .prefix
                .as_mut()
                // As in vLLM, the last prompt token is always computed.
                .map(|cache| cache.admit(&job.prefix_blocks).min(prompt - 1));
            let cached = hit.unwrap_or(0);
            self.exporter.count_prefix(prompt, cached);
            self.kv_used += kv;
            self.running.push(Running {
                job,
                kv,
                decoding: false,
                prefill_left: prompt - cached,
                cached: hit,
            });
        }
    }

    /// Computes this iteration's prompt chunks (the whole prompts without a
    /// token budget); returns their cost, µs.
    fn prefill(&mut self, decoding: usize) -> u64 {
        let left: Vec<u32> = self
            .running
            .iter()
            .filter(|r| !r.decoding)
            .map(|r| r.prefill_left)
            .collect();
        let chunks = self.capacity.prefill_chunks(decoding, &left);
        let mut computed = 0;
        for (r, chunk) in self.running.iter_mut().filter(|r| !r.decoding).zip(chunks) {
            r.prefill_left -= chunk;
            computed += chunk;
        }
        self.config.prefill_compute_us(computed)
    }

    /// The iteration ended at `end`: every running request gets its next
    /// step; the finished and the abandoned leave the batch.
    fn step_all(&mut self, end: Instant) {
        let mut freed = 0;
        self.running.retain_mut(|r| {
            if r.prefill_left > 0 {
                return true; // mid-prefill: no step yet
            }
            let Some(step) = r.job.script.next_step() else {
                freed += r.kv;
                return false;
            };
            self.exporter.count_step(&step);
            r.decoding = true;
            let paced = Paced {
                step,
                at: end,
                cached_tokens: r.cached,
            };
            let delivered = r.job.steps.send(paced).is_ok();
            let stays = delivered && !step.last;
            if !stays {
                freed += r.kv;
            }
            stays
        });
        self.kv_used -= freed;
    }

    fn publish(&self) {
        self.exporter.set_scheduler(
            self.running.len(),
            self.waiting.len(),
            self.kv_used,
            self.capacity.kv_budget(),
        );
    }
}

/// A deadline that never comes (the timer arm is disabled then anyway).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}
