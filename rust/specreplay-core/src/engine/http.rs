//! The HTTP client: hyper's pooled client over the engine's instrumented
//! connector (`net`), rustls for https targets. HTTP/1.1 keep-alive by
//! default; HTTP/2 when a TLS server offers it by ALPN.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{capture_connection, CaptureConnection, Connected};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::net::{ConnLog, StampingConnector};
use crate::error::error_chain;

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
const STALE_RETRIES: usize = 2;

/// Sends the request (`head` and `body`), again on a fresh connection when
/// the pooled one it went out on turned out to be closed before any byte of
/// a response (`closed_before_response`, `request_unless_closed`), at most
/// [`STALE_RETRIES`] times. The engine and the capture proxy send this way.
/// Err: why no response came, as a message.
pub(crate) async fn send_resending_stale(
    client: &HttpClient,
    head: &http::request::Parts,
    body: &Bytes,
) -> Result<http::Response<Incoming>, String> {
    let mut resent = 0;
    loop {
        let request = http::Request::from_parts(head.clone(), Full::new(body.clone()));
        let stale = match request_unless_closed(client, request).await {
            Some(Ok(response)) => return Ok(response),
            Some(Err(e)) if closed_before_response(&e) => error_chain(&e),
            Some(Err(e)) => return Err(error_chain(&e)),
            None => "the connection closed before the response's head came".to_string(),
        };
        if resent == STALE_RETRIES {
            return Err(stale);
        }
        resent += 1;
    }
}

/// Whether the connection closed before any byte of a response: the race of
/// reusing a keep-alive connection the server is closing. llama.cpp's server
/// closes the connection after every streamed response while announcing
/// `Keep-Alive: timeout=5, max=100`, so the next request on it fails this way
/// unless the close was seen first. No response came, so the request is sent
/// again on a fresh connection (`sent_us` stays the first attempt's: the
/// few microseconds lost count against the server).
fn closed_before_response(e: &hyper_util::client::legacy::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return h.is_incomplete_message();
        }
        source = s.source();
    }
    false
}

/// `client.request(request)`, or None when the connection the pool gave it
/// closed before the response head came: send it again then, as for
/// [`closed_before_response`].
///
/// hyper usually says so itself, but not always. A request handed to a
/// pooled connection whose task is ending at that instant can be queued
/// after the task's last look at its queue (most likely: tokio's mpsc keeps
/// a message sent while its receiver is being dropped until every sender is
/// gone, and the waiting request holds one), so it waits for its timeout.
/// Against llama.cpp, which closes every connection after a streamed
/// response, one request in about 7,600 did when the engine's workers ran
/// real-time (docs/real-servers.md).
async fn request_unless_closed(
    client: &HttpClient,
    mut request: http::Request<Full<Bytes>>,
) -> Option<Result<http::Response<Incoming>, hyper_util::client::legacy::Error>> {
    let mut connection = capture_connection(&mut request);
    unless_closed(client.request(request), connection_closed(&mut connection)).await
}

/// `response`'s output, or None if `closed` resolves first.
async fn unless_closed<T>(
    response: impl Future<Output = T>,
    closed: impl Future<Output = ()>,
) -> Option<T> {
    tokio::select! {
        biased;
        done = response => Some(done),
        () = closed => None,
    }
}

/// Resolves when the connection the request is on closes. hyper-util may
/// move a request to another connection (one it found closed before
/// sending): only the latest one counts.
async fn connection_closed(connection: &mut CaptureConnection) {
    loop {
        let Some(log) = conn_log(connection.wait_for_connection_metadata().await.as_ref()) else {
            return std::future::pending().await;
        };
        log.closed().await;
        let now = conn_log(connection.connection_metadata().as_ref());
        if now.is_none_or(|now| Arc::ptr_eq(&now, &log)) {
            return;
        }
    }
}

/// The connection's log, which the connector put in its `Connected` extras.
fn conn_log(connected: Option<&Connected>) -> Option<Arc<ConnLog>> {
    let mut extensions = http::Extensions::new();
    connected?.get_extras(&mut extensions);
    extensions.get::<Arc<ConnLog>>().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_whose_connection_closed_gives_way() {
        let log = Arc::new(ConnLog::new(1));
        let stuck = std::future::pending::<()>();
        let closing = {
            let log = log.clone();
            async move {
                tokio::task::yield_now().await;
                log.mark_closed();
            }
        };
        let (got, ()) = tokio::join!(unless_closed(stuck, log.closed()), closing);
        assert_eq!(got, None);
        // A response that is ready wins over a connection that is closed.
        assert_eq!(unless_closed(async { 7 }, log.closed()).await, Some(7));
        // Open connection: the response.
        let open = Arc::new(ConnLog::new(1));
        assert_eq!(unless_closed(async { 8 }, open.closed()).await, Some(8));
    }
}
