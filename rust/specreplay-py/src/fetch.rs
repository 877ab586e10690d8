//! `fetch`: one whole HTTP exchange for the requests around a run (the
//! preflight, the usage probe, `/tokenize`, the `/metrics` scrapes), by the
//! core's `fetch` module, the GIL released while it waits.

use std::time::Duration;

use pyo3::exceptions::{PyConnectionError, PyTimeoutError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use specreplay_core::fetch::{fetch as fetch_whole, FetchError};

use crate::errors::ConfigError;

/// What came back: any status (a 404 is an answer), its canonical reason,
/// the `Content-Type`, the whole body, and `now_us` stamps just before the
/// request went out and when the response's head had come.
#[pyclass(module = "specreplay._core", frozen, get_all)]
pub struct Fetched {
    status: u16,
    reason: String,
    content_type: String,
    body: Py<PyBytes>,
    sent_us: i64,
    headers_us: i64,
}

/// Sends `method url` and reads the whole answer within `timeout_s`.
/// Raises `ConfigError` for a URL, method or header no request can carry,
/// `TimeoutError` when the answer is not complete in time, and
/// `ConnectionError` (with the causes) when the connection fails.
#[pyfunction]
#[pyo3(signature = (method, url, headers, body=None, timeout_s=5.0))]
pub fn fetch(
    py: Python<'_>,
    method: &str,
    url: &str,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    timeout_s: f64,
) -> PyResult<Fetched> {
    if !(timeout_s.is_finite() && timeout_s > 0.0) {
        return Err(ConfigError::new_err(format!(
            "timeout_s must be positive, not {timeout_s}"
        )));
    }
    let timeout = Duration::from_secs_f64(timeout_s);
    let got = py.detach(|| fetch_whole(method, url, &headers, body, timeout));
    match got {
        Ok(f) => Ok(Fetched {
            status: f.status,
            reason: f.reason,
            content_type: f.content_type,
            body: PyBytes::new(py, &f.body).unbind(),
            sent_us: f.sent_us,
            headers_us: f.headers_us,
        }),
        Err(e @ FetchError::Invalid(_)) => Err(ConfigError::new_err(e.to_string())),
        Err(e @ FetchError::Timeout(_)) => Err(PyTimeoutError::new_err(e.to_string())),
        Err(e @ FetchError::Failed(_)) => Err(PyConnectionError::new_err(e.to_string())),
    }
}
