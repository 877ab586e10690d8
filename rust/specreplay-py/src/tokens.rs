//! `reconcile_chunk_tokens`: a tokenizer's per-chunk counts made to add up
//! to the server's, by the engine's own rule (`engine::apportion`), on
//! columns: no Python object per chunk crosses.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use specreplay_core::engine::apportion::reconcile_batch;

use crate::arrow::{import_batch, ArrowBatch};

/// `batch`: one row per request with `weights` (list<int64>), `chunk_channel`
/// (list<int8>), `output_tokens` and `reasoning_tokens` (int64, null: no
/// split from the server). Returns `chunk_tokens` (list<int32>) and
/// `reasoning_tokens` (int64), row for row.
#[pyfunction]
pub fn reconcile_chunk_tokens(py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<ArrowBatch> {
    let batch = import_batch(batch, "chunk counts")?;
    let out = py
        .detach(|| reconcile_batch(&batch))
        .map_err(|e| PyValueError::new_err(format!("chunk counts: {e}")))?;
    Ok(ArrowBatch::new(out))
}
