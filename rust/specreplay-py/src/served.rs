//! `BackgroundServer`: what `SimServer` and `CaptureProxy` share, in one
//! place: a server from the core running in the background on one of the
//! binding's runtimes, its address, and a stop that happens at most once (by
//! `stop()`, by leaving a `with` block, or by being dropped). Both are its
//! subclasses, here and in `_core.pyi`.

use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;

use pyo3::prelude::*;
use specreplay_core::serve::Background;
use specreplay_core::CoreError;
use tokio::runtime::Runtime;

use crate::errors::{ConfigError, Error};

#[pyclass(module = "specreplay._core", subclass, frozen)]
pub struct BackgroundServer {
    addr: SocketAddr,
    server: Mutex<Option<Background>>,
    runtime: &'static Runtime,
}

impl BackgroundServer {
    pub fn new(server: impl Into<Background>, runtime: &'static Runtime) -> Self {
        let server = server.into();
        BackgroundServer {
            addr: server.local_addr(),
            server: Mutex::new(Some(server)),
            runtime,
        }
    }
}

/// Runs a core server's `start` on `runtime` for HOST:PORT with the GIL
/// released; returns once it listens.
pub fn start_on<T, F, Fut>(
    py: Python<'_>,
    runtime: &'static Runtime,
    host: &str,
    port: u16,
    start: F,
) -> PyResult<T>
where
    F: FnOnce(SocketAddr) -> Fut + Send,
    Fut: Future<Output = Result<T, CoreError>>,
    T: Send,
{
    py.detach(|| {
        let addr = resolve(host, port)?;
        runtime
            .block_on(start(addr))
            .map_err(|e| PyErr::from(Error::from(e)))
    })
}

#[pymethods]
impl BackgroundServer {
    /// The IP address the server is bound to.
    #[getter]
    fn host(&self) -> String {
        self.addr.ip().to_string()
    }

    /// The port the server is bound to (the chosen one when asked for port 0).
    #[getter]
    fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The OpenAI base URL clients use, e.g. `http://127.0.0.1:8000/v1`.
    #[getter]
    fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Whether the server is still serving (`stop()` not called yet).
    #[getter]
    fn running(&self) -> bool {
        self.server.lock().map(|g| g.is_some()).unwrap_or(false)
    }

    /// Stops accepting, ends what is in flight (each server's own way: see
    /// its class) and waits for the connections to close, with the GIL
    /// released. Calling it again does nothing.
    fn stop(&self, py: Python<'_>) {
        let server = self.server.lock().ok().and_then(|mut g| g.take());
        if let Some(server) = server {
            py.detach(|| self.runtime.block_on(server.shutdown()));
        }
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
        self.stop(py);
    }

    /// `SimServer(url="…", running)`.
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let this = slf.get();
        let state = if this.running() { "running" } else { "stopped" };
        let name = slf.get_type().name()?;
        Ok(format!("{name}(url={:?}, {state})", this.url()))
    }
}

/// HOST:PORT as a socket address, or an error naming the host.
fn resolve(host: &str, port: u16) -> PyResult<SocketAddr> {
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::from(CoreError::io(format!("cannot resolve host {host:?}"), e)))?;
    addrs.next().ok_or_else(|| {
        ConfigError::new_err(format!(
            "invalid configuration: host: {host:?} has no address"
        ))
    })
}
