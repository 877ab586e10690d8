//! What every route answers with: the response body type (a whole JSON
//! document, a timed SSE stream, a staged plain body) and the JSON answers
//! and errors built on it.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::{header, Response, StatusCode};

use super::fault::StagedBody;
use super::render;
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

pub(crate) fn json(status: StatusCode, body: Vec<u8>) -> Response<SimBody> {
    let mut resp = Response::new(SimBody::Full(Some(Bytes::from(body))));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

pub(crate) fn error(status: StatusCode, kind: &str, message: &str) -> Response<SimBody> {
    json(status, render::error_body(message, kind, status.as_u16()))
}

/// What the simulator says while it shuts down, in place of an answer.
pub(crate) fn shutting_down() -> Response<SimBody> {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        "the server is shutting down",
    )
}
