//! The streaming answer as a hyper `Body`: a small state machine polled by
//! the connection, with one timer and no task or channel per stream.
//!
//! Each step comes from the request's `Pacer` with the absolute time it is
//! due (its own schedule, or the end of the engine's iteration that ran it),
//! so a late wake-up never shifts the later steps: a step whose deadline has
//! passed is written at once and the schedule catches up. All chunks of one
//! step (role chunk, text, finish, usage, `[DONE]`) go out as one frame.
//!
//! A stream may carry one fault (`StreamFault`). The mid-stream ones act on
//! the *trigger step*: the first step after step 0 that starts at or past
//! half the answer's tokens (the last step if none does, e.g. a one-step
//! answer).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use hyper::body::{Body, Frame};
use tokio::time::Sleep;

use super::fault::{self, ConnControl, FaultKind};
use super::pace::{Paced, Pacer};
use super::render::{Renderer, Usage};
use super::script::{Script, Step, Texts};

/// Resolves when the server shuts down.
pub type ShutdownSignal = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// A fault to inject into one stream, with what it needs.
pub struct StreamFault {
    pub kind: FaultKind,
    /// The connection's kill switch (`reset_mid_stream`).
    pub control: Arc<ConnControl>,
    /// `fault_stall_ms`.
    pub stall: Duration,
    /// `fault_oversized_bytes`.
    pub oversized_bytes: usize,
}

/// Where a `reset_mid_stream` stream is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dying {
    Alive,
    /// At the trigger step: waiting `fault::RESET_FLUSH`, then reset.
    Resetting,
    /// Reset sent: nothing more, ever; ends after `fault::DEAD_LINGER`.
    Dead,
}

pub struct SseStream {
    script: Script,
    render: Renderer,
    /// Where the steps come from; dropped once the connection is reset.
    pacer: Option<Pacer>,
    /// How much later than due the steps are written (the stall faults).
    delay: Duration,
    sleep: Pin<Box<Sleep>>,
    /// The step waiting for its deadline.
    next: Option<Step>,
    /// Tokens written so far.
    emitted: u32,
    /// The prompt tokens the prefix cache served, as the engine said.
    cached_tokens: Option<u32>,
    shutdown: ShutdownSignal,
    continuous_usage: bool,
    include_usage: bool,
    /// Whether usage reports `completion_tokens_details.reasoning_tokens`.
    report_reasoning: bool,
    buf: BytesMut,
    /// The text of the step being rendered.
    text: Texts,
    done: bool,
    fault: Option<StreamFault>,
    /// Token position from which a step can be the trigger step.
    trigger_from: u32,
    triggered: bool,
    dying: Dying,
}

impl SseStream {
    /// A stream for `script`, paced by `pacer`.
    pub fn new(
        script: Script,
        render: Renderer,
        pacer: Pacer,
        shutdown: ShutdownSignal,
        include_usage: bool,
        continuous_usage: bool,
        fault: Option<StreamFault>,
    ) -> SseStream {
        // The whole schedule moves: silence after the headers, then as usual.
        let delay = fault
            .as_ref()
            .filter(|f| f.kind == FaultKind::StallBeforeFirstToken)
            .map_or(Duration::ZERO, |f| f.stall);
        let report_reasoning = render.reports_reasoning();
        let trigger_from = script.total_tokens() / 2;
        SseStream {
            script,
            render,
            pacer: Some(pacer),
            delay,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            next: None,
            emitted: 0,
            cached_tokens: None,
            shutdown,
            continuous_usage,
            include_usage,
            report_reasoning,
            buf: BytesMut::with_capacity(1024),
            text: Texts::default(),
            done: false,
            fault,
            trigger_from,
            triggered: false,
            dying: Dying::Alive,
        }
    }

    fn fault_kind(&self) -> Option<FaultKind> {
        self.fault.as_ref().map(|f| f.kind)
    }

    /// Whether `step` is where a mid-stream fault strikes.
    fn is_trigger(&self, step: &Step) -> bool {
        !self.triggered && (step.last || (step.index >= 1 && step.first >= self.trigger_from))
    }

    /// Holds `paced` until it is due; a `stall_between_tokens` trigger step
    /// (and every step after it) moves `fault_stall_ms` later.
    fn arm(&mut self, paced: Paced) {
        if let Some(f) = self
            .fault
            .as_ref()
            .filter(|f| f.kind == FaultKind::StallBetweenTokens)
        {
            if self.is_trigger(&paced.step) {
                self.delay += f.stall;
                self.triggered = true;
            }
        }
        self.next = Some(paced.step);
        self.cached_tokens = paced.cached_tokens;
        self.sleep.as_mut().reset((paced.at + self.delay).into());
    }

    fn usage(&self, completion: u32, reasoning: u32, details: bool) -> Usage {
        let reasoning = (details && self.report_reasoning).then_some(reasoning);
        Usage::new(self.script.prompt_tokens, completion, reasoning).with_cached(self.cached_tokens)
    }

    /// Renders one step (after the first, the dialect's opening events;
    /// after the last, its closing ones: usage, `[DONE]` or the like).
    fn render_step(&mut self, step: Step) {
        if step.index == 0 {
            let usage = self.continuous_usage.then(|| self.usage(0, 0, false));
            let prompt = self.script.prompt_tokens;
            self.render.open(&mut self.buf, usage, prompt);
        }
        self.text.clear();
        self.script.push_range(
            step.first,
            step.tokens,
            self.render.layout(),
            &mut self.text,
        );
        let emitted = step.first + step.tokens;
        self.emitted = emitted;
        let usage = self.continuous_usage.then(|| self.usage(emitted, 0, false));
        let trigger = match self.fault_kind() {
            Some(
                kind @ (FaultKind::MalformedJson
                | FaultKind::InvalidUtf8
                | FaultKind::ErrorEvent
                | FaultKind::OversizedEvent),
            ) if self.is_trigger(&step) => Some(kind),
            _ => None,
        };
        if trigger.is_some() {
            self.triggered = true;
        }
        let at = self.buf.len();
        match trigger {
            Some(FaultKind::ErrorEvent) => {
                self.render.error_event(&mut self.buf);
                self.done = true;
                return;
            }
            Some(FaultKind::InvalidUtf8) => {
                self.text.last_mut().push(fault::SENTINEL);
                self.push_text_chunk(step.last, usage);
                let tail = self.buf.split_off(at);
                self.buf.put_slice(&fault::poison_utf8(&tail));
            }
            Some(FaultKind::OversizedEvent) => {
                let before = self.render.state;
                self.push_text_chunk(step.last, usage);
                let want = self.fault.as_ref().map_or(0, |f| f.oversized_bytes);
                let pad = want.saturating_sub(self.buf.len() - at);
                if pad > 0 {
                    // The same chunk again with trailing spaces: valid JSON,
                    // the same words, `want` bytes from `data:` to the blank line.
                    self.buf.truncate(at);
                    self.render.state = before;
                    self.text.last_mut().push_str(&" ".repeat(pad));
                    self.push_text_chunk(step.last, usage);
                }
            }
            Some(FaultKind::MalformedJson) => {
                // The chunk, then a copy cut in half placed before it: an
                // extra event that no JSON parser accepts.
                self.push_text_chunk(step.last, usage);
                let chunk = self.buf.split_off(at);
                self.buf.put_slice(&fault::truncated_event(&chunk));
                self.buf.put_slice(&chunk);
            }
            _ => self.push_text_chunk(step.last, usage),
        }
        if step.last {
            let usage = self.usage(emitted, self.script.reasoning_tokens.min(emitted), true);
            let terminal = self.fault_kind() != Some(FaultKind::MissingDone);
            let finish = self.script.finish;
            self.render
                .close(&mut self.buf, finish, usage, self.include_usage, terminal);
            self.done = true;
        }
    }

    /// The step's text (`reasoning`, `content`) as one chunk, with the
    /// script's finish reason on the last step.
    fn push_text_chunk(&mut self, last: bool, usage: Option<Usage>) {
        let finish = last.then_some(self.script.finish);
        self.render.step(&mut self.buf, &self.text, finish, usage);
    }

    /// The next step once it is due: taken from the pacer, then held until
    /// its time. `None` when the pacer has no more (the engine stopped).
    fn poll_due(&mut self, cx: &mut Context<'_>) -> Poll<Option<Step>> {
        if self.next.is_none() {
            let Some(pacer) = self.pacer.as_mut() else {
                return Poll::Ready(None);
            };
            match ready!(pacer.poll_next(&mut self.script, cx)) {
                Some(paced) => self.arm(paced),
                None => return Poll::Ready(None),
            }
        }
        ready!(self.sleep.as_mut().poll(cx));
        Poll::Ready(self.next.take())
    }

    /// A `reset_mid_stream` stream after its trigger: flush, reset, linger, end.
    fn poll_dying(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        ready!(self.sleep.as_mut().poll(cx));
        if self.dying == Dying::Resetting {
            if let Some(f) = &self.fault {
                f.control.reset();
            }
            // The request is gone: out of the batch, counted as aborted.
            self.pacer = None;
            self.dying = Dying::Dead;
            let at = tokio::time::Instant::now() + fault::DEAD_LINGER;
            self.sleep.as_mut().reset(at);
            // Poll once so the timer holds our waker.
            ready!(self.sleep.as_mut().poll(cx));
        }
        self.done = true;
        Poll::Ready(None)
    }

    /// What was rendered since the last frame.
    fn frame(&mut self) -> Frame<Bytes> {
        Frame::data(self.buf.split().freeze())
    }

    /// The server is going away: a last chunk with `finish_reason: "abort"` (vLLM's word).
    fn render_abort(&mut self) {
        let usage = self.usage(self.emitted, 0, false);
        self.render
            .abort(&mut self.buf, usage, self.continuous_usage);
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
        if this.dying != Dying::Alive {
            return this.poll_dying(cx);
        }
        if this.shutdown.as_mut().poll(cx).is_ready() {
            this.render_abort();
            return Poll::Ready(Some(Ok(this.frame())));
        }
        let Some(step) = ready!(this.poll_due(cx)) else {
            // The engine stopped before the answer ended.
            this.render_abort();
            return Poll::Ready(Some(Ok(this.frame())));
        };
        if this.fault_kind() == Some(FaultKind::ResetMidStream) && this.is_trigger(&step) {
            // Everything before this step is out; this step never is.
            this.triggered = true;
            this.dying = Dying::Resetting;
            let at = tokio::time::Instant::now() + fault::RESET_FLUSH;
            this.sleep.as_mut().reset(at);
            return this.poll_dying(cx);
        }
        this.render_step(step);
        Poll::Ready(Some(Ok(this.frame())))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
