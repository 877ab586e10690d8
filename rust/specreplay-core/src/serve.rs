//! What the simulator and the capture proxy share as servers: a listener served
//! in the background, the accept loop, stopping each connection gracefully, and
//! the handle that stops it all. Each keeps only what differs: the simulator's
//! per-connection kill switch, the proxy's drain limit.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::error::CoreError;

/// Binds `addr` (port 0 picks a free port); returns the listener and the
/// address actually bound.
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), CoreError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| CoreError::io(format!("cannot bind {addr}"), e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CoreError::io("cannot read the bound address", e))?;
    Ok((listener, bound))
}

/// A server running on a tokio runtime. Dropping it tells the server to stop
/// without waiting for it.
pub struct Background {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Background {
    /// Spawns `serve` on the current runtime; it must return once the
    /// receiver it is given turns true.
    pub fn spawn<F, Fut>(addr: SocketAddr, serve: F) -> Background
    where
        F: FnOnce(watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = watch::channel(false);
        Background {
            addr,
            stop,
            task: Some(tokio::spawn(serve(stopped))),
        }
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Tells the server to stop and waits until it has.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Accepts connections until `stop`, spawning `serve(stream)` for each (with
/// Nagle off: SSE chunks are small). Returns the connections still open, for
/// the caller to drain its own way; the listener is closed by then.
pub async fn accept_until<F, Fut>(
    listener: TcpListener,
    stop: watch::Receiver<bool>,
    mut serve: F,
) -> JoinSet<()>
where
    F: FnMut(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    let mut stop_signal = std::pin::pin!(stopped(stop));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(serve(stream));
                }
                // Out of file descriptors or a reset before accept: let it pass.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stop_signal.as_mut() => break,
        }
    }
    connections
}

/// Serves `conn` until it ends; once `stop` turns true, closes it gracefully
/// (idle keep-alive connections at once, others after their response).
pub async fn until_stopped<C: GracefulConnection>(conn: C, stop: watch::Receiver<bool>) {
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stopped(stop) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}
