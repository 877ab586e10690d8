//! The replay engine: schedules requests (open or closed loop), sends them,
//! times every streamed read, and hands finished requests out in batches.
//!
//! Nothing on the measurement path waits for the consumer: finished requests
//! go into an unbounded channel that the Python layer drains at its own pace.

mod accounting;
pub mod apportion;
pub mod batch;
pub(crate) mod http;
mod interrupt;
pub(crate) mod net;
mod pacing;
pub mod record;
mod request;
pub mod request_columns;
pub mod schedule;
pub mod spec;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::http::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::clock::{instant_to_us, now_us, us_to_instant};
use crate::error::CoreError;

pub use record::RequestRecord;
use request::{execute, RequestContext};
use schedule::{slot_template, Schedule, Slot};
pub use spec::{Arrival, LoadMode, PreparedRequest, RunSpec, Share};

/// Delay between `start` and the first scheduled send, so the first deadline
/// is not already late when the dispatcher thread comes up.
const START_LEAD: Duration = Duration::from_millis(20);

/// Live counters for a progress display.
#[derive(Debug, Default)]
pub struct Progress {
    pub scheduled: AtomicU64,
    pub sent: AtomicU64,
    pub finished: AtomicU64,
    pub failed: AtomicU64,
    pub output_tokens: AtomicU64,
}

impl Progress {
    pub fn snapshot(&self) -> ProgressSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProgressSnapshot {
            scheduled: get(&self.scheduled),
            sent: get(&self.sent),
            finished: get(&self.finished),
            failed: get(&self.failed),
            output_tokens: get(&self.output_tokens),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgressSnapshot {
    pub scheduled: u64,
    pub sent: u64,
    pub finished: u64,
    pub failed: u64,
    pub output_tokens: u64,
}

struct Shared {
    ctx: RequestContext,
    share: Option<Share>,
    requests: Vec<PreparedRequest>,
    warmup: u64,
    permits: Option<Semaphore>,
    progress: Arc<Progress>,
    // Each task holds the sender through its `Arc<Shared>`: the channel closes
    // exactly when the last request has reported.
    results: mpsc::UnboundedSender<RequestRecord>,
}

/// A running (or finished) point. Dropping it cancels what is in flight.
pub struct EngineRun {
    results: mpsc::UnboundedReceiver<RequestRecord>,
    progress: Arc<Progress>,
    cancel: CancellationToken,
}

impl Drop for EngineRun {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl EngineRun {
    /// The live counters, readable while another thread drains the results.
    pub fn progress_handle(&self) -> Arc<Progress> {
        self.progress.clone()
    }

    /// A token that cancels the run from any thread.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Stops scheduling and cancels requests in flight; each still reports a
    /// row (error kind `cancelled`).
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Collects the requests that finish within `wait`, up to `max` of them
    /// (possibly none); returns early once `max` are in or the point is over.
    /// `None` means the point is over and drained. Waiting out `wait` rather
    /// than returning with the first row keeps the consumer's cost per row
    /// low: one batch per wait, not one per request (at 1,024 streams, one
    /// small batch per request cost Python about 2 µs per chunk).
    pub async fn next_records(&mut self, max: usize, wait: Duration) -> Option<Vec<RequestRecord>> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut out = Vec::new();
        while out.len() < max {
            let room = max - out.len();
            match tokio::time::timeout_at(deadline, self.results.recv_many(&mut out, room)).await {
                // 0: the channel is closed (every request has reported).
                Ok(0) if out.is_empty() => return None,
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        Some(out)
    }
}

fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, CoreError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            CoreError::config("header", format!("{name:?} is not a valid header name"))
        })?;
        // The value may be a secret: the message names the header only.
        let mut v = HeaderValue::from_str(value).map_err(|_| {
            CoreError::config(
                "header",
                format!("the value of {name:?} is not a valid header value"),
            )
        })?;
        if is_secret_header(&n) {
            v.set_sensitive(true);
        }
        map.append(n, v);
    }
    Ok(map)
}

/// The values of secret headers, and the token of `Bearer <token>`, to scrub
/// from anything recorded.
fn secret_values(headers: &HeaderMap) -> Vec<String> {
    let mut out = Vec::new();
    for (name, value) in headers {
        if !is_secret_header(name) {
            continue;
        }
        if let Ok(v) = value.to_str() {
            out.push(v.to_string());
            if let Some((_, token)) = v.split_once(' ') {
                out.push(token.trim().to_string());
            }
        }
    }
    out
}

/// Headers whose values are secrets: never recorded, never written (lower
/// case). The one list: Python reads it through `_core.is_secret_header`.
pub const SECRET_HEADERS: [&str; 5] = [
    "authorization",
    "api-key",
    "x-api-key",
    "cookie",
    "proxy-authorization",
];

pub fn is_secret_header(name: &HeaderName) -> bool {
    SECRET_HEADERS.contains(&name.as_str())
}

/// [`is_secret_header`] for a name as a user wrote it (any case, spaces around).
pub fn is_secret_header_name(name: &str) -> bool {
    let name = name.trim();
    SECRET_HEADERS.iter().any(|s| s.eq_ignore_ascii_case(name))
}

/// Starts one point on `runtime`. Returns at once; drain the results with
/// [`EngineRun::next_records`].
pub fn start(
    spec: RunSpec,
    requests: Vec<PreparedRequest>,
    runtime: &Handle,
) -> Result<EngineRun, CoreError> {
    spec.validate()?;
    if requests.is_empty() {
        return Err(CoreError::config("trace", "no requests to send"));
    }
    let headers = header_map(&spec.headers)?;
    let preconnections = spec.preconnections()?;
    let arrivals: Vec<f64> = requests.iter().map(|r| r.arrival_s).collect();
    let first_uri = requests[0].uri.clone();
    let limit = spec.num_requests.or(if spec.duration_s.is_some() {
        None
    } else {
        Some(requests.len() as u64)
    });
    let cancel = CancellationToken::new();
    let progress = Arc::new(Progress::default());
    let (tx, rx) = mpsc::unbounded_channel();
    let (concurrency, open_loop) = match spec.load {
        LoadMode::Concurrency { concurrency } => (concurrency, false),
        _ => (spec.max_concurrency.unwrap_or(1024), true),
    };
    let secrets = secret_values(&headers);
    let make_shared = {
        let (cancel, progress) = (cancel.clone(), progress.clone());
        move |client: http::HttpClient| Shared {
            ctx: RequestContext {
                client,
                secrets,
                headers,
                timeout: spec.timeout_s.map(Duration::from_secs_f64),
                stall_timeout: spec.stall_timeout_s.map(Duration::from_secs_f64),
                retries: spec.retries,
                cancel,
                server_stamps: spec.server_stamps,
                chunk_text: spec.chunk_text,
            },
            requests,
            share: spec.share,
            warmup: spec.warmup,
            permits: if open_loop {
                spec.max_concurrency.map(Semaphore::new)
            } else {
                None
            },
            progress,
            results: tx,
        }
    };
    let duration = spec.duration_s.map(Duration::from_secs_f64);
    let mode = match Schedule::open_loop(spec.load, &arrivals, limit, spec.seed) {
        Some(schedule) => {
            // The dispatcher thread starts now (so a failure to start it is
            // `start`'s error) and waits for the connections to be open.
            let (go, ready) = std::sync::mpsc::sync_channel::<(Arc<Shared>, Instant)>(1);
            let runtime = runtime.clone();
            std::thread::Builder::new()
                .name("specreplay-dispatch".into())
                .spawn(move || {
                    if let Ok((shared, start_at)) = ready.recv() {
                        dispatch_open_loop(shared, schedule, start_at, duration, runtime);
                    }
                })
                .map_err(|e| CoreError::io("could not start the dispatcher thread", e))?;
            Mode::Open(go)
        }
        None => Mode::Closed { concurrency, limit },
    };
    let plan = Launch {
        start_at: spec.start_at_us.map(us_to_instant),
        uri: first_uri,
        preconnections,
        cancel: cancel.clone(),
        max_idle: concurrency,
        mode,
        duration,
        runtime: runtime.clone(),
    };
    runtime.spawn(launch(make_shared, plan));
    Ok(EngineRun {
        results: rx,
        progress,
        cancel,
    })
}

/// How the requests are started once the clock runs.
enum Mode {
    /// Hand the run to the waiting dispatcher thread.
    Open(std::sync::mpsc::SyncSender<(Arc<Shared>, Instant)>),
    Closed {
        concurrency: usize,
        limit: Option<u64>,
    },
}

/// What `launch` needs besides the shared state.
struct Launch {
    /// The instant the clock starts (`RunSpec::start_at_us`), if given.
    start_at: Option<Instant>,
    /// The origin to preconnect to (every request of a point goes there).
    uri: ::http::Uri,
    preconnections: usize,
    cancel: CancellationToken,
    max_idle: usize,
    mode: Mode,
    duration: Option<Duration>,
    runtime: Handle,
}

/// Opens the connections (when asked), then starts the clock and the
/// requests. The connector hands the opened connections out before it opens
/// any new one, so the first requests are the ones that use them.
async fn launch(make_shared: impl FnOnce(http::HttpClient) -> Shared, plan: Launch) {
    let Launch {
        start_at,
        uri,
        preconnections,
        cancel,
        max_idle,
        mode,
        duration,
        runtime,
    } = plan;
    let connector = net::StampingConnector::new();
    let mut h2 = false;
    if preconnections > 0 {
        // A cancelled run still starts its workers: they see the
        // cancellation and report what they did not send.
        tokio::select! {
            opened = connector.preconnect(&uri, preconnections) => h2 = opened.h2,
            _ = cancel.cancelled() => {}
        }
    }
    let shared = Arc::new(make_shared(http::client_over(connector, max_idle, h2)));
    let start_at = match start_at {
        Some(at) => at.max(Instant::now()),
        None => Instant::now() + START_LEAD,
    };
    match mode {
        // The thread is waiting; if it is gone there is nobody to send.
        Mode::Open(go) => drop(go.send((shared, start_at))),
        Mode::Closed { concurrency, limit } => {
            let next = Arc::new(AtomicU64::new(0));
            for _ in 0..concurrency {
                let (shared, next) = (shared.clone(), next.clone());
                runtime.spawn(closed_loop_worker(shared, next, limit, start_at, duration));
            }
        }
    }
}

/// Open loop: every request goes out at its scheduled time, whatever is in
/// flight (no coordinated omission). Runs on its own OS thread for timing.
fn dispatch_open_loop(
    shared: Arc<Shared>,
    schedule: Schedule,
    start_at: Instant,
    duration: Option<Duration>,
    runtime: Handle,
) {
    pacing::tighten_timer_slack();
    let cancel = shared.ctx.cancel.clone();
    for slot in schedule {
        if !owns(&shared, &slot) {
            continue;
        }
        let offset = Duration::from_micros(slot.offset_us.max(0) as u64);
        if duration.is_some_and(|d| offset >= d) {
            break;
        }
        let deadline = start_at + offset;
        if !pacing::wait_until(deadline, || cancel.is_cancelled()) {
            break;
        }
        shared.progress.scheduled.fetch_add(1, Ordering::Relaxed);
        runtime.spawn(run_slot(shared.clone(), slot, instant_to_us(deadline)));
    }
}

/// Closed loop: a worker sends its next request as soon as the previous ends.
async fn closed_loop_worker(
    shared: Arc<Shared>,
    next: Arc<AtomicU64>,
    limit: Option<u64>,
    start_at: Instant,
    duration: Option<Duration>,
) {
    tokio::time::sleep_until(start_at.into()).await;
    let templates = shared.requests.len();
    loop {
        if shared.ctx.cancel.is_cancelled() || duration.is_some_and(|d| start_at.elapsed() >= d) {
            break;
        }
        let index = next.fetch_add(1, Ordering::Relaxed);
        if limit.is_some_and(|l| index >= l) {
            break;
        }
        let (template, lap) = slot_template(index, templates);
        let slot = Slot {
            index,
            template,
            lap,
            offset_us: 0,
        };
        if !owns(&shared, &slot) {
            continue;
        }
        shared.progress.scheduled.fetch_add(1, Ordering::Relaxed);
        run_slot(shared.clone(), slot, now_us()).await;
    }
}

/// Whether this process sends `slot` (always, unless the point is shared
/// between the workers of a distributed replay).
fn owns(shared: &Shared, slot: &Slot) -> bool {
    match &shared.share {
        Some(share) => share.owns(slot.index, slot.template),
        None => true,
    }
}

async fn run_slot(shared: Arc<Shared>, slot: Slot, scheduled_us: i64) {
    let req = &shared.requests[slot.template];
    let mut rec = RequestRecord {
        request_index: slot.index as i64,
        trace_id: if slot.lap == 0 {
            req.trace_id.clone()
        } else {
            format!("{}#{}", req.trace_id, slot.lap)
        },
        api: req.dialect.as_str(),
        warmup: slot.index < shared.warmup,
        scheduled_us,
        ..Default::default()
    };
    let _permit = match &shared.permits {
        Some(permits) => tokio::select! {
            p = permits.acquire() => p.ok(),
            _ = shared.ctx.cancel.cancelled() => None,
        },
        None => None,
    };
    if shared.ctx.cancel.is_cancelled() {
        rec.end_us = Some(now_us());
        rec.error = Some((
            record::ErrorKind::Cancelled,
            "run cancelled before the request was sent".into(),
        ));
    } else {
        shared.progress.sent.fetch_add(1, Ordering::Relaxed);
        execute(&shared.ctx, req, &mut rec).await;
    }
    let progress = &shared.progress;
    progress.finished.fetch_add(1, Ordering::Relaxed);
    if rec.error.is_some() {
        progress.failed.fetch_add(1, Ordering::Relaxed);
    }
    progress.output_tokens.fetch_add(
        rec.output_tokens.unwrap_or(0).max(0) as u64,
        Ordering::Relaxed,
    );
    // The receiver only goes away when the run is dropped; nothing to report to then.
    let _ = shared.results.send(rec);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_headers_match_in_any_case() {
        assert!(is_secret_header(&HeaderName::from_static("x-api-key")));
        assert!(!is_secret_header(&HeaderName::from_static("x-request-id")));
        assert!(is_secret_header_name(" Authorization "));
        assert!(is_secret_header_name("COOKIE"));
        assert!(!is_secret_header_name("Content-Type"));
    }
}
