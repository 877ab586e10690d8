//! The simulated reasoning-model server: the default target of a benchmark
//! run without `--url`. It answers like vLLM (chat and completions, streaming
//! and not), thinks before it answers (reasoning tokens count against the
//! output budget), can imitate speculative decoding, and keeps its timing
//! deterministic: the same request under the same seed gets the same tokens
//! on the same schedule. See `docs/simulator.md`.
//!
//! One module per job: `config` (what to simulate), `request` (reading a
//! request), `script` (the per-request plan), `render` (the JSON), `stream`
//! (the timed SSE body), `routes` (handlers), `server` (life cycle),
//! `fault` (fault injection: kinds, the seeded draw, the connection kill switch).

pub mod config;
pub mod fault;
pub mod render;
pub mod request;
mod routes;
pub mod script;
mod server;
pub mod stream;

pub use config::{ReasoningField, SimConfig};
pub use fault::{FaultKind, FAULT_HEADER};
pub use server::SimServer;
