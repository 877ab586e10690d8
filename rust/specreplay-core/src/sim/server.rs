//! The server's life: bind, accept (HTTP/1.1 keep-alive or h2c, detected by
//! hyper-util's `auto` builder), and shut down — stop accepting, close idle
//! connections, end open streams with `finish_reason: "abort"`, wait.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::config::SimConfig;
use super::fault::{ConnControl, FaultStats, SimIo};
use super::routes;
use super::stream::ShutdownSignal;
use crate::error::CoreError;

/// What every request handler shares.
pub(crate) struct Shared {
    pub config: SimConfig,
    pub model: Arc<str>,
    pub created: u64,
    /// The per-server request sequence number (response ids, fault draws).
    pub next_id: AtomicU64,
    pub stats: FaultStats,
    shutdown: watch::Receiver<bool>,
}

impl Shared {
    /// A future that resolves once the server shuts down (or its handle is dropped).
    pub fn shutdown_signal(&self) -> ShutdownSignal {
        let mut rx = self.shutdown.clone();
        Box::pin(async move {
            let _ = rx.wait_for(|stop| *stop).await;
        })
    }
}

/// A running simulated server. Dropping it shuts it down without waiting.
pub struct SimServer {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl SimServer {
    /// Validates `config`, binds `addr` (port 0 picks a free port) and starts
    /// serving on the current tokio runtime. Returns once it is listening.
    pub async fn start(config: SimConfig, addr: SocketAddr) -> Result<SimServer, CoreError> {
        config.validate()?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| CoreError::io(format!("cannot bind {addr}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| CoreError::io("cannot read the bound address", e))?;
        let (tx, rx) = watch::channel(false);
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let shared = Arc::new(Shared {
            model: Arc::from(config.model.as_str()),
            config,
            created,
            next_id: AtomicU64::new(0),
            stats: FaultStats::default(),
            shutdown: rx.clone(),
        });
        let task = tokio::spawn(accept_loop(listener, shared, rx));
        Ok(SimServer {
            addr,
            shutdown: tx,
            task: Some(task),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, ends open streams (`finish_reason: "abort"`, then
    /// `[DONE]`), closes connections and waits for all of it.
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _peer)) => stream,
                    Err(_) => {
                        // Out of file descriptors or a reset before accept: let it pass.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // The kill switch of this connection: a fault drops it at
                // once (an RST after `reset()`), whatever hyper is doing.
                let control = Arc::new(ConnControl::default());
                let handler = shared.clone();
                let handler_control = control.clone();
                let service = service_fn(move |req| {
                    routes::handle(handler.clone(), handler_control.clone(), req)
                });
                let io = TokioIo::new(SimIo::new(stream, control.clone()));
                let conn = builder.serve_connection(io, service).into_owned();
                let mut conn_stop = shared.shutdown.clone();
                connections.spawn(async move {
                    let mut conn = std::pin::pin!(conn);
                    tokio::select! {
                        _ = conn.as_mut() => return,
                        _ = control.killed() => return,
                        _ = async { let _ = conn_stop.wait_for(|s| *s).await; } => {}
                    }
                    conn.as_mut().graceful_shutdown();
                    tokio::select! {
                        _ = conn => {}
                        _ = control.killed() => {}
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = async { let _ = stop.wait_for(|s| *s).await; } => break,
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}
