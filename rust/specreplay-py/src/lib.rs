//! `specreplay._core`: the narrow, typed boundary between the Rust engine and
//! the Python layer. Keep it thin: logic belongs in `specreplay-core`.

use pyo3::prelude::*;

mod arrow_export;
mod decode;
mod errors;
mod prompt;
mod proxy;
mod replay;
mod runtime;
mod served;
mod sim;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(now_us, m)?)?;
    m.add_function(wrap_pyfunction!(replay::start_point, m)?)?;
    m.add_function(wrap_pyfunction!(decode::decode_response, m)?)?;
    m.add_class::<replay::EngineRun>()?;
    m.add_class::<arrow_export::ArrowBatch>()?;
    errors::register(m)?;
    m.add_class::<sim::SimServer>()?;
    m.add_class::<proxy::CaptureProxy>()?;
    m.add_class::<prompt::Filler>()?;
    Ok(())
}

/// Microseconds since the epoch on the engine's anchored monotonic clock.
#[pyfunction]
fn now_us() -> i64 {
    specreplay_core::clock::now_us()
}
