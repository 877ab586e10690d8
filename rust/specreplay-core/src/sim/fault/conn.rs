//! The per-connection kill switch: a handler or a body asks for the
//! connection to end now, with an RST (`reset`) or a FIN (`close`), and the
//! socket wrapper makes the kernel send the RST.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// A connection's kill switch, shared by its handlers, bodies and the task
/// that drives it. `reset()` ends the connection with an RST, `close()` with
/// a plain FIN; either way the server drops the connection at once.
#[derive(Default)]
pub struct ConnControl {
    reset: AtomicBool,
    notify: Notify,
}

impl ConnControl {
    /// Drop the connection with `SO_LINGER` 0: the peer gets an RST.
    pub fn reset(&self) {
        self.reset.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Drop the connection with an ordinary close (FIN).
    pub fn close(&self) {
        self.notify.notify_one();
    }

    /// Resolves once `reset()` or `close()` was called.
    pub async fn killed(&self) {
        self.notify.notified().await;
    }
}

/// The accepted socket as hyper sees it: a `TcpStream` that, when dropped
/// after `ConnControl::reset`, sets `SO_LINGER` 0 first so the kernel sends
/// an RST instead of a FIN.
pub struct SimIo {
    stream: TcpStream,
    control: std::sync::Arc<ConnControl>,
}

impl SimIo {
    pub fn new(stream: TcpStream, control: std::sync::Arc<ConnControl>) -> SimIo {
        SimIo { stream, control }
    }
}

impl Drop for SimIo {
    fn drop(&mut self) {
        if self.control.reset.load(Ordering::SeqCst) {
            // Linger 0 with a non-blocking close: no wait, an RST.
            let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
        }
    }
}

impl AsyncRead for SimIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
