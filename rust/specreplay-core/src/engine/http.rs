//! The HTTP client: hyper's pooled client with rustls for https targets.
//! HTTP/1.1 keep-alive by default; HTTP/2 when a TLS server offers it by ALPN.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

pub fn build_client(max_idle_per_host: usize) -> HttpClient {
    let mut http = HttpConnector::new();
    // Small SSE requests must not wait for Nagle.
    http.set_nodelay(true);
    http.enforce_http(false);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    // The system's roots when there are any, so internal CAs work; the
    // bundled Mozilla roots otherwise, so a bare container still works.
    let roots = HttpsConnectorBuilder::new()
        .with_native_roots()
        .unwrap_or_else(|_| HttpsConnectorBuilder::new().with_webpki_roots());
    let https = roots
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle_per_host)
        .pool_idle_timeout(Duration::from_secs(90))
        .build(https)
}
