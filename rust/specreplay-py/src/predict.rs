//! `predict_point`: one sweep point predicted on a virtual clock from a
//! calibrated server model (`specreplay_core::predict`), handed back as the
//! record batches a real point's engine hands over, so the Python layer
//! writes, summarises and compares it as any run.

use pyo3::prelude::*;
use specreplay_core::engine::batch::{to_record_batch_with, Extras};
use specreplay_core::engine::request_columns::requests_from_batch;
use specreplay_core::engine::RunSpec;
use specreplay_core::predict::{self, ServerModel};

use crate::arrow::{import_batch, ArrowBatch};
use crate::config::from_mapping;
use crate::errors::Error;

/// What the prediction's server went through (to compare with what the
/// calibration saw).
#[pyclass(module = "specreplay._core", frozen, get_all)]
pub struct PredictStats {
    peak_running: usize,
    peak_waiting: usize,
    peak_kv_tokens: u64,
    iterations: u64,
    span_us: i64,
}

/// Rows per batch handed back.
const BATCH_ROWS: usize = 4096;

/// Predicts the point `spec` (a `RunSpec` mapping) of `requests` (record
/// batches with `schema.REQUEST_COLUMNS`, `laps[i]` the pass over the trace
/// batch i belongs to) under `model` (a `ServerModel` mapping). Timestamps
/// start at `start_us`. Returns the engine's batches and the stats.
#[pyfunction]
pub fn predict_point(
    py: Python<'_>,
    model: &Bound<'_, PyAny>,
    spec: &Bound<'_, PyAny>,
    requests: Vec<Bound<'_, PyAny>>,
    laps: Vec<u64>,
    start_us: i64,
) -> PyResult<(Vec<ArrowBatch>, PredictStats)> {
    let model: ServerModel = from_mapping("model", model, ServerModel::validate)?;
    let spec: RunSpec = from_mapping("run spec", spec, RunSpec::validate)?;
    let batches = requests
        .iter()
        .map(|b| import_batch(b, "requests"))
        .collect::<PyResult<Vec<_>>>()?;
    let out = py.detach(|| {
        let mut prepared = Vec::new();
        for (batch, &lap) in batches.iter().zip(laps.iter().chain(std::iter::repeat(&0))) {
            prepared.extend(requests_from_batch(batch)?.into_iter().map(|r| (r, lap)));
        }
        let (records, stats) = predict::predict_point(&model, &spec, &prepared, start_us)?;
        let batches = records
            .chunks(BATCH_ROWS)
            .map(|chunk| {
                to_record_batch_with(chunk, Extras::default())
                    .map(ArrowBatch::new)
                    .map_err(|e| specreplay_core::CoreError::config("results", e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok::<_, specreplay_core::CoreError>((batches, stats))
    });
    let (batches, stats) = out.map_err(Error::from)?;
    Ok((
        batches,
        PredictStats {
            peak_running: stats.peak_running,
            peak_waiting: stats.peak_waiting,
            peak_kv_tokens: stats.peak_kv_tokens,
            iterations: stats.iterations,
            span_us: stats.span_us,
        },
    ))
}

/// The prompt length of each request of `requests` (a batch with
/// `schema.REQUEST_COLUMNS`) as the simulator and the prediction count it:
/// one token per word, four per chat message (docs/simulator.md).
#[pyfunction]
pub fn sim_prompt_tokens(py: Python<'_>, requests: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let batch = import_batch(requests, "requests")?;
    let out = py.detach(|| {
        requests_from_batch(&batch)?
            .iter()
            .map(|r| predict::parse_request(r).map(|p| p.prompt_tokens))
            .collect::<Result<Vec<u32>, _>>()
    });
    Ok(out.map_err(Error::from)?)
}
