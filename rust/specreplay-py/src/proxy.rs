//! `CaptureProxy`: the forwarding half of `specreplay capture`, serving in the
//! background on its own runtime (`PROXY_RUNTIME`). Python reads what went
//! through with `next_events` (GIL released while it waits): each request as
//! it arrived, then its response as a finished, decoded record. The proxy
//! never waits for it. Address, `stop()` and the `with` block come from
//! `BackgroundServer`.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use specreplay_core::proxy::{Captured, Captures, ProxyConfig, ProxyServer};

use crate::config::from_mapping;
use crate::decode::ResponseCounts;
use crate::runtime::PROXY_RUNTIME;
use crate::served::{start_on, BackgroundServer};

/// `stop()` lets requests in flight end (up to `drain_s`), then cuts the
/// rest; reports stay readable until `next_events` returns None.
#[pyclass(module = "specreplay._core", name = "CaptureProxy", extends = BackgroundServer, frozen)]
pub struct CaptureProxy {
    captures: Captures,
}

/// A request, once its body has been read (before it is forwarded).
#[pyclass(module = "specreplay._core", frozen, get_all)]
pub struct CapturedRequest {
    /// Pairs it with its `CapturedResponse`; unique per proxy.
    seq: u64,
    /// When its head was read, µs since the epoch (`now_us()`'s clock).
    arrival_us: i64,
    method: String,
    /// The path, without the query string.
    path: String,
    /// The API it is (a `ProxyConfig.apis` key), or None.
    api: Option<&'static str>,
    /// The body as received (empty when it could not be read: see `error`).
    body: Py<PyBytes>,
    /// Why the body could not be read (the proxy answered the request itself).
    error: Option<String>,
    /// The value of the configured session header, when the request has it.
    session: Option<String>,
}

/// A request's response once it has ended: with its `ResponseCounts`, the
/// `response` object of a captured trace record, decoded in the core.
#[pyclass(module = "specreplay._core", extends = ResponseCounts, frozen, get_all)]
pub struct CapturedResponse {
    seq: u64,
    /// The upstream's status, or the proxy's own (502, 400, 413).
    status: u16,
    /// Response head, µs after arrival (None: no head was sent).
    ttfb_us: Option<i64>,
    /// Last byte, break or abandonment, µs after arrival.
    end_us: i64,
    /// The answer's text (content, then tool-call arguments), for finding the
    /// conversation's next turn; None when the body was not decoded. Never written.
    answer: Option<String>,
}

fn to_python(py: Python<'_>, captured: Captured) -> PyResult<Py<PyAny>> {
    Ok(match captured {
        Captured::Request(r) => Py::new(
            py,
            CapturedRequest {
                seq: r.seq,
                arrival_us: r.arrival_us,
                method: r.method,
                path: r.path,
                api: r.api.map(|d| d.as_str()),
                body: PyBytes::new(py, &r.body).unbind(),
                error: r.error,
                session: r.session,
            },
        )?
        .into_any(),
        Captured::Response(r) => {
            let counts = ResponseCounts::new(&r.usage, r.finish_reason, r.error);
            Py::new(
                py,
                PyClassInitializer::from(counts).add_subclass(CapturedResponse {
                    seq: r.seq,
                    status: r.status,
                    ttfb_us: r.ttfb_us,
                    end_us: r.end_us,
                    answer: r.answer,
                }),
            )?
            .into_any()
        }
    })
}

#[pymethods]
impl CaptureProxy {
    /// Binds HOST:PORT and forwards every request to `config["upstream"]`
    /// (the `ProxyConfig` mapping). Returns once it listens.
    #[new]
    #[pyo3(signature = (config, host = "127.0.0.1", port = 0))]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyAny>,
        host: &str,
        port: u16,
    ) -> PyResult<PyClassInitializer<Self>> {
        let config: ProxyConfig = from_mapping("capture", config, ProxyConfig::validate)?;
        let runtime = PROXY_RUNTIME.get()?;
        let (server, captures) = start_on(py, runtime, host, port, |addr| {
            ProxyServer::start(config, addr)
        })?;
        Ok(
            PyClassInitializer::from(BackgroundServer::new(server, runtime))
                .add_subclass(CaptureProxy { captures }),
        )
    }

    /// Waits up to `wait_s` for reports; returns up to `max` of them (maybe
    /// none), or None once the proxy has stopped and every report was read.
    /// Per request: a `CapturedRequest`, then a `CapturedResponse` (same `seq`).
    #[pyo3(signature = (max = 256, wait_s = 0.25))]
    fn next_events(
        &self,
        py: Python<'_>,
        max: usize,
        wait_s: f64,
    ) -> PyResult<Option<Vec<Py<PyAny>>>> {
        let wait = Duration::from_secs_f64(if wait_s.is_finite() {
            wait_s.max(0.0)
        } else {
            0.0
        });
        // Decoding happens in there, on this thread, with the GIL released.
        match py.detach(|| self.captures.next(max, wait)) {
            Some(events) => Ok(Some(
                events
                    .into_iter()
                    .map(|e| to_python(py, e))
                    .collect::<PyResult<_>>()?,
            )),
            None => Ok(None),
        }
    }
}
