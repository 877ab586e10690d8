//! The simulator's Prometheus exporter, `GET /metrics`: what the simulator
//! did, in vLLM's names, types and labels (`model_name`, `engine="0"`), so
//! that a scraper written for vLLM reads the simulator unchanged. See "Metrics" in docs/simulator.md.
//!
//! The exposition comes from the `prometheus` crate rather than
//! `prometheus-client`: its text encoder writes the classic text format
//! (0.0.4) that vLLM's Python client serves, `# TYPE` lines named as vLLM's
//! are (`vllm:prompt_tokens_total counter`), while `prometheus-client`
//! writes OpenMetrics only.

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

use super::config::SimConfig;
use super::script::Step;

/// `Content-Type` of the page, as vLLM sends it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The finish reasons counted in `vllm:request_success_total` (those the
/// simulator can produce), each present from the start as in vLLM.
const FINISH_REASONS: [&str; 3] = ["stop", "length", "abort"];

/// The speculative-decoding counters (present only when speculation is on,
/// as in vLLM).
struct SpecCounters {
    drafts: IntCounter,
    draft_tokens: IntCounter,
    accepted: IntCounter,
    /// `vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`,
    /// every position of the draft present from the start.
    accepted_per_pos: IntCounterVec,
    /// Its children by position, looked up once.
    positions: Vec<IntCounter>,
}

impl SpecCounters {
    fn new(family: &Family, draft_len: u32) -> SpecCounters {
        let accepted_per_pos = family.counter_vec(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            "Accepted tokens per draft position.",
            "position",
        );
        let positions = (0..draft_len)
            .map(|pos| accepted_per_pos.with_label_values(&[&pos.to_string()]))
            .collect();
        SpecCounters {
            drafts: family.counter(
                "vllm:spec_decode_num_drafts_total",
                "Number of spec decoding drafts.",
            ),
            draft_tokens: family.counter(
                "vllm:spec_decode_num_draft_tokens_total",
                "Number of draft tokens.",
            ),
            accepted: family.counter(
                "vllm:spec_decode_num_accepted_tokens_total",
                "Number of accepted tokens.",
            ),
            accepted_per_pos,
            positions,
        }
    }
}

/// The simulator's Prometheus exporter: its counters and gauges, and the
/// page they make.
pub struct Exporter {
    registry: Registry,
    prompt_tokens: IntCounter,
    generation_tokens: IntCounter,
    success: IntCounterVec,
    running: IntGauge,
    waiting: IntGauge,
    kv_usage: Gauge,
    /// `vllm:prefix_cache_queries_total` and `..._hits_total` (tokens), when
    /// the capacity model caches prefixes.
    prefix: Option<(IntCounter, IntCounter)>,
    spec: Option<SpecCounters>,
}

impl Exporter {
    pub fn new(config: &SimConfig) -> Exporter {
        let family = Family {
            model: config.model.as_str(),
        };
        let caches_prefixes = config.capacity.as_ref().is_some_and(|c| c.prefix_caching);
        let exporter = Exporter {
            prompt_tokens: family.counter(
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
            ),
            generation_tokens: family.counter(
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
            ),
            success: success_counter(&family),
            running: family.int_gauge(
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
            ),
            waiting: family.int_gauge(
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
            ),
            kv_usage: family.gauge(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
            ),
            prefix: caches_prefixes.then(|| prefix_counters(&family)),
            spec: (config.spec_draft_len > 0)
                .then(|| SpecCounters::new(&family, config.spec_draft_len)),
            registry: Registry::new(),
        };
        exporter.register_all();
        exporter
    }

    fn register_all(&self) {
        let mut all: Vec<Box<dyn Collector>> = vec![
            Box::new(self.running.clone()),
            Box::new(self.waiting.clone()),
            Box::new(self.kv_usage.clone()),
            Box::new(self.prompt_tokens.clone()),
            Box::new(self.generation_tokens.clone()),
            Box::new(self.success.clone()),
        ];
        if let Some((queries, hits)) = &self.prefix {
            all.push(Box::new(queries.clone()));
            all.push(Box::new(hits.clone()));
        }
        if let Some(spec) = &self.spec {
            all.push(Box::new(spec.drafts.clone()));
            all.push(Box::new(spec.draft_tokens.clone()));
            all.push(Box::new(spec.accepted.clone()));
            all.push(Box::new(spec.accepted_per_pos.clone()));
        }
        for collector in all {
            self.registry
                .register(collector)
                .expect("each metric is registered once");
        }
    }

    /// A prompt went through prefill.
    pub fn count_prompt(&self, tokens: u32) {
        self.prompt_tokens.inc_by(u64::from(tokens));
    }

    /// The prefix cache was asked for `queried` prompt tokens and held
    /// `cached` of them.
    pub fn count_prefix(&self, queried: u32, cached: u32) {
        if let Some((queries, hits)) = &self.prefix {
            queries.inc_by(u64::from(queried));
            hits.inc_by(u64::from(cached));
        }
    }

    /// A decode step ran: its tokens, and its drafts when it verified some.
    pub fn count_step(&self, step: &Step) {
        self.generation_tokens.inc_by(u64::from(step.tokens));
        let Some(spec) = self.spec.as_ref().filter(|_| step.drafted > 0) else {
            return;
        };
        spec.drafts.inc();
        spec.draft_tokens.inc_by(u64::from(step.drafted));
        spec.accepted.inc_by(u64::from(step.accepted));
        for pos in &spec.positions[..step.accepted as usize] {
            pos.inc();
        }
    }

    /// A request ended: `stop`, `length`, or `abort` (cancelled before its end).
    pub fn count_finish(&self, reason: &str) {
        self.success.with_label_values(&[reason]).inc();
    }

    /// Requests in the batch (or, without the capacity model, in flight).
    pub fn running(&self) -> &IntGauge {
        &self.running
    }

    /// The capacity model's queue, its batch and its KV cache (`used` of
    /// `budget` tokens; no budget reads 0).
    pub fn set_scheduler(&self, running: usize, waiting: usize, used: u64, budget: Option<u64>) {
        self.running.set(running as i64);
        self.waiting.set(waiting as i64);
        self.kv_usage
            .set(budget.map_or(0.0, |b| used as f64 / b as f64));
    }

    /// The page, in the Prometheus text format.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("encoding metrics into memory cannot fail");
        out
    }
}

/// `vllm:request_success_total`, every finish reason present from the start.
fn success_counter(family: &Family) -> IntCounterVec {
    let success = family.counter_vec(
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        "finished_reason",
    );
    for reason in FINISH_REASONS {
        success.with_label_values(&[reason]);
    }
    success
}

/// The prefix cache's queried and hit tokens.
fn prefix_counters(family: &Family) -> (IntCounter, IntCounter) {
    let queries = family.counter(
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
    );
    let hits = family.counter(
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
    );
    (queries, hits)
}

/// Makes the metrics of one served model, with vLLM's constant labels
/// (`model_name`, `engine="0"`).
struct Family<'a> {
    model: &'a str,
}

impl Family<'_> {
    fn opts(&self, name: &str, help: &str) -> Opts {
        Opts::new(name, help)
            .const_label("model_name", self.model)
            .const_label("engine", "0")
    }

    fn counter(&self, name: &str, help: &str) -> IntCounter {
        IntCounter::with_opts(self.opts(name, help)).expect("a valid metric definition")
    }

    fn counter_vec(&self, name: &str, help: &str, label: &str) -> IntCounterVec {
        IntCounterVec::new(self.opts(name, help), &[label]).expect("a valid metric definition")
    }

    fn int_gauge(&self, name: &str, help: &str) -> IntGauge {
        IntGauge::with_opts(self.opts(name, help)).expect("a valid metric definition")
    }

    fn gauge(&self, name: &str, help: &str) -> Gauge {
        Gauge::with_opts(self.opts(name, help)).expect("a valid metric definition")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(m: &Exporter) -> String {
        String::from_utf8(m.render()).unwrap()
    }

    fn step(index: u32, tokens: u32, drafted: u32, accepted: u32) -> Step {
        Step {
            index,
            due_us: 0,
            first: 0,
            tokens,
            last: false,
            drafted,
            accepted,
        }
    }

    #[test]
    fn names_types_and_labels_are_vllms() {
        let m = Exporter::new(&SimConfig {
            model: "m".into(),
            spec_draft_len: 2,
            ..SimConfig::default()
        });
        m.count_prompt(10);
        m.count_step(&step(0, 1, 0, 0));
        m.count_step(&step(1, 3, 2, 2));
        m.count_step(&step(2, 2, 2, 1));
        m.count_finish("stop");
        m.set_scheduler(3, 2, 50, Some(200));
        let text = page(&m);
        for line in [
            "# TYPE vllm:num_requests_running gauge",
            "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3",
            "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25",
            "# TYPE vllm:prompt_tokens_total counter",
            "vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 10",
            "vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 6",
            "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 1",
            "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"m\"} 0",
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            "vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"m\"} 2",
            "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"m\"} 4",
            "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"m\"} 3",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"m\",position=\"0\"} 2",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"m\",position=\"1\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
    }

    #[test]
    fn no_speculation_no_spec_counters() {
        let m = Exporter::new(&SimConfig::default());
        m.count_step(&step(1, 1, 0, 0));
        let text = page(&m);
        assert!(!text.contains("spec_decode"), "{text}");
        assert!(
            text.contains("vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"specreplay-sim\"} 0")
        );
    }
}
