//! What `SimServer` and `CaptureProxy` share: a server from the core running
//! in the background on one of the binding's runtimes, stopped at most once
//! (by `stop()`, by leaving a `with` block, or by being dropped).

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;

use pyo3::prelude::*;
use specreplay_core::serve::Background;
use specreplay_core::CoreError;
use tokio::runtime::Runtime;

use crate::errors::{ConfigError, Error};

pub struct Served {
    addr: SocketAddr,
    server: Mutex<Option<Background>>,
    runtime: &'static Runtime,
}

impl Served {
    pub fn new(server: impl Into<Background>, runtime: &'static Runtime) -> Self {
        let server = server.into();
        Served {
            addr: server.local_addr(),
            server: Mutex::new(Some(server)),
            runtime,
        }
    }

    pub fn host(&self) -> String {
        self.addr.ip().to_string()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The OpenAI base URL clients use, e.g. `http://127.0.0.1:8000/v1`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn running(&self) -> bool {
        self.server.lock().map(|g| g.is_some()).unwrap_or(false)
    }

    /// Shuts the server down and waits, with the GIL released; later calls do nothing.
    pub fn stop(&self, py: Python<'_>) {
        let server = self.server.lock().ok().and_then(|mut g| g.take());
        if let Some(server) = server {
            py.detach(|| self.runtime.block_on(server.shutdown()));
        }
    }

    /// `Name(url="…", running)`.
    pub fn repr(&self, name: &str) -> String {
        let state = if self.running() { "running" } else { "stopped" };
        format!("{name}(url={:?}, {state})", self.url())
    }
}

/// HOST:PORT as a socket address, or an error naming the host.
pub fn resolve(host: &str, port: u16) -> PyResult<SocketAddr> {
    let mut addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::from(CoreError::io(format!("cannot resolve host {host:?}"), e)))?;
    addrs.next().ok_or_else(|| {
        ConfigError::new_err(format!(
            "invalid configuration: host: {host:?} has no address"
        ))
    })
}
