//! Routing: `/health`, `/v1/models`, `/sim/stats`, `/v1/chat/completions`,
//! `/v1/completions`, and JSON errors for the rest; the response body type
//! every route answers with. A generation request goes on to `generate`.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{header, Method, Request, Response, StatusCode};

use super::fault::{ConnControl, StagedBody};
use super::generate::generate;
use super::metrics;
use super::render;
use super::request::Endpoint;
use super::server::Shared;
use super::stream::SseStream;

/// The response body: a whole JSON document or a timed SSE stream.
pub enum SimBody {
    Full(Option<Bytes>),
    Stream(Box<SseStream>),
    /// A plain answer sent in timed pieces (faults on non-streaming answers).
    Staged(Box<StagedBody>),
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            SimBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            SimBody::Stream(stream) => Pin::new(stream.as_mut()).poll_frame(cx),
            SimBody::Staged(staged) => Pin::new(staged.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            SimBody::Full(bytes) => bytes.is_none(),
            SimBody::Stream(stream) => stream.is_end_stream(),
            SimBody::Staged(staged) => staged.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            SimBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            SimBody::Stream(_) | SimBody::Staged(_) => SizeHint::default(),
        }
    }
}

pub(super) fn json(status: StatusCode, body: Vec<u8>) -> Response<SimBody> {
    let mut resp = Response::new(SimBody::Full(Some(Bytes::from(body))));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

pub(super) fn error(status: StatusCode, kind: &str, message: &str) -> Response<SimBody> {
    json(status, render::error_body(message, kind, status.as_u16()))
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    control: Arc<ConnControl>,
    req: Request<Incoming>,
) -> Result<Response<SimBody>, Infallible> {
    let arrived = Instant::now();
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let resp = match (method, path.as_str()) {
        (Method::GET, "/health") => json(StatusCode::OK, Vec::new()),
        (Method::GET, "/v1/models") => json(
            StatusCode::OK,
            render::models_body(&shared.model, shared.created, shared.config.max_model_len),
        ),
        (Method::GET, "/sim/stats") => json(StatusCode::OK, shared.stats.to_json()),
        (Method::GET, "/metrics") => {
            let mut resp = Response::new(SimBody::Full(Some(shared.metrics.render().into())));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            resp
        }
        (Method::POST, "/v1/chat/completions") => {
            generate(&shared, &control, Endpoint::Chat, req, arrived).await
        }
        (Method::POST, "/v1/completions") => {
            generate(&shared, &control, Endpoint::Completions, req, arrived).await
        }
        (
            _,
            "/health"
            | "/v1/models"
            | "/sim/stats"
            | "/metrics"
            | "/v1/chat/completions"
            | "/v1/completions",
        ) => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed",
        ),
        (_, other) => error(
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("no route for {other}"),
        ),
    };
    Ok(resp)
}
