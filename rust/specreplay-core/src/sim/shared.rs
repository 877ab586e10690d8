//! What every request handler shares: the config, the served models, the
//! counters and the capacity model's scheduler.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use super::config::SimConfig;
use super::embed::PoolLane;
use super::engine::{EngineHandle, Job};
use super::fault::FaultStats;
use super::metrics::Metrics;
use super::pace::Pacer;
use super::request::MediaRule;
use super::script::Script;
use super::stream::ShutdownSignal;
use crate::serve::stopped;

/// A model the server answers as, with its own config (its speed).
pub(crate) struct Served {
    pub name: Arc<str>,
    pub config: SimConfig,
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
    pub metrics: Arc<Metrics>,
    /// The capacity model's scheduler, when the config has one.
    pub engine: Option<EngineHandle>,
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

    /// The `models` list from a config.
    pub fn served_models(config: &SimConfig) -> Vec<Served> {
        let first = Served {
            name: Arc::from(config.model.as_str()),
            config: SimConfig {
                models: Vec::new(),
                ..config.clone()
            },
        };
        let more = config.models.iter().map(|spec| Served {
            name: Arc::from(spec.name.as_str()),
            config: config.for_model(spec),
        });
        std::iter::once(first).chain(more).collect()
    }

    /// A future that resolves once the server shuts down (or its handle is dropped).
    pub fn shutdown_signal(&self) -> ShutdownSignal {
        Box::pin(stopped(self.shutdown.clone()))
    }

    /// What paces a request that arrived at `arrived`: its own clock, or the
    /// engine's batch (the request is submitted to it now).
    pub fn pacer(&self, script: &Script, prefix_blocks: Vec<u64>, arrived: Instant) -> Pacer {
        let Some(engine) = &self.engine else {
            return Pacer::own(arrived, script, self.metrics.clone());
        };
        let (steps, rx) = mpsc::unbounded_channel();
        engine.submit(Job {
            ready_at: arrived + self.config.frontend_delay(),
            script: script.clone(),
            prefix_blocks,
            steps,
        });
        Pacer::engine(rx, script, self.metrics.clone())
    }
}
