//! The non-streaming answer: one JSON document, sent when the last step would
//! have been generated, and the faults as they can show in a plain body (see
//! "Fault injection" in docs/simulator.md).

use std::sync::Arc;

use bytes::Bytes;
use hyper::{header, Response, StatusCode};

use super::fault::{self, ConnControl, FaultKind, StagedBody, StagedEnd};
use super::http::{json, shutting_down, SimBody};
use super::pace::Pacer;
use super::render::{self, Renderer, Usage};
use super::script::{Finish, Script, Texts};
use super::shared::Shared;

/// The whole answer of `script`, at its last step's deadline.
pub(super) async fn answer(
    shared: &Shared,
    control: &Arc<ConnControl>,
    fault: Option<FaultKind>,
    render: Renderer,
    mut script: Script,
    mut pacer: Pacer,
) -> Response<SimBody> {
    let mut cached_tokens = None;
    let ready = async {
        let mut deadline = None;
        while let Some(paced) = pacer.next(&mut script).await {
            deadline = Some(paced.at);
            cached_tokens = paced.cached_tokens;
        }
        if let Some(at) = deadline {
            tokio::time::sleep_until(at.into()).await;
        }
        deadline.is_some()
    };
    let answered = tokio::select! {
        // No step at all: the engine stopped under it.
        answered = ready => answered,
        _ = shared.shutdown_signal() => false,
    };
    if !answered {
        return shutting_down();
    }
    let reasoning_tokens = render
        .reports_reasoning()
        .then_some(script.reasoning_tokens);
    let mut answer = Answer {
        usage: Usage::new(
            script.prompt_tokens,
            script.total_tokens(),
            reasoning_tokens,
        )
        .with_cached(cached_tokens),
        finish: script.finish,
        text: Texts::default(),
        render,
    };
    let layout = answer.render.layout();
    script.push_range(0, script.total_tokens(), layout, &mut answer.text);
    match fault {
        None => json(StatusCode::OK, answer.body()),
        Some(kind) => answer.with_fault(shared, control, kind),
    }
}

/// A whole answer, ready to render.
struct Answer {
    render: Renderer,
    text: Texts,
    finish: Finish,
    usage: Usage,
}

impl Answer {
    fn body(&self) -> Vec<u8> {
        self.render.full_body(&self.text, self.finish, self.usage)
    }

    /// The answer carrying `kind`: the same fault, as it can show in a
    /// plain JSON body.
    fn with_fault(
        mut self,
        shared: &Shared,
        control: &Arc<ConnControl>,
        kind: FaultKind,
    ) -> Response<SimBody> {
        match kind {
            FaultKind::InvalidUtf8 => {
                self.text.last_mut().push(fault::SENTINEL);
                json(StatusCode::OK, fault::poison_utf8(&self.body()))
            }
            FaultKind::OversizedEvent => {
                let plain = self.body().len();
                let pad = (shared.config.fault_oversized_bytes as usize).saturating_sub(plain);
                self.text.last_mut().push_str(&" ".repeat(pad));
                json(StatusCode::OK, self.body())
            }
            FaultKind::ErrorEvent => json(
                StatusCode::OK,
                render::error_body("simulated overload", "server_error", 503),
            ),
            _ => self.staged(shared, control, kind),
        }
    }

    /// The faults that cut or delay the body: its halves, timed.
    fn staged(
        self,
        shared: &Shared,
        control: &Arc<ConnControl>,
        kind: FaultKind,
    ) -> Response<SimBody> {
        let now = tokio::time::Instant::now();
        let stall = shared.config.fault_stall();
        let body = Bytes::from(self.body());
        let total = body.len();
        let cut = fault::half_on_char(&body);
        let (half, rest) = (body.slice(..cut), body.slice(cut..));
        let (pieces, end) = match kind {
            FaultKind::MalformedJson => return json(StatusCode::OK, half.to_vec()),
            FaultKind::StallBeforeFirstToken => (vec![(now + stall, body)], StagedEnd::Complete),
            FaultKind::StallBetweenTokens => {
                (vec![(now, half), (now + stall, rest)], StagedEnd::Complete)
            }
            FaultKind::ResetMidStream => (vec![(now, half)], StagedEnd::Reset),
            FaultKind::MissingDone => (vec![(now, half)], StagedEnd::Close),
            // Answered before the answer was computed.
            _ => return json(StatusCode::OK, body.to_vec()),
        };
        let staged = StagedBody::new(pieces, end, control.clone());
        let mut resp = Response::new(SimBody::Staged(Box::new(staged)));
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        headers.insert(header::CONTENT_LENGTH, header::HeaderValue::from(total));
        resp
    }
}
