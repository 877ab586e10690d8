//! The two stream layers of an instrumented connection.
//!
//! - [`KernelStamped`], the TCP socket: reads with `recvmsg` and notes each
//!   read's kernel receive stamp in the connection's [`ConnLog`].
//! - [`Recording`], what hyper reads from (above TLS, when there is TLS):
//!   records the address range of hyper's buffer each read filled, with the
//!   stamp of the latest socket read, and which read was the first after a
//!   write (the first byte of a response, over HTTP/1.1). Under TLS that is the ciphertext read
//!   that completed the record(s) this plaintext came from: tokio-rustls only
//!   reads the socket when rustls has no plaintext left, so the plaintext a
//!   read returns was completed by the latest socket read.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

use super::read_log::ConnLog;

/// hyper's `Write` by way of a field's writes (tokio's `AsyncWrite` or
/// hyper's `Write`: the methods have the same names), calling `$wrote` on
/// `self` after each write that took bytes.
macro_rules! forward_write {
    ($field:ident $(, $wrote:ident)?) => {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            let written = Pin::new(&mut this.$field).poll_write(cx, buf);
            $(if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
                this.$wrote();
            })?
            written
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            let written = Pin::new(&mut this.$field).poll_write_vectored(cx, bufs);
            $(if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
                this.$wrote();
            })?
            written
        }

        fn is_write_vectored(&self) -> bool {
            self.$field.is_write_vectored()
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().$field).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().$field).poll_shutdown(cx)
        }
    };
}

/// A TCP stream whose reads carry the kernel's receive stamp (Linux).
pub struct KernelStamped {
    tcp: TcpStream,
    log: Arc<ConnLog>,
}

impl KernelStamped {
    /// Wraps `tcp`, asking the kernel for receive stamps (reads then fall
    /// back to no stamp, recorded per chunk, if it refuses).
    pub fn new(tcp: TcpStream, log: Arc<ConnLog>) -> Self {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            super::kernel::enable_rx_stamps(tcp.as_raw_fd());
        }
        KernelStamped { tcp, log }
    }

    pub fn log(&self) -> &Arc<ConnLog> {
        &self.log
    }
}

impl Read for KernelStamped {
    #[cfg(target_os = "linux")]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        use std::os::fd::AsRawFd;
        use tokio::io::Interest;

        let this = self.get_mut();
        let fd = this.tcp.as_raw_fd();
        loop {
            ready!(this.tcp.poll_read_ready(cx))?;
            // SAFETY: recvmsg only writes initialized bytes, and only `n` of them
            // are declared filled below.
            let dst = unsafe { buf.as_mut() };
            match this
                .tcp
                .try_io(Interest::READABLE, || super::kernel::recv_stamped(fd, dst))
            {
                Ok((n, stamp)) => {
                    this.log.set_last_rx(stamp);
                    // SAFETY: the kernel wrote `n` bytes at the start of `dst`.
                    unsafe { buf.advance(n) };
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        use tokio::io::AsyncRead;
        let this = self.get_mut();
        // SAFETY: tokio's ReadBuf only writes initialized bytes.
        let n = {
            let mut tbuf = tokio::io::ReadBuf::uninit(unsafe { buf.as_mut() });
            ready!(Pin::new(&mut this.tcp).poll_read(cx, &mut tbuf))?;
            tbuf.filled().len()
        };
        this.log.set_last_rx(None);
        // SAFETY: `n` bytes were filled.
        unsafe { buf.advance(n) };
        Poll::Ready(Ok(()))
    }
}

impl Write for KernelStamped {
    forward_write!(tcp);
}

impl Connection for KernelStamped {
    fn connected(&self) -> Connected {
        // The log rides along to every response on this connection
        // (hyper-util copies a connection's extras into the response's).
        self.tcp.connected().extra(self.log.clone())
    }
}

/// The stream hyper reads: records which part of hyper's buffer each read filled.
pub struct Recording<S> {
    inner: S,
    log: Arc<ConnLog>,
}

impl<S> Recording<S> {
    pub fn new(inner: S, log: Arc<ConnLog>) -> Self {
        Recording { inner, log }
    }

    pub fn log(&self) -> &Arc<ConnLog> {
        &self.log
    }

    fn wrote(&self) {
        self.log.note_write();
    }
}

impl<S: Read + Unpin> Read for Recording<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // SAFETY: the inner stream only writes initialized bytes into the
        // ReadBuf laid over this memory; `n` of them are declared filled.
        let dst = unsafe { buf.as_mut() };
        let start = dst.as_ptr() as usize;
        let mut inner_buf = ReadBuf::uninit(dst);
        ready!(Pin::new(&mut this.inner).poll_read(cx, inner_buf.unfilled()))?;
        let n = inner_buf.filled().len();
        if n > 0 {
            this.log.record(start, n);
        }
        // SAFETY: `n` bytes at the start of the cursor were filled.
        unsafe { buf.advance(n) };
        Poll::Ready(Ok(()))
    }
}

impl<S: Write + Unpin> Write for Recording<S> {
    forward_write!(inner, wrote);
}

impl<S: Connection> Connection for Recording<S> {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}
