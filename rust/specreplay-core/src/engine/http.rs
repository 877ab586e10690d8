//! The HTTP client: hyper's pooled client over the engine's instrumented
//! connector (`net`), rustls for https targets. HTTP/1.1 keep-alive by
//! default; HTTP/2 when a TLS server offers it by ALPN.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::net::StampingConnector;

pub type HttpClient = Client<StampingConnector, Full<Bytes>>;

/// A client over a new connector, nothing opened in advance (the capture
/// proxy's).
pub fn build_client(max_idle_per_host: usize) -> HttpClient {
    client_over(StampingConnector::new(), max_idle_per_host, false)
}

/// `h2_only`: the target is known (from a preconnected connection's ALPN) to
/// speak HTTP/2. hyper-util's pool then lets one request connect while the
/// others wait for that connection, instead of every first request opening
/// its own TLS connection only to drop it for the shared one.
pub fn client_over(
    connector: StampingConnector,
    max_idle_per_host: usize,
    h2_only: bool,
) -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle_per_host)
        .pool_idle_timeout(Duration::from_secs(90))
        .http2_only(h2_only)
        .build(connector)
}

/// How many times a request is sent again after its pooled connection turned
/// out to be closed.
pub(crate) const STALE_RETRIES: usize = 2;

/// Whether the connection closed before any byte of a response: the race of
/// reusing a keep-alive connection the server is closing. llama.cpp's server
/// closes the connection after every streamed response while announcing
/// `Keep-Alive: timeout=5, max=100`, so the next request on it fails this way
/// unless the close was seen first. No response came, so the request is sent
/// again on a fresh connection (`sent_us` stays the first attempt's: the
/// few microseconds lost count against the server).
pub(crate) fn closed_before_response(e: &hyper_util::client::legacy::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return h.is_incomplete_message();
        }
        source = s.source();
    }
    false
}
