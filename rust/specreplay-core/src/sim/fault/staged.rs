//! A non-streaming answer sent in timed pieces, for the faults that act on
//! the body of a plain JSON answer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{ConnControl, DEAD_LINGER, RESET_FLUSH};

/// How a `StagedBody` ends after its last piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagedEnd {
    /// The body ends as usual.
    Complete,
    /// The connection is reset (RST).
    Reset,
    /// The connection is closed (FIN), short of the declared length.
    Close,
}

/// A non-streaming answer sent in timed pieces, for the faults that act on
/// the body of a plain JSON answer: each piece waits for its instant, and
/// the end may kill the connection.
pub struct StagedBody {
    pieces: std::collections::VecDeque<(tokio::time::Instant, bytes::Bytes)>,
    end: StagedEnd,
    control: std::sync::Arc<ConnControl>,
    sleep: Pin<Box<tokio::time::Sleep>>,
    /// Set once the switch is pulled; the body then ends at `sleep`.
    killed: bool,
    done: bool,
}

impl StagedBody {
    pub fn new(
        pieces: Vec<(tokio::time::Instant, bytes::Bytes)>,
        end: StagedEnd,
        control: std::sync::Arc<ConnControl>,
    ) -> StagedBody {
        StagedBody {
            pieces: pieces.into(),
            end,
            control,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            killed: false,
            done: false,
        }
    }
}

impl hyper::body::Body for StagedBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if this.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if this.killed {
                this.done = true;
                continue;
            }
            if let Some((at, _)) = this.pieces.front() {
                if *at > tokio::time::Instant::now() {
                    let at = *at;
                    this.sleep.as_mut().reset(at);
                    continue;
                }
                let (_, bytes) = this.pieces.pop_front().expect("front exists");
                if this.pieces.is_empty() && this.end != StagedEnd::Complete {
                    // Let hyper flush this piece before the switch is pulled.
                    let at = tokio::time::Instant::now() + RESET_FLUSH;
                    this.sleep.as_mut().reset(at);
                }
                return Poll::Ready(Some(Ok(hyper::body::Frame::data(bytes))));
            }
            match this.end {
                StagedEnd::Complete => this.done = true,
                StagedEnd::Reset | StagedEnd::Close => {
                    if this.end == StagedEnd::Reset {
                        this.control.reset();
                    } else {
                        this.control.close();
                    }
                    // The connection goes now; end the body later (h2's stream task).
                    this.killed = true;
                    let at = tokio::time::Instant::now() + DEAD_LINGER;
                    this.sleep.as_mut().reset(at);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
