//! specreplay-core: everything on the measurement path, in pure Rust.
//!
//! This crate has no Python in it so that it builds and tests with `cargo test`
//! alone; `rust/specreplay-py` is the thin pyo3 layer on top.

pub mod clock;
pub mod decode;
pub mod engine;
pub mod error;
pub mod fetch;
pub mod predict;
pub mod prompt;
pub mod proxy;
pub mod serve;
pub mod sim;
pub mod sse;

pub use engine::panic_message;
pub use error::CoreError;
