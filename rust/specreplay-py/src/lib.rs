//! `specreplay._core`: the narrow, typed boundary between the Rust engine and
//! the Python layer. Keep it thin: logic belongs in `specreplay-core`.
//! Configuration crosses as typed mappings (`config.rs`), rows as Arrow
//! record batches (`arrow.rs`), everything else as small frozen classes.

use pyo3::prelude::*;

mod arrow;
mod config;
mod decode;
mod errors;
mod fetch;
mod predict;
mod prompt;
mod proxy;
mod replay;
mod runtime;
mod served;
mod sim;
mod tokens;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(now_us, m)?)?;
    m.add_function(wrap_pyfunction!(is_secret_header, m)?)?;
    m.add_function(wrap_pyfunction!(set_realtime, m)?)?;
    m.add_function(wrap_pyfunction!(replay::start_point, m)?)?;
    m.add_function(wrap_pyfunction!(decode::decode_response, m)?)?;
    m.add_function(wrap_pyfunction!(fetch::fetch, m)?)?;
    m.add_class::<fetch::Fetched>()?;
    m.add_function(wrap_pyfunction!(sim::sim_knee_rate, m)?)?;
    m.add_function(wrap_pyfunction!(predict::predict_point, m)?)?;
    m.add_function(wrap_pyfunction!(predict::sim_prompt_tokens, m)?)?;
    m.add_class::<predict::PredictStats>()?;
    m.add_function(wrap_pyfunction!(tokens::reconcile_chunk_tokens, m)?)?;
    m.add_class::<replay::EngineRun>()?;
    m.add_class::<replay::EngineProgress>()?;
    m.add_class::<replay::EngineScheduling>()?;
    m.add_class::<arrow::ArrowBatch>()?;
    m.add_class::<decode::ResponseCounts>()?;
    m.add_class::<decode::DecodedResponse>()?;
    errors::register(m)?;
    m.add_class::<served::BackgroundServer>()?;
    m.add_class::<sim::SimServer>()?;
    m.add_class::<proxy::CaptureProxy>()?;
    m.add_class::<proxy::CapturedRequest>()?;
    m.add_class::<proxy::CapturedResponse>()?;
    m.add_class::<prompt::Filler>()?;
    Ok(())
}

/// Microseconds since the epoch on the engine's anchored monotonic clock.
#[pyfunction]
fn now_us() -> i64 {
    specreplay_core::clock::now_us()
}

/// Whether the engine's threads (and the embedded simulator's) ask for
/// real-time scheduling, for the rest of the process, over
/// `SPECREPLAY_REALTIME` (`engine::priority::set_wanted`). Threads already
/// started keep theirs.
#[pyfunction]
fn set_realtime(wanted: bool) {
    specreplay_core::engine::priority::set_wanted(wanted)
}

/// Whether a header's value is a secret (never recorded or written): the
/// core's one list, `engine::SECRET_HEADERS`, in any case.
#[pyfunction]
fn is_secret_header(name: &str) -> bool {
    specreplay_core::engine::is_secret_header_name(name)
}
