//! `Filler`: prompt text synthesized from block ids
//! (`specreplay_core::prompt`), for the importers (with a tokenizer's words),
//! `specreplay synth`, and replay's request building.

use pyo3::prelude::*;
use specreplay_core::prompt::{self, PromptBlocks};

use crate::errors::Error;

/// A filler vocabulary: the built-in one, or a tokenizer's single-token words.
#[pyclass(frozen, module = "specreplay._core")]
pub struct Filler {
    inner: prompt::Filler,
}

#[pymethods]
impl Filler {
    #[new]
    #[pyo3(signature = (words=None))]
    fn new(words: Option<Vec<String>>) -> PyResult<Self> {
        let inner = match words {
            None => prompt::Filler::builtin().clone(),
            Some(words) => prompt::Filler::new(words).map_err(Error::from)?,
        };
        Ok(Filler { inner })
    }

    /// Longest prompt synthesized, in tokens.
    #[classattr]
    const MAX_TOKENS: u64 = prompt::MAX_TOKENS;

    /// The vocabulary, in the order the synthesis indexes it.
    #[getter]
    fn words(&self) -> Vec<String> {
        self.inner.words().to_vec()
    }

    /// The text of a prompt of `tokens` words made of the blocks `hash_ids`
    /// (`block_size` words each, the last one cut short). Raises
    /// `ConfigError` when the blocks do not cover the prompt exactly.
    #[pyo3(signature = (tokens, block_size, hash_ids, seed=0))]
    fn text(
        &self,
        py: Python<'_>,
        tokens: u64,
        block_size: u64,
        hash_ids: Vec<u64>,
        seed: u64,
    ) -> PyResult<String> {
        let blocks = PromptBlocks {
            tokens,
            block_size,
            hash_ids: &hash_ids,
            seed,
        };
        Ok(py
            .detach(|| self.inner.text(&blocks))
            .map_err(Error::from)?)
    }
}
