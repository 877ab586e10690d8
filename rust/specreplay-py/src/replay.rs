//! `start_point` and `EngineRun`: one sweep point running on the engine's
//! runtime. Python polls it for finished requests in batches and, when the
//! point is streamed, feeds it requests as it asks for them; the engine
//! never waits for Python.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use specreplay_core::engine::batch::{to_record_batch_with, Extras};
use specreplay_core::engine::feed::Feed;
use specreplay_core::engine::priority::{self, Policy};
use specreplay_core::engine::request_columns::requests_from_batch;
use specreplay_core::engine::{self, Progress, RunSpec};
use tokio_util::sync::CancellationToken;

use crate::arrow::{import_batch, ArrowBatch};
use crate::config::from_mapping;
use crate::errors::{engine_error, Error};
use crate::runtime::RUNTIME;

#[pyclass(module = "specreplay._core", frozen)]
pub struct EngineRun {
    inner: Mutex<Option<engine::EngineRun>>,
    // Outside the mutex: `next_batch` holds it while it waits.
    progress: Arc<Progress>,
    cancel: CancellationToken,
    feed: Arc<Feed>,
    /// `RunSpec::server_stamps` and `chunk_text`: the columns batches carry
    /// beyond the results file's.
    extras: Extras,
}

/// The engine's live counters at one moment.
#[pyclass(module = "specreplay._core", frozen, get_all)]
pub struct EngineProgress {
    /// Requests whose send time has come.
    scheduled: u64,
    /// Requests sent (or being sent).
    sent: u64,
    /// Requests over, successful or not.
    finished: u64,
    /// Requests over with an error.
    failed: u64,
    /// Output tokens of the finished requests.
    output_tokens: u64,
}

/// The scheduling the point's engine threads actually got (not what was
/// asked): `SCHED_FIFO:<priority>` or `SCHED_OTHER` (engine/priority.rs).
#[pyclass(module = "specreplay._core", frozen, get_all)]
pub struct EngineScheduling {
    /// The pacing thread's; None when the point has none (a closed loop
    /// without dependent turns) or it never started.
    pacer: Option<String>,
    /// The weakest any engine worker thread got; None before any started.
    workers: Option<String>,
    /// Whether real-time scheduling was asked for (`priority::wanted`).
    realtime_asked: bool,
    /// The pacing thread's largest wake-up overshoot, µs (how much later
    /// than asked one of its sleeps ended); None: no pacer, or it never slept.
    pacer_late_max_us: Option<u64>,
    /// The upper edge (µs) of the log2 bucket holding its 99th percentile.
    pacer_late_p99_us: Option<u64>,
    /// Each of its waits that ended 250 µs or more later than planned, as
    /// (planned end, actual end) in wall-clock µs, the first 1,024.
    pacer_held_us: Vec<(i64, i64)>,
    /// How many more there were.
    pacer_held_dropped: u64,
    /// Whether every CPU was watched for the machine's stalls (an open loop
    /// with a real-time pacer, where each CPU's watch could run real-time).
    cpu_watched: bool,
    /// The spans a CPU was taken from the engine (the hypervisor did not run
    /// the vCPU), as (planned wake, actual wake) in wall-clock µs, every
    /// CPU's in one list, earliest first, the first 1,024.
    cpu_held_us: Vec<(i64, i64)>,
    /// How many more there were.
    cpu_held_dropped: u64,
}

/// Starts a point: `spec` is the `RunSpec` mapping, `requests` a record
/// batch with the columns of `schema.REQUEST_COLUMNS`, one row per request:
/// all of them, or with `feed` the first (more through `EngineRun.feed`).
#[pyfunction]
#[pyo3(signature = (spec, requests, feed = false))]
pub fn start_point(
    py: Python<'_>,
    spec: &Bound<'_, PyAny>,
    requests: &Bound<'_, PyAny>,
    feed: bool,
) -> PyResult<EngineRun> {
    let spec: RunSpec = from_mapping("run spec", spec, RunSpec::validate)?;
    let batch = import_batch(requests, "requests")?;
    let extras = Extras {
        server_stamps: spec.server_stamps,
        chunk_text: spec.chunk_text,
    };
    let runtime = RUNTIME.get()?;
    let run = py.detach(|| {
        let prepared = requests_from_batch(&batch)?;
        if feed {
            engine::start_streamed(spec, prepared, runtime.handle())
        } else {
            engine::start(spec, prepared, runtime.handle())
        }
    });
    let run = run.map_err(Error::from)?;
    Ok(EngineRun {
        extras,
        progress: run.progress_handle(),
        cancel: run.cancel_token(),
        feed: run.feed_handle(),
        inner: Mutex::new(Some(run)),
    })
}

#[pymethods]
impl EngineRun {
    /// The requests that finish within `wait_s` (up to `max_rows`) as a batch
    /// (maybe empty), or None once every request of the point has been returned.
    #[pyo3(signature = (max_rows = 4096, wait_s = 0.25))]
    fn next_batch(
        &self,
        py: Python<'_>,
        max_rows: usize,
        wait_s: f64,
    ) -> PyResult<Option<ArrowBatch>> {
        let wait = Duration::from_secs_f64(wait_s.max(0.0));
        // Started already: this run was started on it.
        let runtime = RUNTIME.get()?;
        let records = py.detach(|| {
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            match guard.as_mut() {
                Some(run) => runtime.block_on(run.next_records(max_rows.max(1), wait)),
                None => None,
            }
        });
        match records {
            Some(records) => {
                let batch = to_record_batch_with(&records, self.extras)
                    .map_err(|e| engine_error(format!("building a results batch: {e}")))?;
                Ok(Some(ArrowBatch::new(batch)))
            }
            None => Ok(None),
        }
    }

    /// The counters so far.
    fn progress(&self) -> EngineProgress {
        let p = self.progress.snapshot();
        EngineProgress {
            scheduled: p.scheduled,
            sent: p.sent,
            finished: p.finished,
            failed: p.failed,
            output_tokens: p.output_tokens,
        }
    }

    /// The scheduling its threads got (read once the point is over: the
    /// pacing thread records its own as it starts).
    fn scheduling(&self) -> EngineScheduling {
        let late = self.progress.pacer_late_us();
        let (pacer_held_us, pacer_held_dropped) = self.progress.pacer_held.get();
        let (cpu_held_us, cpu_held_dropped) = self.progress.cpu_held.get();
        EngineScheduling {
            pacer: self.progress.pacer.get().map(Policy::name),
            workers: priority::workers().map(Policy::name),
            realtime_asked: priority::wanted(),
            pacer_late_max_us: late.map(|(max, _)| max),
            pacer_late_p99_us: late.map(|(_, p99)| p99),
            pacer_held_us,
            pacer_held_dropped,
            cpu_watched: self.progress.cpu_watched.load(Ordering::Relaxed),
            cpu_held_us,
            cpu_held_dropped,
        }
    }

    /// Stops scheduling and cancels requests in flight; they still report rows.
    fn cancel(&self) {
        self.cancel.cancel();
        self.feed.stop();
    }

    /// More requests for a point started with `feed`, in order (a session's
    /// turns together, in one batch). Their prompts are synthesized here,
    /// with the GIL released.
    fn feed(&self, py: Python<'_>, requests: &Bound<'_, PyAny>) -> PyResult<()> {
        let batch = import_batch(requests, "requests")?;
        let feed = &self.feed;
        py.detach(|| feed.push(requests_from_batch(&batch)?))
            .map_err(Error::from)?;
        Ok(())
    }

    /// Whether the point wants more requests fed now (its look-ahead is not
    /// full, and it has not ended).
    fn wants_more(&self) -> bool {
        self.feed.wants_more()
    }

    /// The trace's next pass begins: what is fed from now on is its next lap.
    fn end_lap(&self) {
        self.feed.end_lap();
    }

    /// Nothing more will be fed.
    fn end_feed(&self) {
        self.feed.end();
    }
}
