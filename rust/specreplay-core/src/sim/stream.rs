//! The streaming answer as a hyper `Body`: a small state machine polled by
//! the connection, with one timer and no task or channel per stream.
//!
//! Each step is due at an absolute time, `start + step.due_us`, so a late
//! wake-up never shifts the later steps: a step whose deadline has passed is
//! written at once and the schedule catches up. All chunks of one step (role
//! chunk, text, finish, usage, `[DONE]`) go out as one frame.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame};
use tokio::time::Sleep;

use super::render::{Renderer, Usage};
use super::request::Endpoint;
use super::script::{Script, Step};

/// Resolves when the server shuts down.
pub type ShutdownSignal = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

pub struct SseStream {
    script: Script,
    render: Renderer,
    start: Instant,
    sleep: Pin<Box<Sleep>>,
    next: Option<Step>,
    shutdown: ShutdownSignal,
    continuous_usage: bool,
    include_usage: bool,
    /// Whether usage reports `completion_tokens_details.reasoning_tokens`.
    report_reasoning: bool,
    buf: BytesMut,
    reasoning: String,
    content: String,
    done: bool,
}

impl SseStream {
    /// A stream for `script` whose clock started at `start` (the request's arrival).
    pub fn new(
        mut script: Script,
        render: Renderer,
        start: Instant,
        shutdown: ShutdownSignal,
        include_usage: bool,
        continuous_usage: bool,
    ) -> SseStream {
        let next = script.next_step();
        let due = next.map_or(0, |s| s.due_us);
        let report_reasoning = render.endpoint == Endpoint::Chat && render.reasoning_key.is_some();
        SseStream {
            script,
            render,
            start,
            sleep: Box::pin(tokio::time::sleep_until(
                (start + Duration::from_micros(due)).into(),
            )),
            next,
            shutdown,
            continuous_usage,
            include_usage,
            report_reasoning,
            buf: BytesMut::with_capacity(1024),
            reasoning: String::new(),
            content: String::new(),
            done: false,
        }
    }

    fn usage(&self, completion: u32, reasoning: u32, details: bool) -> Usage {
        let reasoning = (details && self.report_reasoning).then_some(reasoning);
        Usage::new(self.script.prompt_tokens, completion, reasoning)
    }

    /// Renders one step (and, after the last, the usage chunk and `[DONE]`).
    fn render_step(&mut self, step: Step) {
        let chat = self.render.endpoint == Endpoint::Chat;
        if step.index == 0 && chat {
            let usage = self.continuous_usage.then(|| self.usage(0, 0, false));
            self.render.role_chunk(&mut self.buf, usage);
        }
        let in_reasoning = self.script.reasoning_in(&step);
        self.reasoning.clear();
        self.content.clear();
        match self.render.reasoning_key.filter(|_| chat) {
            Some(_) => {
                self.script
                    .push_text(step.first, in_reasoning, false, &mut self.reasoning);
                self.script.push_text(
                    step.first + in_reasoning,
                    step.tokens - in_reasoning,
                    false,
                    &mut self.content,
                );
            }
            // No reasoning parser: everything is content (with think tags in chat).
            None => self
                .script
                .push_text(step.first, step.tokens, chat, &mut self.content),
        }
        let emitted = step.first + step.tokens;
        let finish = step.last.then(|| self.script.finish.as_str());
        let usage = self.continuous_usage.then(|| self.usage(emitted, 0, false));
        self.render
            .text_chunk(&mut self.buf, &self.reasoning, &self.content, finish, usage);
        if step.last {
            if self.include_usage {
                let usage = self.usage(emitted, self.script.reasoning_tokens.min(emitted), true);
                self.render.usage_chunk(&mut self.buf, usage);
            }
            Renderer::done(&mut self.buf);
            self.done = true;
        }
    }

    /// The server is going away: a last chunk with `finish_reason: "abort"` (vLLM's word).
    fn render_abort(&mut self) {
        let emitted = self.next.map_or(self.script.total_tokens(), |s| s.first);
        let usage = self.continuous_usage.then(|| self.usage(emitted, 0, false));
        self.render
            .text_chunk(&mut self.buf, "", "", Some("abort"), usage);
        Renderer::done(&mut self.buf);
        self.done = true;
    }
}

impl Body for SseStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if this.shutdown.as_mut().poll(cx).is_ready() {
            this.render_abort();
        } else {
            if this.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let Some(step) = this.next.take() else {
                this.done = true;
                return Poll::Ready(None);
            };
            this.render_step(step);
            if !this.done {
                this.next = this.script.next_step();
                if let Some(next) = this.next {
                    let at = this.start + Duration::from_micros(next.due_us);
                    this.sleep.as_mut().reset(at.into());
                }
            }
        }
        Poll::Ready(Some(Ok(Frame::data(this.buf.split().freeze()))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
