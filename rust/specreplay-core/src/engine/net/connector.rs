//! The connector: TCP (kernel-stamped), then for https TLS (hyper-rustls)
//! and the recording layer hyper reads from (`stream::Conn`). It also times
//! each connection's set-up and holds the connections opened before the
//! clock starts.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Uri;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use tower_service::Service;

use super::read_log::{ConnLog, H1_READS};
use super::stream::{Conn, KernelStamped};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

/// hyper-util's TCP connector, its socket wrapped in [`KernelStamped`].
#[derive(Clone)]
pub struct TcpConnector {
    http: HttpConnector,
}

impl Service<Uri> for TcpConnector {
    type Response = KernelStamped;
    type Error = BoxError;
    type Future = BoxFuture<KernelStamped>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let connecting = self.http.call(dst);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            Ok(KernelStamped::new(tcp, Arc::new(ConnLog::new(H1_READS))))
        })
    }
}

/// Connections opened before the clock, handed out before any new one.
type Stash = Arc<Mutex<Vec<(String, Conn)>>>;

/// What `preconnect` opened.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Preconnected {
    pub opened: usize,
    pub failed: usize,
    /// The server chose HTTP/2 (then one connection carries every stream).
    pub h2: bool,
}

/// The engine's connector (see the module doc).
#[derive(Clone)]
pub struct StampingConnector {
    tcp: TcpConnector,
    /// Made at the point's first https connection: loading the CA store
    /// costs about 5 ms of CPU, which a plain-HTTP point never needs.
    https: Arc<OnceLock<HttpsConnector<TcpConnector>>>,
    stash: Stash,
}

/// How many connections `preconnect` opens at once: all at once would
/// overflow a server's listen backlog (then a SYN waits a second to retry).
const PRECONNECT_WAVE: usize = 64;

fn origin(uri: &Uri) -> String {
    format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map(|a| a.as_str()).unwrap_or("")
    )
}

impl StampingConnector {
    pub fn new() -> Self {
        super::kernel::keep_enabled();
        let mut http = HttpConnector::new();
        // Small SSE requests must not wait for Nagle.
        http.set_nodelay(true);
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        StampingConnector {
            tcp: TcpConnector { http },
            https: Arc::default(),
            stash: Arc::default(),
        }
    }

    fn https(&self) -> HttpsConnector<TcpConnector> {
        let https = self.https.get_or_init(|| {
            // The system's roots when there are any, so internal CAs work;
            // the bundled Mozilla roots otherwise, so a bare container still
            // works. Read when the point opens its first https connection.
            let roots = HttpsConnectorBuilder::new()
                .with_native_roots()
                .unwrap_or_else(|_| HttpsConnectorBuilder::new().with_webpki_roots());
            roots
                .https_or_http()
                .enable_http1()
                .enable_http2()
                .wrap_connector(self.tcp.clone())
        });
        https.clone()
    }

    /// Opens a connection (TCP, then TLS for https) and times it.
    fn open(&self, dst: Uri) -> BoxFuture<Conn> {
        let started = Instant::now();
        let connecting = if dst.scheme() == Some(&http::uri::Scheme::HTTPS) {
            let mut https = self.https();
            Box::pin(async move { Ok(Conn::new(https.call(dst).await?)) }) as BoxFuture<Conn>
        } else {
            let mut tcp = self.tcp.clone();
            Box::pin(async move { Ok(Conn::plain(tcp.call(dst).await?)) })
        };
        Box::pin(async move {
            let conn = connecting.await?;
            conn.log()
                .set_connect_us(started.elapsed().as_micros() as i64);
            if matches!(conn, Conn::Tls(_)) && conn.connected().is_negotiated_h2() {
                conn.log().set_h2();
            }
            Ok(conn)
        })
    }

    /// Opens up to `n` connections to `uri`'s origin before the clock starts,
    /// kept for the first requests (their rows then have no connect time). Over
    /// HTTP/2 one connection carries every stream, so one is opened.
    pub async fn preconnect(&self, uri: &Uri, n: usize) -> Preconnected {
        let mut done = Preconnected::default();
        let key = origin(uri);
        let dst: Uri = match key.parse() {
            Ok(dst) => dst,
            Err(_) => return done,
        };
        let mut remaining = n;
        while remaining > 0 {
            let wave = if done.opened + done.failed == 0 {
                1 // the first tells whether the server speaks HTTP/2
            } else {
                remaining.min(PRECONNECT_WAVE)
            };
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..wave {
                tasks.spawn(self.open(dst.clone()));
            }
            remaining -= wave;
            while let Some(joined) = tasks.join_next().await {
                match joined {
                    Ok(Ok(conn)) => {
                        done.h2 |= conn.connected().is_negotiated_h2();
                        conn.log().mark_preconnected();
                        done.opened += 1;
                        self.stash
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((key.clone(), conn));
                    }
                    _ => done.failed += 1,
                }
            }
            if done.h2 || (done.opened == 0 && done.failed > 0) {
                // One HTTP/2 connection is all the pool uses; a server that
                // refused the first will refuse the rest (the requests then
                // report the connect error themselves).
                break;
            }
        }
        done
    }

    fn take_stashed(&self, key: &str) -> Option<Conn> {
        let mut stash = self.stash.lock().unwrap_or_else(|e| e.into_inner());
        let at = stash.iter().position(|(k, _)| k == key)?;
        Some(stash.swap_remove(at).1)
    }
}

impl Service<Uri> for StampingConnector {
    type Response = Conn;
    type Error = BoxError;
    type Future = BoxFuture<Conn>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Both connectors are always ready (hyper-util's HttpConnector is).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        if let Some(conn) = self.take_stashed(&origin(&dst)) {
            return Box::pin(async move { Ok(conn) });
        }
        self.open(dst)
    }
}
