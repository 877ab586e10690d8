//! `CaptureProxy`: the forwarding half of `specreplay capture`, serving in the
//! background on its own runtime (`PROXY_RUNTIME`). Python reads what went
//! through with `next_events` (GIL released while it waits) and writes the
//! trace; the proxy never waits for it.

use std::sync::{mpsc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use specreplay_core::proxy::{ProxyConfig, ProxyEvent, ProxyServer};

use crate::errors::{ConfigError, Error};
use crate::runtime::PROXY_RUNTIME;
use crate::served::{resolve, Served};

#[pyclass(module = "specreplay._core", name = "CaptureProxy", frozen)]
pub struct CaptureProxy {
    served: Served,
    events: Mutex<mpsc::Receiver<ProxyEvent>>,
}

fn event_dict<'py>(py: Python<'py>, event: ProxyEvent) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match event {
        ProxyEvent::Request(r) => {
            d.set_item("kind", "request")?;
            d.set_item("seq", r.seq)?;
            d.set_item("arrival_us", r.arrival_us)?;
            d.set_item("method", r.method)?;
            d.set_item("path", r.path)?;
            d.set_item("body", PyBytes::new(py, &r.body))?;
            d.set_item("error", r.error)?;
        }
        ProxyEvent::Response(r) => {
            let len = r.body.iter().map(|b| b.len()).sum();
            let body = PyBytes::new_with(py, len, |buf| {
                let mut at = 0;
                for chunk in &r.body {
                    buf[at..at + chunk.len()].copy_from_slice(chunk);
                    at += chunk.len();
                }
                Ok(())
            })?;
            d.set_item("kind", "response")?;
            d.set_item("seq", r.seq)?;
            d.set_item("status", r.status)?;
            d.set_item("ttfb_us", r.ttfb_us)?;
            d.set_item("end_us", r.end_us)?;
            d.set_item("content_type", r.content_type)?;
            d.set_item("content_encoding", r.content_encoding)?;
            d.set_item("body", body)?;
            d.set_item("truncated", r.truncated)?;
            d.set_item("error", r.error)?;
        }
    }
    Ok(d)
}

#[pymethods]
impl CaptureProxy {
    /// Binds HOST:PORT and forwards every request to `upstream` (a base URL
    /// the request's path and query are appended to verbatim). Returns once
    /// it listens. `drain_s`: how long `stop()` lets requests in flight end.
    #[new]
    #[pyo3(signature = (upstream, host = "127.0.0.1", port = 0, drain_s = 10.0))]
    fn new(py: Python<'_>, upstream: &str, host: &str, port: u16, drain_s: f64) -> PyResult<Self> {
        if !(drain_s.is_finite() && drain_s >= 0.0) {
            return Err(ConfigError::new_err(format!(
                "invalid configuration: drain_s: must be a non-negative number, got {drain_s}"
            )));
        }
        let config = ProxyConfig {
            upstream: upstream.to_string(),
            drain: Duration::from_secs_f64(drain_s),
        };
        let (server, events) = py.detach(|| {
            let addr = resolve(host, port)?;
            PROXY_RUNTIME
                .block_on(ProxyServer::start(config, addr))
                .map_err(|e| PyErr::from(Error::from(e)))
        })?;
        Ok(CaptureProxy {
            served: Served::new(server, &PROXY_RUNTIME),
            events: Mutex::new(events),
        })
    }

    /// The IP address the proxy is bound to.
    #[getter]
    fn host(&self) -> String {
        self.served.host()
    }

    /// The port the proxy is bound to (the chosen one when asked for port 0).
    #[getter]
    fn port(&self) -> u16 {
        self.served.port()
    }

    /// The OpenAI base URL clients use, e.g. `http://127.0.0.1:8080/v1`.
    #[getter]
    fn url(&self) -> String {
        self.served.url()
    }

    /// Waits up to `wait_s` for events; returns up to `max` of them (maybe
    /// none), or None once the proxy has stopped and every event was read.
    /// Per request: `{"kind": "request", seq, arrival_us, method, path, body,
    /// error}` once its body is read, then `{"kind": "response", seq, status,
    /// ttfb_us, end_us, content_type, content_encoding, body, truncated,
    /// error}` once it has ended (`ttfb_us`, `end_us`: µs after arrival).
    #[pyo3(signature = (max = 256, wait_s = 0.25))]
    fn next_events<'py>(
        &self,
        py: Python<'py>,
        max: usize,
        wait_s: f64,
    ) -> PyResult<Option<Vec<Bound<'py, PyDict>>>> {
        let wait = Duration::from_secs_f64(if wait_s.is_finite() {
            wait_s.max(0.0)
        } else {
            0.0
        });
        let got = py.detach(|| {
            let rx = self.events.lock().unwrap_or_else(|p| p.into_inner());
            match rx.recv_timeout(wait) {
                Ok(first) => {
                    let mut out = vec![first];
                    while out.len() < max.max(1) {
                        match rx.try_recv() {
                            Ok(ev) => out.push(ev),
                            Err(_) => break,
                        }
                    }
                    Some(out)
                }
                Err(mpsc::RecvTimeoutError::Timeout) => Some(Vec::new()),
                Err(mpsc::RecvTimeoutError::Disconnected) => None,
            }
        });
        match got {
            Some(events) => Ok(Some(
                events
                    .into_iter()
                    .map(|ev| event_dict(py, ev))
                    .collect::<PyResult<_>>()?,
            )),
            None => Ok(None),
        }
    }

    /// Whether the proxy is still serving (`stop()` not called yet).
    #[getter]
    fn running(&self) -> bool {
        self.served.running()
    }

    /// Stops accepting, lets requests in flight end (up to `drain_s`), cuts
    /// the rest and waits for the connections to close. Calling it again
    /// does nothing. Events stay readable until `next_events` returns None.
    fn stop(&self, py: Python<'_>) {
        self.served.stop(py);
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
        self.served.stop(py);
    }

    fn __repr__(&self) -> String {
        self.served.repr("CaptureProxy")
    }
}
