//! What the simulator and the capture proxy share as servers: a listener served
//! in the background, the accept loop, stopping each connection gracefully, and
//! the handle that stops it all. Each keeps only what differs: the simulator's
//! per-connection kill switch, the proxy's drain limit.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::error::CoreError;

/// The listen backlog: connections the kernel holds for the accept loop.
/// A client that opens its connections before its clock (specreplay's own
/// preconnect: 1,024 for a fast rate or a closed loop of 1,024) overflowed
/// the 128 that `TcpListener::bind` asks for whenever the accept loop lagged:
/// the kernel drops the handshake's last ACK, the client thinks it is
/// connected, and its request waits for TCP's retransmits (a 5,000/s point
/// against `specreplay serve` hung with 44 such connections). The kernel
/// caps it at `net.core.somaxconn` (4,096 by default since Linux 5.4).
const BACKLOG: u32 = 4096;

/// Binds `addr` (port 0 picks a free port) with [`BACKLOG`]; returns the
/// listener and the address actually bound.
pub async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), CoreError> {
    let cannot = |e| CoreError::io(format!("cannot bind {addr}"), e);
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(cannot)?;
    // As TcpListener::bind: a restarted server can take its port back at once.
    socket.set_reuseaddr(true).map_err(cannot)?;
    socket.bind(addr).map_err(cannot)?;
    let listener = socket.listen(BACKLOG).map_err(cannot)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_kernel_queues_a_preconnect_burst_for_the_accept_loop() {
        // 300 connections opened before anything accepts, as a client's
        // preconnect does: every one is queued (the old backlog of 128 held
        // 129; the rest waited for TCP's retransmits).
        let (listener, addr) = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4096);
        let n = 300.min(somaxconn);
        // Bounded: past a full queue a handshake waits for a retry (seconds).
        let clients: Vec<_> = (0..n)
            .filter_map(|_| {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()
            })
            .collect();
        let listener = listener.into_std().unwrap();
        let mut queued = 0;
        while listener.accept().is_ok() {
            queued += 1; // non-blocking: stops at the first WouldBlock
        }
        assert_eq!(queued, n, "{n} connections opened, {queued} queued");
        drop(clients);
    }
}
