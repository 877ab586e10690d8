//! The server's life: bind, accept (HTTP/1.1 keep-alive or h2c, detected by
//! hyper-util's `auto` builder), and shut down — stop accepting, close idle
//! connections, end open streams with `finish_reason: "abort"`, wait.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::config::SimConfig;
use super::engine::EngineHandle;
use super::exporter::Exporter;
use super::fault::{ConnControl, FaultStats, SimIo};
use super::routes;
use super::shared::Shared;
use crate::error::CoreError;
use crate::serve::{accept_until, bind, stopped, until_stopped, Background};

/// A running simulated server. Dropping it shuts it down without waiting.
pub struct SimServer(Background);

impl SimServer {
    /// Validates `config`, binds `addr` (port 0 picks a free port) and starts
    /// serving on the current tokio runtime. Returns once it is listening.
    pub async fn start(config: SimConfig, addr: SocketAddr) -> Result<SimServer, CoreError> {
        config.validate()?;
        let (listener, addr) = bind(addr).await?;
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(SimServer(Background::spawn(addr, |stop| {
            let exporter = Arc::new(Exporter::new(&config));
            let spawn = |own: &SimConfig| {
                let capacity = config.capacity.clone()?;
                let shutdown = Box::pin(stopped(stop.clone()));
                Some(EngineHandle::spawn(
                    own,
                    capacity,
                    exporter.clone(),
                    shutdown,
                ))
            };
            let models = Shared::served_models(&config, spawn);
            let shared = Arc::new(Shared {
                models,
                media: config.media_rule(),
                config,
                created,
                next_id: AtomicU64::new(0),
                stats: FaultStats::default(),
                exporter,
                pool_lane: Default::default(),
                shutdown: stop.clone(),
            });
            serve(listener, shared, stop)
        })))
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.0.local_addr()
    }

    /// Stops accepting, ends open streams (`finish_reason: "abort"`, then
    /// `[DONE]`), closes connections and waits for all of it.
    pub async fn shutdown(self) {
        self.0.shutdown().await;
    }
}

impl From<SimServer> for Background {
    fn from(server: SimServer) -> Background {
        server.0
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let mut connections = accept_until(listener, stop.clone(), |stream| {
        // The kill switch of this connection: a fault drops it at once (an
        // RST after `reset()`), whatever hyper is doing, draining included.
        let control = Arc::new(ConnControl::default());
        let handler = shared.clone();
        let handler_control = control.clone();
        let service =
            service_fn(move |req| routes::handle(handler.clone(), handler_control.clone(), req));
        let io = TokioIo::new(SimIo::new(stream, control.clone()));
        let conn = builder.serve_connection(io, service).into_owned();
        let stop = stop.clone();
        async move {
            tokio::select! {
                _ = until_stopped(conn, stop) => {}
                _ = control.killed() => {}
            }
        }
    })
    .await;
    while connections.join_next().await.is_some() {}
}
