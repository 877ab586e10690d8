//! What every request handler shares: the config, the served models, the
//! counters and the capacity model's scheduler.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use super::config::SimConfig;
use super::engine::{EngineHandle, Job};
use super::exporter::Exporter;
use super::fault::FaultStats;
use super::pace::Pacer;
use super::pool_lane::PoolLane;
use super::request::MediaRule;
use super::script::Script;
use super::stream::ShutdownSignal;
use crate::serve::stopped;

/// A model the server answers as, with its own config (its speed).
pub(crate) struct Served {
    pub name: Arc<str>,
    pub config: SimConfig,
    /// The capacity model's batch it runs in, when the config has one: the
    /// base model's for a model at the base's speed (a LoRA adapter shares
    /// its base's batch, as in vLLM), its own for a model with a speed of
    /// its own (another base model: another engine).
    pub engine: Option<EngineHandle>,
}

/// What every request handler shares.
pub(crate) struct Shared {
    pub config: SimConfig,
    /// `config.model` first, then each of `config.models`.
    pub models: Vec<Served>,
    pub media: MediaRule,
    pub created: u64,
    /// The per-server request sequence number (response ids, fault draws).
    pub next_id: AtomicU64,
    pub stats: FaultStats,
    pub exporter: Arc<Exporter>,
    /// The pooling endpoints' forwards, one after another.
    pub pool_lane: PoolLane,
    pub shutdown: watch::Receiver<bool>,
}

impl Shared {
    /// The served model a request names: without `config.models` any name
    /// (or none) is answered as `config.model`; with them, a name must be one
    /// of the served ones (`None` is the first).
    pub fn served(&self, name: Option<&str>) -> Option<&Served> {
        match name {
            Some(name) if self.models.len() > 1 => self.models.iter().find(|m| &*m.name == name),
            _ => self.models.first(),
        }
    }

    /// The `models` list from a config, each with its batch: `spawn` starts
    /// an engine for a config (called once for the base, and once more for
    /// each model whose speed differs from the base's).
    pub fn served_models(
        config: &SimConfig,
        mut spawn: impl FnMut(&SimConfig) -> Option<EngineHandle>,
    ) -> Vec<Served> {
        let base = SimConfig {
            models: Vec::new(),
            ..config.clone()
        };
        let base_engine = spawn(&base);
        let first = Served {
            name: Arc::from(config.model.as_str()),
            engine: base_engine.clone(),
            config: base,
        };
        let more = config.models.iter().map(|spec| {
            let own = config.for_model(spec);
            let engine = if same_speed(&own, config) {
                base_engine.clone()
            } else {
                spawn(&own)
            };
            Served {
                name: Arc::from(spec.name.as_str()),
                config: own,
                engine,
            }
        });
        std::iter::once(first).chain(more).collect()
    }

    /// A future that resolves once the server shuts down (or its handle is dropped).
    pub fn shutdown_signal(&self) -> ShutdownSignal {
        Box::pin(stopped(self.shutdown.clone()))
    }

    /// What paces a request that arrived at `arrived`: its own clock, or the
    /// engine's batch (the request is submitted to it now).
    pub fn pacer(
        &self,
        served: &Served,
        script: &Script,
        prefix_blocks: Vec<u64>,
        arrived: Instant,
    ) -> Pacer {
        let Some(engine) = &served.engine else {
            return Pacer::own(arrived, script, self.exporter.clone());
        };
        let (steps, rx) = mpsc::unbounded_channel();
        engine.submit(Job {
            ready_at: arrived + served.config.frontend_delay(),
            script: script.clone(),
            prefix_blocks,
            steps,
        });
        Pacer::engine(rx, script, self.exporter.clone())
    }
}

/// Whether two configs run at the same speed (share one batch).
fn same_speed(a: &SimConfig, b: &SimConfig) -> bool {
    a.ttft_ms == b.ttft_ms
        && a.prefill_us_per_token == b.prefill_us_per_token
        && a.tpot_ms == b.tpot_ms
}
