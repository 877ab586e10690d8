//! `EngineRun`: one sweep point running on the engine's runtime. Python polls
//! it for finished requests in batches; the engine never waits for Python.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use specreplay_core::engine::batch::{to_record_batch, to_record_batch_with_server_stamps};
use specreplay_core::engine::{self, PreparedRequest, Progress, RunSpec};
use tokio_util::sync::CancellationToken;

use crate::arrow_export::ArrowBatch;
use crate::errors::{engine_error, Error};
use crate::runtime::RUNTIME;

/// (trace_id, api, url, body, arrival_s) — one request as the Python layer shaped it.
type RequestTuple = (String, String, String, Vec<u8>, f64);

#[pyclass(module = "specreplay._core", frozen)]
pub struct EngineRun {
    inner: Mutex<Option<engine::EngineRun>>,
    // Outside the mutex: `next_batch` holds it while it waits.
    progress: Arc<Progress>,
    cancel: CancellationToken,
    /// `RunSpec::server_stamps`: batches carry `chunk_server_ts_us` too.
    server_stamps: bool,
}

/// Starts a point: `spec_json` is a `RunSpec` (see rust/specreplay-core/src/engine/spec.rs).
#[pyfunction]
pub fn start_point(spec_json: &str, requests: Vec<RequestTuple>) -> PyResult<EngineRun> {
    let spec = RunSpec::from_json(spec_json).map_err(Error::from)?;
    let prepared = requests
        .into_iter()
        .map(|(id, api, url, body, arrival)| PreparedRequest::new(id, &api, &url, body, arrival))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::from)?;
    let server_stamps = spec.server_stamps;
    let run = engine::start(spec, prepared, RUNTIME.handle()).map_err(Error::from)?;
    Ok(EngineRun {
        server_stamps,
        progress: run.progress_handle(),
        cancel: run.cancel_token(),
        inner: Mutex::new(Some(run)),
    })
}

#[pymethods]
impl EngineRun {
    /// Waits up to `wait_s` for finished requests; returns a batch (maybe
    /// empty), or None once every request of the point has been returned.
    #[pyo3(signature = (max_rows = 4096, wait_s = 0.25))]
    fn next_batch(
        &self,
        py: Python<'_>,
        max_rows: usize,
        wait_s: f64,
    ) -> PyResult<Option<ArrowBatch>> {
        let wait = Duration::from_secs_f64(wait_s.max(0.0));
        let records = py.detach(|| {
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            match guard.as_mut() {
                Some(run) => RUNTIME.block_on(run.next_records(max_rows.max(1), wait)),
                None => None,
            }
        });
        match records {
            Some(records) => {
                let batch = if self.server_stamps {
                    to_record_batch_with_server_stamps(&records)
                } else {
                    to_record_batch(&records)
                };
                let batch =
                    batch.map_err(|e| engine_error(format!("building a results batch: {e}")))?;
                Ok(Some(ArrowBatch::new(batch)))
            }
            None => Ok(None),
        }
    }

    /// (scheduled, sent, finished, failed, output_tokens) so far.
    fn progress(&self) -> (u64, u64, u64, u64, u64) {
        let p = self.progress.snapshot();
        (p.scheduled, p.sent, p.finished, p.failed, p.output_tokens)
    }

    /// Stops scheduling and cancels requests in flight; they still report rows.
    fn cancel(&self) {
        self.cancel.cancel();
    }
}
