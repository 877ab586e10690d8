//! The simulated reasoning-model server: the default target of a benchmark
//! run without `--url`. It answers like vLLM (chat and completions, streaming
//! and not), thinks before it answers (reasoning tokens count against the
//! output budget), can imitate speculative decoding, and keeps its timing
//! deterministic: the same request under the same seed gets the same tokens
//! on the same schedule. See `docs/simulator.md`.
//!
//! One module per job: `config` (what to simulate), `request` (reading a
//! request), `script` (the per-request plan and its text), `render` (the
//! JSON), `stream` (the timed SSE body), `full` (the non-streaming answer),
//! `generate` (a generation request from bytes to answer), `routes`
//! (routing), `exporter` (the Prometheus exporter behind `GET /metrics`),
//! `server` (life cycle), `fault/` (fault injection: kinds and draw,
//! counters, the connection kill switch, payload surgery, staged bodies).

pub mod capacity;
pub mod config;
mod embed;
mod engine;
pub mod exporter;
pub mod fault;
mod full;
mod generate;
mod hash;
mod http;
mod pace;
mod pool_lane;
pub mod prefix;
pub mod render;
pub mod request;
mod routes;
pub mod script;
mod server;
mod shared;
pub mod stream;
pub mod structured;
mod words;

pub use config::{Capacity, ModelSpec, ReasoningField, SimConfig};
pub use fault::{FaultKind, FAULT_HEADER};
pub use server::SimServer;
