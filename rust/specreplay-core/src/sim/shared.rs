//! What every request handler shares: the config, the served models, the
//! counters and the capacity model's scheduler.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use super::config::SimConfig;
use super::engine::{EngineHandle, Job};
use super::fault::FaultStats;
use super::metrics::Metrics;
use super::pace::Pacer;
use super::script::Script;
use super::stream::ShutdownSignal;
use crate::serve::stopped;

/// What every request handler shares.
pub(crate) struct Shared {
    pub config: SimConfig,
    pub model: Arc<str>,
    pub created: u64,
    /// The per-server request sequence number (response ids, fault draws).
    pub next_id: AtomicU64,
    pub stats: FaultStats,
    pub metrics: Arc<Metrics>,
    /// The capacity model's scheduler, when the config has one.
    pub engine: Option<EngineHandle>,
    pub shutdown: watch::Receiver<bool>,
}

impl Shared {
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
