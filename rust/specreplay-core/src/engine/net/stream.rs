//! The stream layers of an instrumented connection.
//!
//! - [`KernelStamped`], the TCP socket: reads with `recvmsg` and notes each
//!   read's kernel receive stamp in the connection's [`ConnLog`]. Over plain
//!   TCP it is the stream hyper reads, so it also records the address range
//!   of hyper's buffer each read filled, and which read was the first after
//!   a write (the first byte of a response, over HTTP/1.1): one layer.
//! - [`Recording`], above TLS: records those ranges for the plaintext hyper
//!   reads, with the stamp of the latest socket read. That is the ciphertext
//!   read that completed the record(s) this plaintext came from: tokio-rustls
//!   only reads the socket when rustls has no plaintext left, so the
//!   plaintext a read returns was completed by the latest socket read.
//! - [`Conn`], what the pool holds: one or the other.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};
use hyper_rustls::MaybeHttpsStream;
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
    /// hyper reads this stream itself (plain TCP): record what each read
    /// filled and each write, as `Recording` does above TLS.
    read_by_hyper: bool,
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
        KernelStamped {
            tcp,
            log,
            read_by_hyper: false,
        }
    }

    pub fn log(&self) -> &Arc<ConnLog> {
        &self.log
    }

    /// Notes one read of `n` bytes at `start`: as the range hyper's buffer
    /// got when hyper reads this stream, else as the latest socket read.
    fn note_read(&self, start: usize, n: usize, stamp: Option<i64>) {
        if !self.read_by_hyper {
            self.log.set_last_rx(stamp);
        } else if n > 0 {
            self.log.record_stamped(start, n, stamp);
        }
    }

    fn wrote(&self) {
        if self.read_by_hyper {
            self.log.note_write();
        }
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
            let (start, room) = (dst.as_ptr() as usize, dst.len());
            let mut got = None;
            // A short read drained the socket: report WouldBlock to `try_io`
            // so that it clears the readiness the read started from (a newer
            // readiness event survives), as tokio's own `poll_read` does.
            // Otherwise hyper's next read would be a `recvmsg` that finds
            // nothing: one wasted syscall per chunk.
            let read = this.tcp.try_io(Interest::READABLE, || {
                let (n, stamp) = super::kernel::recv_stamped(fd, dst)?;
                got = Some((n, stamp));
                if n > 0 && n < room {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(())
                }
            });
            match (got, read) {
                (Some((n, stamp)), _) => {
                    this.note_read(start, n, stamp);
                    // SAFETY: the kernel wrote `n` bytes at the start of `dst`.
                    unsafe { buf.advance(n) };
                    return Poll::Ready(Ok(()));
                }
                (None, Err(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
                (None, Err(e)) => return Poll::Ready(Err(e)),
                (None, Ok(())) => unreachable!("a read that succeeded set `got`"),
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
        let dst = unsafe { buf.as_mut() };
        let start = dst.as_ptr() as usize;
        let n = {
            let mut tbuf = tokio::io::ReadBuf::uninit(dst);
            ready!(Pin::new(&mut this.tcp).poll_read(cx, &mut tbuf))?;
            tbuf.filled().len()
        };
        this.note_read(start, n, None);
        // SAFETY: `n` bytes were filled.
        unsafe { buf.advance(n) };
        Poll::Ready(Ok(()))
    }
}

impl Write for KernelStamped {
    forward_write!(tcp, wrote);
}

impl Drop for KernelStamped {
    fn drop(&mut self) {
        // A request hyper queued on this connection as it closed may never
        // hear of it (http::request_unless_closed).
        self.log.mark_closed();
    }
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

/// A pooled connection's stream.
pub enum Conn {
    /// Plain TCP: hyper reads the kernel-stamped socket itself.
    Plain(KernelStamped),
    /// TLS, recorded above the TLS layer. Boxed: the TLS session (about
    /// 1 KiB) would otherwise make every plain connection as large.
    Tls(Box<Recording<MaybeHttpsStream<KernelStamped>>>),
}

impl Conn {
    /// A plain TCP connection: hyper reads the socket itself.
    pub fn plain(mut tcp: KernelStamped) -> Self {
        tcp.read_by_hyper = true;
        Conn::Plain(tcp)
    }

    /// The instrumented stream for what the TLS connector opened.
    pub fn new(stream: MaybeHttpsStream<KernelStamped>) -> Self {
        match stream {
            MaybeHttpsStream::Http(tcp) => Conn::plain(tcp),
            MaybeHttpsStream::Https(tls) => {
                let log = tls.inner().get_ref().0.inner().log().clone();
                let tls = MaybeHttpsStream::Https(tls);
                Conn::Tls(Box::new(Recording::new(tls, log)))
            }
        }
    }

    pub fn log(&self) -> &Arc<ConnLog> {
        match self {
            Conn::Plain(tcp) => tcp.log(),
            Conn::Tls(tls) => tls.log(),
        }
    }
}

/// `$body` with `$s` bound to the pinned stream of either kind.
macro_rules! either {
    ($conn:expr, $s:ident => $body:expr) => {
        match $conn.get_mut() {
            Conn::Plain(tcp) => {
                let $s = Pin::new(tcp);
                $body
            }
            Conn::Tls(tls) => {
                let $s = Pin::new(&mut **tls);
                $body
            }
        }
    };
}

impl Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        either!(self, s => s.poll_read(cx, buf))
    }
}

impl Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        either!(self, s => s.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        either!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(tcp) => tcp.is_write_vectored(),
            Conn::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(self, s => s.poll_shutdown(cx))
    }
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            Conn::Plain(tcp) => tcp.connected(),
            Conn::Tls(tls) => tls.connected(),
        }
    }
}
