//! `SimServer`: the simulated reasoning-model server, run in the background on
//! its own one-thread tokio runtime (not the engine's: see `SIM_RUNTIME`).
//! Construction validates the config and returns once the server listens;
//! `stop()` (or leaving the `with` block, or dropping the object) shuts it
//! down.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use specreplay_core::sim::{SimConfig, SimServer as CoreSimServer};

use crate::errors::{ConfigError, Error};
use crate::runtime::SIM_RUNTIME;
use crate::served::{resolve, Served};

#[pyclass(module = "specreplay._core", name = "SimServer", frozen)]
pub struct SimServer(Served);

/// Turns the config dict into a `SimConfig` through JSON, one key at a time,
/// so that a value JSON cannot hold (a set, NaN) is reported with its key;
/// serde then names unknown keys and bad values.
fn config_from_dict(py: Python<'_>, dict: &Bound<'_, PyDict>) -> PyResult<SimConfig> {
    let json = py.import("json")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("allow_nan", false)?;
    let mut map = serde_json::Map::new();
    for (key, value) in dict.iter() {
        let key: String = key
            .cast::<PyString>()
            .map_err(|_| {
                ConfigError::new_err(format!(
                    "invalid configuration: key {key:?} is not a string"
                ))
            })?
            .to_string();
        let text: String = json
            .call_method("dumps", (value,), Some(&kwargs))
            .and_then(|t| t.extract())
            .map_err(|e| ConfigError::new_err(format!("invalid configuration: {key}: {e}")))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ConfigError::new_err(format!("invalid configuration: {key}: {e}")))?;
        map.insert(key, value);
    }
    Ok(SimConfig::from_json(&serde_json::Value::Object(map).to_string()).map_err(Error::from)?)
}

#[pymethods]
impl SimServer {
    #[new]
    #[pyo3(signature = (host = "127.0.0.1", port = 0, config = None))]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        config: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let config = match config {
            Some(dict) => config_from_dict(py, dict)?,
            None => SimConfig::default(),
        };
        let server = py.detach(|| {
            let addr = resolve(host, port)?;
            SIM_RUNTIME
                .block_on(CoreSimServer::start(config, addr))
                .map_err(|e| PyErr::from(Error::from(e)))
        })?;
        Ok(SimServer(Served::new(server, &SIM_RUNTIME)))
    }

    /// The IP address the server is bound to.
    #[getter]
    fn host(&self) -> String {
        self.0.host()
    }

    /// The port the server is bound to (the chosen one when asked for port 0).
    #[getter]
    fn port(&self) -> u16 {
        self.0.port()
    }

    /// The OpenAI base URL, e.g. `http://127.0.0.1:8000/v1`.
    #[getter]
    fn url(&self) -> String {
        self.0.url()
    }

    /// Whether the server is still serving (`stop()` not called yet).
    #[getter]
    fn running(&self) -> bool {
        self.0.running()
    }

    /// Stops accepting, ends open streams (`finish_reason: "abort"`) and
    /// waits for the connections to close. Calling it again does nothing.
    fn stop(&self, py: Python<'_>) {
        self.0.stop(py);
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        exc_value: &Bound<'_, PyAny>,
        traceback: &Bound<'_, PyAny>,
    ) {
        let _ = (exc_type, exc_value, traceback);
        self.0.stop(py);
    }

    fn __repr__(&self) -> String {
        self.0.repr("SimServer")
    }
}
