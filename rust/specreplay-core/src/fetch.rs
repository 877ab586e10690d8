//! One whole HTTP exchange for the requests around a run: the target's
//! `/models` preflight, the usage probe, llama.cpp's `/tokenize`, and the
//! `/metrics` scrapes. Python used `urllib` for them, whose import (with
//! `http.client`, `email`, `ssl` and `hashlib`) cost about 20 ms of a
//! replay's CPU before its first send (bench/startup.py); the engine's own
//! client (hyper, rustls, the system's roots) already does all of it.
//!
//! Each call runs on the calling thread, on a runtime of its own that lives
//! for the call: the scraper's thread keeps the low priority it chose
//! (`servermetrics/scrape.py`), and no call shares a thread with the
//! engine's workers. No connection is kept between calls, as with `urllib`.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Uri};
use http_body_util::{BodyExt, Full};

use crate::clock::now_us;
use crate::engine::http::{client_over, HttpClient};
use crate::engine::net::StampingConnector;
use crate::error::error_chain;

/// What came back.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub status: u16,
    /// The status's canonical reason ("Not Found"), empty for an unknown code.
    pub reason: String,
    /// The `Content-Type` header, empty when there is none.
    pub content_type: String,
    pub body: Vec<u8>,
    /// `clock::now_us` just before the request went out, and when the
    /// response's head had come: the server answered in between.
    pub sent_us: i64,
    pub headers_us: i64,
}

/// Why nothing (whole) came back.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL, method or a header is not one a request can carry.
    #[error("{0}")]
    Invalid(String),
    #[error("no complete answer within {0:?}")]
    Timeout(Duration),
    /// The connection failed (refused, reset, TLS, …), with the causes.
    #[error("{0}")]
    Failed(String),
}

/// How many redirects a GET follows (`urllib` followed up to 10).
const MAX_REDIRECTS: usize = 5;

/// Sends `method url` with `headers` and `body`, and reads the whole
/// response within `timeout`. Blocks the calling thread.
///
/// A GET follows a redirect to the same origin (a server that mounts its
/// metrics at `/metrics/` answers `/metrics` with a 307), at most
/// [`MAX_REDIRECTS`] times. A redirect elsewhere is returned as the answer:
/// the headers may carry the target's credentials.
pub fn fetch(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Fetched, FetchError> {
    let mut request = build(method, url, headers, body)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| FetchError::Failed(format!("could not start a runtime: {e}")))?;
    runtime.block_on(async {
        tokio::time::timeout(timeout, async {
            // A connector per call, as the engine has one per run: an https
            // call reads the CA store (`SSL_CERT_FILE` included) as it is
            // now, as `urllib` did (about 5 ms of CPU:
            // engine/net/connector.rs). Its redirects reuse it.
            let client = client_over(StampingConnector::new(), 0, false);
            let mut redirects = 0;
            loop {
                let next = request.clone();
                let (got, location) = exchange(&client, request).await?;
                match location {
                    Some(uri) if redirects < MAX_REDIRECTS && next.method() == Method::GET => {
                        redirects += 1;
                        request = next;
                        *request.uri_mut() = uri;
                    }
                    _ => return Ok(got),
                }
            }
        })
        .await
        .map_err(|_| FetchError::Timeout(timeout))?
    })
}

/// Where a redirect from `from` to `location` leads, if it stays on
/// `from`'s origin: an absolute path, or an absolute URL of that origin.
fn same_origin_target(from: &Uri, location: &str) -> Option<Uri> {
    if location.starts_with('/') && !location.starts_with("//") {
        let mut parts = from.clone().into_parts();
        parts.path_and_query = Some(location.parse().ok()?);
        return Uri::from_parts(parts).ok();
    }
    let to: Uri = location.parse().ok()?;
    let same = to.scheme() == from.scheme()
        && to.host() == from.host()
        && to.port_u16() == from.port_u16();
    same.then_some(to)
}

fn build(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Option<Vec<u8>>,
) -> Result<http::Request<Full<Bytes>>, FetchError> {
    let invalid = |what: String| FetchError::Invalid(what);
    let uri: Uri = url
        .parse()
        .map_err(|e| invalid(format!("not a URL: {url:?} ({e})")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(invalid(format!("not an http(s) URL: {url:?}")));
    }
    let method = Method::from_bytes(method.as_bytes())
        .map_err(|_| invalid(format!("not an HTTP method: {method:?}")))?;
    let mut request = http::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid(format!("not a header name: {name:?}")))?;
        // The value is not quoted back: it may be a credential.
        let value = HeaderValue::from_str(value)
            .map_err(|_| invalid(format!("header {name}: not a header value")))?;
        request = request.header(header, value);
    }
    request
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| invalid(e.to_string()))
}

/// One request and its whole answer, and where it redirects to on the same
/// origin (when it does).
async fn exchange(
    client: &HttpClient,
    request: http::Request<Full<Bytes>>,
) -> Result<(Fetched, Option<Uri>), FetchError> {
    let from = request.uri().clone();
    let sent_us = now_us();
    let response = client
        .request(request)
        .await
        .map_err(|e| FetchError::Failed(error_chain(&e)))?;
    let headers_us = now_us();
    let status = response.status();
    let location = status
        .is_redirection()
        .then(|| response.headers().get(http::header::LOCATION))
        .flatten()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| same_origin_target(&from, v));
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| FetchError::Failed(format!("the answer broke off: {}", error_chain(&e))))?
        .to_bytes()
        .to_vec();
    let fetched = Fetched {
        status: status.as_u16(),
        reason: status.canonical_reason().unwrap_or("").to_string(),
        content_type,
        body,
        sent_us,
        headers_us,
    };
    Ok((fetched, location))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on 127.0.0.1 that answers one connection with `answer`
    /// after reading the request's head; returns its URL.
    fn one_answer(answer: &'static [u8]) -> String {
        answers(vec![answer])
    }

    /// The same for a connection per answer, in turn.
    fn answers(answers: Vec<&'static [u8]>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                listener.set_nonblocking(true).unwrap();
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                for answer in answers {
                    let (mut socket, _) = listener.accept().await.unwrap();
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = socket.read(&mut buf).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        head.extend_from_slice(&buf[..n]);
                    }
                    socket.write_all(answer).await.unwrap();
                    socket.shutdown().await.unwrap();
                }
            });
        });
        url
    }

    #[test]
    fn a_whole_answer_with_its_status_type_and_stamps() {
        let url = one_answer(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nx 1\n\r\n0\r\n\r\n",
        );
        let headers = [("Accept".to_string(), "text/plain".to_string())];
        let got = fetch("GET", &url, &headers, None, Duration::from_secs(5)).unwrap();
        assert_eq!((got.status, got.reason.as_str()), (200, "OK"));
        assert_eq!(got.content_type, "text/plain");
        assert_eq!(got.body, b"x 1\n");
        assert!(got.sent_us > 0 && got.headers_us >= got.sent_us);
    }

    #[test]
    fn an_error_status_is_an_answer_not_an_error() {
        let url = one_answer(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        let got = fetch("GET", &url, &[], None, Duration::from_secs(5)).unwrap();
        assert_eq!(
            (got.status, got.reason.as_str(), got.body.len()),
            (404, "Not Found", 0)
        );
    }

    #[test]
    fn redirects_are_followed_on_the_same_origin_only() {
        let from: Uri = "http://h:8000/metrics".parse().unwrap();
        let to = |l: &str| same_origin_target(&from, l).map(|u| u.to_string());
        assert_eq!(to("/metrics/").as_deref(), Some("http://h:8000/metrics/"));
        assert_eq!(
            to("http://h:8000/m?x=1").as_deref(),
            Some("http://h:8000/m?x=1")
        );
        assert_eq!(to("http://other:8000/metrics"), None);
        assert_eq!(to("https://h:8000/metrics"), None);
        assert_eq!(to("http://h:9000/metrics"), None);
        assert_eq!(to("//other/metrics"), None);
    }

    #[test]
    fn a_redirect_on_the_same_origin_is_followed() {
        let url = answers(vec![
            b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /metrics/\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nx 1\n",
        ]);
        let got = fetch("GET", &url, &[], None, Duration::from_secs(5)).unwrap();
        assert_eq!(
            (got.status, got.body.as_slice()),
            (200, b"x 1\n".as_slice())
        );
    }

    #[test]
    fn a_redirect_elsewhere_is_the_answer() {
        let url = one_answer(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere.invalid/metrics\r\nContent-Length: 0\r\n\r\n");
        let got = fetch("GET", &url, &[], None, Duration::from_secs(5)).unwrap();
        assert_eq!(got.status, 307);
    }

    #[test]
    fn a_refused_connection_says_so() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port(); // bound, then closed: nothing listens there now
        let url = format!("http://127.0.0.1:{port}/metrics");
        match fetch("GET", &url, &[], None, Duration::from_secs(5)) {
            Err(FetchError::Failed(why)) => assert!(why.contains("refused"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_silent_server_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        // Accepted by the kernel's backlog, never answered.
        let got = fetch("GET", &url, &[], None, Duration::from_millis(200));
        assert!(matches!(got, Err(FetchError::Timeout(_))), "{got:?}");
        drop(listener);
    }

    #[test]
    fn what_no_request_can_carry_is_invalid() {
        for (method, url, header) in [
            ("GET", "not a url", "a"),
            ("GET", "ftp://h/x", "a"),
            ("G ET", "http://h/x", "a"),
            ("GET", "http://h/x", "bad\nvalue"),
        ] {
            let headers = [("X-A".to_string(), header.to_string())];
            let got = fetch(method, url, &headers, None, Duration::from_secs(1));
            assert!(
                matches!(got, Err(FetchError::Invalid(_))),
                "{method} {url}: {got:?}"
            );
        }
    }
}
