//! The forwarding half of `specreplay capture`: a reverse proxy that passes
//! every request to the upstream and streams every response back frame by
//! frame as it arrives, while it reports what went through on a channel that
//! the recorder (Python) reads at its own pace. Forwarding never waits for
//! the recorder: the channel is unbounded and sends never block.
//!
//! Two reports per request, in this order: [`RequestEvent`] once the request
//! body has been read (before it is forwarded), and a [`CapturedResponse`]
//! once the response has ended, broken, or been abandoned by the client.
//! The response is decoded (inflated, parsed as SSE or JSON, its usage and
//! finish reason taken) by the reader, [`Captures::next`], on the recorder's
//! thread: never on the proxy's threads, so decoding delays no forwarding.
//! Request headers are never reported (they carry the secrets), but for the
//! configured session header; nor is the query string.
//!
//! `forward` holds the per-request path, `record` the decoding; this module
//! the server's life (bind, accept, graceful stop with a drain limit).

mod forward;
mod record;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use bytes::Bytes;
use hyper::header::HeaderName;
use hyper::service::service_fn;
use hyper::{Method, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::decode::Dialect;
use crate::engine::http::{build_client, HttpClient};
use crate::engine::is_secret_header_name;
use crate::error::CoreError;
use crate::serve::{accept_until, bind, until_stopped, Background};

pub use record::{Captured, CapturedResponse, Captures};

/// Largest request body accepted (requests with images or long contexts are big).
pub const MAX_REQUEST_BYTES: usize = 256 << 20;
/// Response bytes kept per request for decoding; beyond this the response is
/// still forwarded in full but recorded without usage (status and times only).
pub const MAX_KEPT_RESPONSE_BYTES: usize = 64 << 20;

/// A request has arrived and its body has been read.
#[derive(Debug, Clone)]
pub struct RequestEvent {
    /// Identifies the request's [`CapturedResponse`]; unique per proxy.
    pub seq: u64,
    /// When the request head was read, `clock::now_us()`.
    pub arrival_us: i64,
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// The API the request is, by its method and path (`ProxyConfig::apis`);
    /// None for anything else (its response is not decoded).
    pub api: Option<Dialect>,
    /// The body as received (empty when it could not be read: see `error`).
    pub body: Bytes,
    /// Why the body could not be read (the request was answered by the proxy).
    pub error: Option<String>,
    /// The value of the [`ProxyConfig::session_header`], when the request has it.
    pub session: Option<String>,
}

/// A request's response has ended (or broken, or the client left), as the
/// proxy saw it; [`Captures::next`] decodes it into a [`CapturedResponse`].
#[derive(Debug, Clone)]
pub(crate) struct ResponseEvent {
    pub seq: u64,
    /// The request's API: how to decode the body.
    pub api: Option<Dialect>,
    /// The upstream's status, or the proxy's own (502, 400, 413).
    pub status: u16,
    /// Response head, µs after `arrival_us` (None: no head was sent).
    pub ttfb_us: Option<i64>,
    /// Last byte, break or abandonment, µs after `arrival_us`.
    pub end_us: i64,
    pub content_type: String,
    pub content_encoding: String,
    /// The response body as forwarded, in the frames it came in (kept for
    /// requests of a known API only, and only up to [`MAX_KEPT_RESPONSE_BYTES`]).
    pub body: Vec<Bytes>,
    /// The body was longer than [`MAX_KEPT_RESPONSE_BYTES`]: `body` is empty.
    pub truncated: bool,
    pub error: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum ProxyEvent {
    Request(RequestEvent),
    Response(ResponseEvent),
}

/// What the proxy needs to know. Crosses from Python as the mapping typed
/// `ProxyConfig` in `_core.pyi`, read by serde like every configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Base URL every request path (with its query) is appended to verbatim,
    /// e.g. `http://127.0.0.1:8000` or `https://h/prefix`.
    pub upstream: String,
    /// How long `shutdown` lets requests in flight finish, seconds.
    #[serde(default = "default_drain_s")]
    pub drain_s: f64,
    /// The path (its end) of each API the recorder records, e.g. `chat` →
    /// `/chat/completions`. A POST whose path ends with one is that API
    /// (the longest match wins: `/chat/completions` also ends with
    /// `/completions`); its response is kept and decoded.
    #[serde(default)]
    pub apis: BTreeMap<Dialect, String>,
    /// The request header whose value names the conversation a request
    /// belongs to (e.g. `x-session-id`): the one request header reported to
    /// the recorder. Must not be a header that carries a secret.
    #[serde(default)]
    pub session_header: Option<String>,
}

fn default_drain_s() -> f64 {
    10.0
}

impl ProxyConfig {
    /// Checks the values; errors name the field.
    pub fn validate(&self) -> Result<(), CoreError> {
        check_upstream(&self.upstream)?;
        if !(self.drain_s.is_finite() && self.drain_s >= 0.0) {
            return Err(CoreError::config(
                "drain_s",
                format!("must be a non-negative number, got {}", self.drain_s),
            ));
        }
        if let Some(name) = &self.session_header {
            let valid = HeaderName::from_bytes(name.trim().as_bytes()).is_ok();
            if !valid || is_secret_header_name(name) {
                let why = if valid {
                    "carries a secret, which is never recorded"
                } else {
                    "is not a header name"
                };
                return Err(CoreError::config(
                    "session_header",
                    format!("{name:?} {why}"),
                ));
            }
        }
        for (api, path) in &self.apis {
            if !path.starts_with('/') || path.len() < 2 {
                return Err(CoreError::config(
                    format!("apis.{api}"),
                    format!("expected a path such as \"/chat/completions\", got {path:?}"),
                ));
            }
        }
        Ok(())
    }

    /// `apis` as the matcher reads them: longest path first.
    fn routes(&self) -> Vec<(String, Dialect)> {
        let mut routes: Vec<_> = self
            .apis
            .iter()
            .map(|(api, path)| (path.trim_end_matches('/').to_string(), *api))
            .collect();
        routes.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
        routes
    }
}

/// What every connection shares.
pub(crate) struct Shared {
    pub base: String,
    /// `ProxyConfig::session_header`, parsed.
    pub session_header: Option<HeaderName>,
    /// `ProxyConfig::apis`, longest path first.
    pub routes: Vec<(String, Dialect)>,
    pub client: HttpClient,
    pub events: mpsc::Sender<ProxyEvent>,
    pub next_seq: AtomicU64,
    /// Set once shutdown starts: a response cut after it is "cut short", not
    /// "client disconnected".
    pub stopping: AtomicBool,
}

impl Shared {
    /// The API a request is: a POST whose path (a trailing `/` aside) ends
    /// with one of `routes`.
    pub fn api_of(&self, method: &Method, path: &str) -> Option<Dialect> {
        if method != Method::POST {
            return None;
        }
        let path = path.trim_end_matches('/');
        self.routes
            .iter()
            .find(|(end, _)| path.ends_with(end.as_str()))
            .map(|(_, api)| *api)
    }
}

/// A running proxy. Dropping it stops it without draining.
pub struct ProxyServer(Background);

/// Checks the upstream base URL: http or https, with a host.
fn check_upstream(upstream: &str) -> Result<String, CoreError> {
    let base = upstream.trim_end_matches('/');
    let uri: Uri = base
        .parse()
        .map_err(|e| CoreError::config("upstream", format!("{upstream:?}: {e}")))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) if uri.query().is_none() => Ok(base.to_string()),
        _ => Err(CoreError::config(
            "upstream",
            format!("expected an http:// or https:// URL without a query, got {upstream:?}"),
        )),
    }
}

impl ProxyServer {
    /// Binds `addr` (port 0 picks a free port) and serves on the current
    /// tokio runtime. Returns the proxy and the reader of what went through,
    /// which ends once the proxy has stopped and every request in it has
    /// reported its end.
    pub async fn start(
        config: ProxyConfig,
        addr: SocketAddr,
    ) -> Result<(ProxyServer, Captures), CoreError> {
        config.validate()?;
        let base = check_upstream(&config.upstream)?;
        let (listener, addr) = bind(addr).await?;
        let (events, rx) = mpsc::channel();
        let session_header = config
            .session_header
            .as_deref()
            .map(|name| HeaderName::from_bytes(name.trim().as_bytes()))
            .transpose()
            .map_err(|e| CoreError::config("session_header", e.to_string()))?;
        let shared = Arc::new(Shared {
            base,
            session_header,
            routes: config.routes(),
            // Every stream keeps its own upstream connection; idle ones are reused.
            client: build_client(usize::MAX),
            events,
            next_seq: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
        });
        let drain = Duration::from_secs_f64(config.drain_s);
        let server = Background::spawn(addr, |stop| serve(listener, shared, stop, drain));
        Ok((ProxyServer(server), Captures::new(rx)))
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.0.local_addr()
    }

    /// Stops accepting, closes idle connections, lets requests in flight
    /// finish for up to the drain time, then cuts the rest; returns once all
    /// connections are closed.
    pub async fn shutdown(self) {
        self.0.shutdown().await;
    }
}

impl From<ProxyServer> for Background {
    fn from(server: ProxyServer) -> Background {
        server.0
    }
}

async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    drain: Duration,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().keep_alive(true);
    let mut connections = accept_until(listener, stop.clone(), |stream| {
        let handler = shared.clone();
        let service = service_fn(move |req| forward::handle(handler.clone(), req));
        let conn = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        until_stopped(conn, stop.clone())
    })
    .await;
    shared.stopping.store(true, Ordering::SeqCst);
    let drained = tokio::time::timeout(drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        // Dropping the rest cuts their responses: each reports "cut short".
        connections.shutdown().await;
    }
}

#[cfg(test)]
mod tests;
