//! `SimServer`: the simulated reasoning-model server, run in the background on
//! its own one-thread tokio runtime (not the engine's: see `SIM_RUNTIME`).
//! Construction validates the config and returns once the server listens;
//! address, `stop()` and the `with` block come from `BackgroundServer`.

use pyo3::prelude::*;
use specreplay_core::sim::{SimConfig, SimServer as CoreSimServer};

use crate::config::from_mapping;
use crate::errors::ConfigError;
use crate::runtime::{EMBEDDED_SIM_RUNTIME, SIM_RUNTIME};
use crate::served::{start_on, BackgroundServer};

/// `stop()` ends open streams (`finish_reason: "abort"`).
#[pyclass(module = "specreplay._core", name = "SimServer", extends = BackgroundServer, frozen)]
pub struct SimServer {}

#[pymethods]
impl SimServer {
    /// `config`: the `SimConfig` mapping (every key optional; unknown keys
    /// and bad values are a `ConfigError` naming the key). `embedded`: the
    /// server runs beside the engine in the replaying process, so its thread
    /// is real-time where the engine's are (`EMBEDDED_SIM_RUNTIME`).
    #[new]
    #[pyo3(signature = (host = "127.0.0.1", port = 0, config = None, embedded = false))]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        config: Option<&Bound<'_, PyAny>>,
        embedded: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        let config = match config {
            Some(mapping) => from_mapping("sim", mapping, SimConfig::validate)?,
            None => SimConfig::default(),
        };
        let runtime = if embedded {
            EMBEDDED_SIM_RUNTIME.get()?
        } else {
            SIM_RUNTIME.get()?
        };
        let server = start_on(py, runtime, host, port, |addr| {
            CoreSimServer::start(config, addr)
        })?;
        Ok(
            PyClassInitializer::from(BackgroundServer::new(server, runtime))
                .add_subclass(SimServer {}),
        )
    }
}

/// The capacity model's knee (docs/simulator.md, "The knee"): the highest
/// arrival rate, in requests/s, that a simulator with `config` sustains for
/// requests of `prompt_tokens` computed prompt tokens and `output_tokens`
/// answer tokens (`SimConfig::knee_rate`). A `ConfigError` when `config` is
/// invalid or has no capacity model.
#[pyfunction]
pub fn sim_knee_rate(
    config: &Bound<'_, PyAny>,
    prompt_tokens: u32,
    output_tokens: u32,
) -> PyResult<f64> {
    let config: SimConfig = from_mapping("sim", config, SimConfig::validate)?;
    match &config.capacity {
        Some(capacity) => Ok(config.knee_rate(capacity, prompt_tokens, output_tokens)),
        None => Err(ConfigError::new_err(
            "sim: no capacity model (add a capacity table), so there is no knee",
        )),
    }
}
