//! One request through the proxy: read the body, report it, forward it with
//! the headers (hop-by-hop ones dropped), and stream the response back: each
//! frame from the upstream is handed to the client connection the moment it
//! is read ([`Tee`]), never buffered, decompressed or re-encoded. A copy of
//! each frame (a reference-counted `Bytes`, not a byte copy) is kept for the
//! recorder, which gets it when the response ends.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderMap, HeaderValue, CONNECTION, CONTENT_ENCODING, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode, Uri};

use super::{
    ProxyEvent, RequestEvent, ResponseEvent, Shared, MAX_KEPT_RESPONSE_BYTES, MAX_REQUEST_BYTES,
};
use crate::clock::now_us;
use crate::decode::Dialect;
use crate::engine::http::send_resending_stale;
use crate::error::error_chain;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1),
/// plus the ones the proxy must recompute.
const HOP_BY_HOP: [&str; 12] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// Copies `src` into `dst` except hop-by-hop headers and those named in
/// `Connection`. `keep_length`: keep `Content-Length` (responses: the body
/// is forwarded unchanged, so its length is the upstream's).
pub(crate) fn forward_headers(src: &HeaderMap, dst: &mut HeaderMap, keep_length: bool) {
    let named: Vec<String> = src
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    for (name, value) in src {
        let n = name.as_str(); // lower case already
        let hop = HOP_BY_HOP.contains(&n) && !(keep_length && n == "content-length");
        if hop || named.iter().any(|t| t == n) {
            continue;
        }
        dst.append(name.clone(), value.clone());
    }
}

/// What the recorder will be told about one request's response. Reports
/// exactly once: at the end of the body, at a break, or when dropped (the
/// client left, or the proxy stopped).
struct Recording {
    shared: Arc<Shared>,
    seq: u64,
    api: Option<Dialect>,
    arrival_us: i64,
    status: u16,
    ttfb_us: Option<i64>,
    content_type: String,
    content_encoding: String,
    chunks: Vec<Bytes>,
    kept: usize,
    truncated: bool,
    done: bool,
}

impl Recording {
    fn keep(&mut self, data: &Bytes) {
        // Only a known API's response is decoded: keep nothing else.
        if self.api.is_none() || self.truncated {
            return;
        }
        self.kept += data.len();
        if self.kept >= MAX_KEPT_RESPONSE_BYTES {
            self.truncated = true;
            self.chunks = Vec::new();
        } else {
            self.chunks.push(data.clone());
        }
    }

    fn finish(&mut self, error: Option<String>) {
        if self.done {
            return;
        }
        self.done = true;
        let end_us = now_us() - self.arrival_us;
        let _ = self.shared.events.send(ProxyEvent::Response(ResponseEvent {
            seq: self.seq,
            api: self.api,
            status: self.status,
            ttfb_us: self.ttfb_us,
            end_us,
            content_type: std::mem::take(&mut self.content_type),
            content_encoding: std::mem::take(&mut self.content_encoding),
            body: std::mem::take(&mut self.chunks),
            truncated: self.truncated,
            error,
        }));
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if !self.done {
            let why = if self.shared.stopping.load(Ordering::Relaxed) {
                "cut short: the capture stopped"
            } else {
                "client disconnected"
            };
            self.finish(Some(why.to_string()));
        }
    }
}

/// The upstream's response body, forwarded frame by frame, a copy kept.
pub(crate) struct Tee {
    inner: Incoming,
    rec: Recording,
}

impl Drop for Tee {
    fn drop(&mut self) {
        // A body that has ended without a last poll (known length, or empty)
        // is complete, not abandoned.
        if self.inner.is_end_stream() {
            self.rec.finish(None);
        }
    }
}

/// The proxy's response bodies: the upstream's, or one of its own.
pub(crate) enum ProxyBody {
    Tee(Box<Tee>),
    Full(Option<Bytes>),
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            ProxyBody::Tee(tee) => {
                let tee = &mut **tee;
                match Pin::new(&mut tee.inner).poll_frame(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            tee.rec.keep(data);
                        }
                        if tee.inner.is_end_stream() {
                            tee.rec.finish(None);
                        }
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Poll::Ready(Some(Err(e))) => {
                        tee.rec
                            .finish(Some(format!("upstream stream broken: {}", error_chain(&e))));
                        // Passing the error on makes hyper cut the client
                        // connection: the client sees the break.
                        Poll::Ready(Some(Err(e)))
                    }
                    Poll::Ready(None) => {
                        tee.rec.finish(None);
                        Poll::Ready(None)
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Full(data) => data.is_none(),
            ProxyBody::Tee(tee) => tee.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(Some(d)) => SizeHint::with_exact(d.len() as u64),
            ProxyBody::Full(None) => SizeHint::with_exact(0),
            ProxyBody::Tee(tee) => tee.inner.size_hint(),
        }
    }
}

/// The proxy's own answer (an OpenAI-style error object).
fn own_response(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({"error": {
        "message": format!("specreplay capture: {message}"),
        "type": "proxy_error",
        "code": status.as_u16(),
    }});
    let mut resp = Response::new(ProxyBody::Full(Some(Bytes::from(body.to_string()))));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn header_str(headers: &HeaderMap, name: hyper::header::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let arrival_us = now_us();
    let (parts, body) = req.into_parts();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let (body, body_error) = read_body(body).await;
    let seq = shared.next_seq.fetch_add(1, Ordering::Relaxed);
    let api = shared.api_of(&parts.method, parts.uri.path());
    let _ = shared.events.send(ProxyEvent::Request(RequestEvent {
        seq,
        arrival_us,
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        api,
        body: body.clone(),
        error: body_error.as_ref().map(|(_, m)| m.clone()),
        session: session_of(&shared, &parts.headers),
    }));
    let mut rec = Recording {
        shared: shared.clone(),
        seq,
        api,
        arrival_us,
        status: 0,
        ttfb_us: None,
        content_type: String::new(),
        content_encoding: String::new(),
        chunks: Vec::new(),
        kept: 0,
        truncated: false,
        done: false,
    };
    let refuse = |mut rec: Recording, status: StatusCode, message: String| {
        rec.status = status.as_u16();
        rec.ttfb_us = Some(now_us() - arrival_us);
        rec.finish(Some(message.clone()));
        Ok(own_response(status, &message))
    };
    if let Some((status, message)) = body_error {
        return refuse(rec, status, message);
    }
    let uri: Uri = match format!("{}{}", shared.base, path_and_query).parse() {
        Ok(uri) => uri,
        Err(e) => {
            return refuse(
                rec,
                StatusCode::BAD_REQUEST,
                format!("bad request path: {e}"),
            )
        }
    };
    let upstream = match send_upstream(&shared, &parts, &uri, &body).await {
        Ok(upstream) => upstream,
        Err(message) => return refuse(rec, StatusCode::BAD_GATEWAY, message),
    };
    rec.ttfb_us = Some(now_us() - arrival_us);
    rec.status = upstream.status().as_u16();
    rec.content_type = header_str(upstream.headers(), CONTENT_TYPE);
    rec.content_encoding = header_str(upstream.headers(), CONTENT_ENCODING);
    let (up_parts, up_body) = upstream.into_parts();
    let mut resp = Response::new(ProxyBody::Tee(Box::new(Tee {
        inner: up_body,
        rec,
    })));
    *resp.status_mut() = up_parts.status;
    forward_headers(&up_parts.headers, resp.headers_mut(), true);
    Ok(resp)
}

/// The request's body, or (an empty body and) the status and message that
/// refuse it: too large, or unreadable.
async fn read_body(body: Incoming) -> (Bytes, Option<(StatusCode, String)>) {
    match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
        Ok(collected) => (collected.to_bytes(), None),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => (
            Bytes::new(),
            Some((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body larger than {MAX_REQUEST_BYTES} bytes"),
            )),
        ),
        Err(e) => (
            Bytes::new(),
            Some((
                StatusCode::BAD_REQUEST,
                format!("request body unreadable: {}", error_chain(&*e)),
            )),
        ),
    }
}

/// The session id the configured header names, if the request carries one.
fn session_of(shared: &Shared, headers: &HeaderMap) -> Option<String> {
    shared
        .session_header
        .as_ref()
        .and_then(|name| headers.get(name))
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The request sent on to the upstream at `uri`, again on a fresh
/// connection when a pooled one turned out closed (llama.cpp closes after
/// every stream), as the engine sends (`send_resending_stale`). Err: why the
/// upstream could not be reached.
async fn send_upstream(
    shared: &Shared,
    parts: &hyper::http::request::Parts,
    uri: &Uri,
    body: &Bytes,
) -> Result<Response<Incoming>, String> {
    let mut upstream_req = Request::new(());
    *upstream_req.method_mut() = parts.method.clone();
    *upstream_req.uri_mut() = uri.clone();
    forward_headers(&parts.headers, upstream_req.headers_mut(), false);
    let (head, ()) = upstream_req.into_parts();
    send_resending_stale(&shared.client, &head, body)
        .await
        .map_err(|e| format!("upstream unreachable: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_named_headers_are_dropped() {
        let mut src = HeaderMap::new();
        src.insert("authorization", HeaderValue::from_static("Bearer x"));
        src.insert(
            "connection",
            HeaderValue::from_static("keep-alive, X-Private"),
        );
        src.insert("x-private", HeaderValue::from_static("1"));
        src.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        src.insert("content-length", HeaderValue::from_static("12"));
        src.insert("host", HeaderValue::from_static("h"));
        src.append("x-multi", HeaderValue::from_static("a"));
        src.append("x-multi", HeaderValue::from_static("b"));
        let mut req = HeaderMap::new();
        forward_headers(&src, &mut req, false);
        let mut names: Vec<_> = req.keys().map(|k| k.as_str().to_string()).collect();
        names.sort();
        assert_eq!(names, ["authorization", "x-multi"]);
        assert_eq!(req.get_all("x-multi").iter().count(), 2);
        let mut resp = HeaderMap::new();
        forward_headers(&src, &mut resp, true);
        assert_eq!(resp.get("content-length").unwrap(), "12");
    }
}
