//! The replay engine: takes requests (given whole, or fed as the trace is
//! read: `feed`), schedules them (open or closed loop; a session's turns
//! after each other: `session`), sends them, times every streamed read, and
//! hands finished requests out in batches.
//!
//! Nothing on the measurement path waits for the consumer: finished requests
//! go into an unbounded channel that the Python layer drains at its own pace,
//! and a feed that falls behind shows as send lag, never as a blocked thread.

mod accounting;
pub mod apportion;
pub mod batch;
pub mod body;
mod dispatch;
pub mod feed;
pub(crate) mod http;
mod interrupt;
pub mod media;
pub(crate) mod net;
pub mod pacing;
mod panics;
pub mod priority;
pub mod record;
pub(crate) mod request;
pub mod request_columns;
pub mod schedule;
mod session;
mod share;
pub mod spec;
mod stall_watch;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::http::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::clock::{instant_to_us, now_us, us_to_instant};
use crate::error::CoreError;

use dispatch::Releases;
use feed::Feed;
pub use panics::message as panic_message;
pub use record::RequestRecord;
use request::RequestContext;
use schedule::Schedule;
pub use spec::{Arrival, LoadMode, PreparedRequest, RunSpec, SessionMode, Share};

/// Delay between `start` and the first scheduled send, so the first deadline
/// is not already late when the dispatcher thread comes up.
const START_LEAD: Duration = Duration::from_millis(20);

/// Live counters for a progress display.
#[derive(Debug)]
pub struct Progress {
    pub scheduled: AtomicU64,
    pub sent: AtomicU64,
    pub finished: AtomicU64,
    pub failed: AtomicU64,
    pub output_tokens: AtomicU64,
    /// The scheduling the point's pacing thread got (none: it has none, or
    /// it never started).
    pub pacer: priority::PolicyCell,
    /// How late the pacing thread's sleeps ended, once it is over: the
    /// largest overshoot and the 99th percentile's bucket edge, in µs
    /// (`u64::MAX`: not yet, or it never slept). A real-time pacer held up by
    /// milliseconds was held up by the machine (`checks_load.client_saturated`).
    pub pacer_late_max_us: AtomicU64,
    pub pacer_late_p99_us: AtomicU64,
    /// When the pacing thread was held up (`pacing::WakeStats::held`), as
    /// wall-clock µs spans (the rows' `scheduled_us` clock), and how many
    /// more there were than it keeps; set once it is over.
    pub pacer_held: HeldSpans,
    /// When a CPU the engine may use was taken from it while the point ran
    /// (`stall_watch`: open loop under a real-time pacer only), in the same
    /// form as `pacer_held`, every CPU's spans in one list; set once it is over.
    pub cpu_held: HeldSpans,
    /// Whether the CPU watches ran (`stall_watch::StallWatch::start`).
    pub cpu_watched: AtomicBool,
}

/// Spans in which a thread or a CPU was held up, as (planned, actual)
/// wall-clock µs (the rows' `scheduled_us` clock), and how many more there
/// were than were kept: written once by the thread that saw them, read once
/// the point is over.
#[derive(Debug, Default)]
pub struct HeldSpans(Mutex<(Vec<(i64, i64)>, u64)>);

impl HeldSpans {
    pub fn set(&self, spans: &[(Instant, Instant)], dropped: u64) {
        let spans = spans
            .iter()
            .map(|&(planned, ended)| (instant_to_us(planned), instant_to_us(ended)))
            .collect();
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = (spans, dropped);
    }

    pub fn get(&self) -> (Vec<(i64, i64)>, u64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            scheduled: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            pacer: priority::PolicyCell::new(),
            pacer_late_max_us: AtomicU64::new(u64::MAX),
            pacer_late_p99_us: AtomicU64::new(u64::MAX),
            pacer_held: HeldSpans::default(),
            cpu_held: HeldSpans::default(),
            cpu_watched: AtomicBool::new(false),
        }
    }
}

impl Progress {
    /// The pacing thread's wake-up record (`pacer_late_*`): (max, p99) µs.
    pub fn pacer_late_us(&self) -> Option<(u64, u64)> {
        let (max, p99) = (
            self.pacer_late_max_us.load(Ordering::Relaxed),
            self.pacer_late_p99_us.load(Ordering::Relaxed),
        );
        (max != u64::MAX).then_some((max, p99))
    }

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
    feed: Arc<Feed>,
    /// Dependent turns waiting for their moment (the pacing thread's).
    releases: Releases,
    warmup: u64,
    permits: Option<Semaphore>,
    progress: Arc<Progress>,
    /// The point's start plus its duration: nothing is sent from then on.
    end_at: Option<Instant>,
    // Each task holds the sender through its `Arc<Shared>`: the channel closes
    // exactly when the last request has reported.
    results: mpsc::UnboundedSender<RequestRecord>,
}

/// A running (or finished) point. Dropping it cancels what is in flight.
pub struct EngineRun {
    results: mpsc::UnboundedReceiver<RequestRecord>,
    progress: Arc<Progress>,
    cancel: CancellationToken,
    feed: Arc<Feed>,
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
        self.feed.stop();
    }

    /// The point's requests, for feeding it ([`start_streamed`]).
    pub fn feed_handle(&self) -> Arc<Feed> {
        self.feed.clone()
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

/// Starts one point on `runtime` with all its requests (looped over when
/// `num_requests` asks for more). Returns at once; drain the results with
/// [`EngineRun::next_records`].
pub fn start(
    spec: RunSpec,
    requests: Vec<PreparedRequest>,
    runtime: &Handle,
) -> Result<EngineRun, CoreError> {
    let (schedule, duration, uri) = checked(&spec, &requests)?;
    let feed = Feed::whole(
        requests,
        spec.sessions,
        spec.num_requests,
        schedule,
        duration,
        spec.share,
    )?;
    launch(spec, feed, uri, runtime)
}

/// Starts one point whose requests are fed as the trace is read: `first`
/// now, more through [`EngineRun::feed_handle`] while it
/// [wants more](Feed::wants_more), then [`Feed::end`]. Sends `num_requests`
/// at most.
pub fn start_streamed(
    spec: RunSpec,
    first: Vec<PreparedRequest>,
    runtime: &Handle,
) -> Result<EngineRun, CoreError> {
    let (schedule, duration, uri) = checked(&spec, &first)?;
    let feed = Feed::streamed(
        spec.sessions,
        spec.num_requests,
        schedule,
        duration,
        spec.share,
    );
    feed.push(first)?;
    launch(spec, feed, uri, runtime)
}

/// The spec checked, with its schedule, its duration and where its (first)
/// requests go.
fn checked(
    spec: &RunSpec,
    requests: &[PreparedRequest],
) -> Result<(Option<Schedule>, Option<Duration>, ::http::Uri), CoreError> {
    spec.validate()?;
    let first = requests
        .first()
        .ok_or_else(|| CoreError::config("trace", "no requests to send"))?;
    Ok((
        Schedule::open_loop(spec.load, spec.seed),
        spec.duration_s.map(Duration::from_secs_f64),
        first.uri.clone(),
    ))
}

/// Starts the point: its pacing thread now, then (on `runtime`) its
/// connections, clock and workers.
fn launch(
    spec: RunSpec,
    feed: Feed,
    uri: ::http::Uri,
    runtime: &Handle,
) -> Result<EngineRun, CoreError> {
    let headers = header_map(&spec.headers)?;
    let preconnections = spec.preconnections()?;
    let (tx, rx) = mpsc::unbounded_channel();
    let run = EngineRun {
        results: rx,
        progress: Arc::new(Progress::default()),
        cancel: CancellationToken::new(),
        feed: Arc::new(feed),
    };
    let (concurrency, open_loop) = match spec.load {
        LoadMode::Concurrency { concurrency } => (concurrency, false),
        _ => (
            spec.max_concurrency.unwrap_or(spec::OPEN_LOOP_MAX_IDLE),
            true,
        ),
    };
    // The pacing thread starts open-loop units and releases dependent turns.
    // It starts now (so a failure to start it is `start`'s error) and waits
    // for the connections to be open.
    let pacer = if open_loop || spec.sessions == SessionMode::Dependent {
        Some(spawn_pacer(open_loop, runtime)?)
    } else {
        None
    };
    let plan = Launch {
        start_at: spec.start_at_us.map(us_to_instant),
        uri,
        preconnections,
        cancel: run.cancel.clone(),
        max_idle: concurrency,
        pacer,
        workers: (!open_loop).then_some(concurrency),
        duration: spec.duration_s.map(Duration::from_secs_f64),
        runtime: runtime.clone(),
    };
    let make_shared = shared_maker(spec, headers, open_loop, &run, tx);
    runtime.spawn(connect_then_start(make_shared, plan));
    Ok(run)
}

/// What builds the point's shared state once its connections are open (the
/// client and the start instant come then).
fn shared_maker(
    spec: RunSpec,
    headers: HeaderMap,
    open_loop: bool,
    run: &EngineRun,
    results: mpsc::UnboundedSender<RequestRecord>,
) -> impl FnOnce(http::HttpClient, Instant) -> Shared {
    let (cancel, progress, feed) = (run.cancel.clone(), run.progress.clone(), run.feed.clone());
    let secrets = secret_values(&headers);
    let duration = spec.duration_s.map(Duration::from_secs_f64);
    move |client: http::HttpClient, start_at: Instant| Shared {
        ctx: RequestContext {
            client,
            secrets,
            headers,
            timeout: spec.timeout_s.map(Duration::from_secs_f64),
            stall_timeout: spec.stall_timeout_s.map(Duration::from_secs_f64),
            retries: spec.retries,
            cancel,
            server_stamps: spec.server_stamps,
            keep_answer: spec.live_history && spec.sessions == SessionMode::Dependent,
            chunk_text: spec.chunk_text,
        },
        releases: Releases::new(feed.bell.clone()),
        feed,
        warmup: spec.warmup,
        permits: if open_loop {
            spec.max_concurrency.map(Semaphore::new)
        } else {
            None
        },
        progress,
        end_at: duration.map(|d| start_at + d),
        results,
    }
}

/// The pacing thread (open-loop starts, dependent releases), waiting for
/// the shared state and the start instant.
fn spawn_pacer(open_loop: bool, runtime: &Handle) -> Result<PacerStart, CoreError> {
    let (go, ready) = std::sync::mpsc::sync_channel::<(Arc<Shared>, Instant)>(1);
    let runtime = runtime.clone();
    std::thread::Builder::new()
        .name("specreplay-dispatch".into())
        .spawn(move || {
            if let Ok((shared, start_at)) = ready.recv() {
                dispatch::pace(shared, open_loop, start_at, runtime);
            }
        })
        .map_err(|e| CoreError::io("could not start the dispatcher thread", e))?;
    Ok(go)
}

/// Hands the waiting pacing thread its shared state and start instant.
type PacerStart = std::sync::mpsc::SyncSender<(Arc<Shared>, Instant)>;

/// What `connect_then_start` needs besides the shared state.
struct Launch {
    /// The instant the clock starts (`RunSpec::start_at_us`), if given.
    start_at: Option<Instant>,
    /// The origin to preconnect to (every request of a point goes there).
    uri: ::http::Uri,
    preconnections: usize,
    cancel: CancellationToken,
    max_idle: usize,
    /// The waiting pacing thread, if the point has one.
    pacer: Option<PacerStart>,
    /// Closed loop: how many workers (users).
    workers: Option<usize>,
    duration: Option<Duration>,
    runtime: Handle,
}

/// Opens the connections (when asked), then starts the clock, the pacing
/// thread and the workers. The connector hands the opened connections out
/// before it opens any new one, so the first requests are the ones that use
/// them.
async fn connect_then_start(
    make_shared: impl FnOnce(http::HttpClient, Instant) -> Shared,
    plan: Launch,
) {
    let Launch {
        start_at,
        uri,
        preconnections,
        cancel,
        max_idle,
        pacer,
        workers,
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
    let start_at = match start_at {
        Some(at) => at.max(Instant::now()),
        None => Instant::now() + START_LEAD,
    };
    let shared = Arc::new(make_shared(
        http::client_over(connector, max_idle, h2),
        start_at,
    ));
    shared.feed.set_start(start_at);
    if let Some(go) = pacer {
        // The thread is waiting; if it is gone there is nobody to pace.
        let _ = go.send((shared.clone(), start_at));
    }
    for _ in 0..workers.unwrap_or(0) {
        runtime.spawn(closed_loop_worker(shared.clone(), start_at, duration));
    }
}

/// Closed loop: a worker (a user) starts its next unit as soon as the
/// previous one is over; a session's turns run in turn within it.
async fn closed_loop_worker(shared: Arc<Shared>, start_at: Instant, duration: Option<Duration>) {
    tokio::time::sleep_until(start_at.into()).await;
    loop {
        if shared.ctx.cancel.is_cancelled() || duration.is_some_and(|d| start_at.elapsed() >= d) {
            shared.feed.stop();
            break;
        }
        let unit = tokio::select! {
            unit = shared.feed.next() => unit,
            _ = shared.ctx.cancel.cancelled() => None,
        };
        let Some(unit) = unit else {
            break;
        };
        session::run_unit(shared.clone(), unit, now_us()).await;
    }
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
