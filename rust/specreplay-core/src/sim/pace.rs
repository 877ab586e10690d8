//! Where a request's decode steps come from, and when each is due: its own
//! clock (no capacity model: step k is due at arrival + `due_us`, whatever
//! else is in flight) or the engine's batch (the capacity model: each step
//! when the iteration that ran it ends). A `Pacer` also keeps the request's
//! place in the exporter's counters: it counts the finish when the last step
//! comes, or an abort if the request goes first.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::exporter::Exporter;
use super::script::{Finish, Script, Step};

/// A step and the instant it is due.
#[derive(Clone, Copy, Debug)]
pub struct Paced {
    pub step: Step,
    pub at: Instant,
    /// The prompt tokens the prefix cache served (the capacity model's
    /// engine with prefix caching on; `None` otherwise).
    pub cached_tokens: Option<u32>,
}

enum Source {
    /// The request's own schedule, from its arrival.
    Own { start: Instant },
    /// Steps sent by the engine as it runs them.
    Engine(mpsc::UnboundedReceiver<Paced>),
}

pub struct Pacer {
    source: Source,
    exporter: Arc<Exporter>,
    finish: Finish,
    finished: bool,
}

impl Pacer {
    /// A request on its own clock from `start`: counted as running (and its
    /// prompt as processed) from now until it ends.
    pub fn own(start: Instant, script: &Script, exporter: Arc<Exporter>) -> Pacer {
        exporter.count_prompt(script.prompt_tokens);
        exporter.running().inc();
        Pacer {
            source: Source::Own { start },
            finish: script.finish,
            exporter,
            finished: false,
        }
    }

    /// A request whose steps the engine sends on `steps` (the engine keeps
    /// the gauges and counts the tokens).
    pub fn engine(
        steps: mpsc::UnboundedReceiver<Paced>,
        script: &Script,
        exporter: Arc<Exporter>,
    ) -> Pacer {
        Pacer {
            source: Source::Engine(steps),
            finish: script.finish,
            exporter,
            finished: false,
        }
    }

    /// The next step of `script` and when it is due; `None` after the last
    /// one (or when the engine has gone).
    pub fn poll_next(&mut self, script: &mut Script, cx: &mut Context<'_>) -> Poll<Option<Paced>> {
        let paced = match &mut self.source {
            Source::Own { start } => script.next_step().map(|step| {
                self.exporter.count_step(&step);
                Paced {
                    step,
                    at: *start + Duration::from_micros(step.due_us),
                    cached_tokens: None,
                }
            }),
            Source::Engine(steps) => ready!(steps.poll_recv(cx)),
        };
        if paced.is_some_and(|p| p.step.last) {
            self.finished = true;
            self.exporter.count_finish(self.finish.as_str());
        }
        Poll::Ready(paced)
    }

    /// `poll_next` as a future.
    pub async fn next(&mut self, script: &mut Script) -> Option<Paced> {
        poll_fn(|cx| self.poll_next(script, cx)).await
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        if !self.finished {
            self.exporter.count_finish("abort");
        }
        if let Source::Own { .. } = self.source {
            self.exporter.running().dec();
        }
    }
}
