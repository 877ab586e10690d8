//! The capacity model's configuration (`capacity = {...}`) and the formulas
//! it implies: the decode step of a batch, and the knee, the highest request
//! rate a fixed mix can be served at (see "Capacity model" in
//! docs/simulator.md). The scheduler that applies them is `engine`.

use serde::Deserialize;

use crate::error::CoreError;

/// The capacity model's limits and costs, vLLM's continuous batching in
/// small (see "Capacity model" in docs/simulator.md).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Capacity {
    /// Most sequences in one batch (vLLM's `--max-num-seqs`); the rest wait.
    pub max_num_seqs: u32,
    /// KV-cache budget in tokens; each running request holds its prompt plus
    /// its whole answer. 0: no budget.
    pub kv_cache_tokens: u64,
    /// Extra decode-step time per running sequence beyond the first, as a
    /// fraction of the one-sequence step.
    pub batch_step_cost: f64,
    /// Reuse the prompt blocks of earlier requests (vLLM's automatic prefix
    /// caching, on by default there too): a cached prefix costs no prefill.
    pub prefix_caching: bool,
    /// Tokens one iteration computes, decode and prompt together (vLLM's
    /// `--max-num-batched-tokens`, llama.cpp's `n_batch`): a longer prompt
    /// is prefilled in chunks over several iterations, interleaved with the
    /// decode steps. 0: no budget, a prompt is prefilled in its admitting
    /// iteration (the behaviour before this key existed).
    pub max_num_batched_tokens: u32,
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity {
            max_num_seqs: 256,
            kv_cache_tokens: 0,
            batch_step_cost: 0.01,
            prefix_caching: true,
            max_num_batched_tokens: 0,
        }
    }
}

impl Capacity {
    /// Duration of a decode step with `decoding` sequences in the batch, µs:
    /// `step_us × (1 + batch_step_cost × (decoding − 1))`; 0 with none.
    pub fn decode_step_us(&self, step_us: u64, decoding: usize) -> u64 {
        if decoding == 0 {
            return 0;
        }
        let extra = self.batch_step_cost * (decoding - 1) as f64;
        (step_us as f64 * (1.0 + extra)).round() as u64
    }

    /// The prompt tokens each prefilling request computes this iteration,
    /// in batch order, given what each has left and `decoding` sequences
    /// taking their step: decode tokens are scheduled first (as vLLM and
    /// llama.cpp's server both do), the rest of the token budget goes to
    /// prompts first come, first served. At least one prompt token is
    /// computed per iteration, so a budget smaller than the batch still
    /// advances. Without a budget every prompt is computed whole.
    pub fn prefill_chunks(&self, decoding: usize, left: &[u32]) -> Vec<u32> {
        if self.max_num_batched_tokens == 0 {
            return left.to_vec();
        }
        let budget = u64::from(self.max_num_batched_tokens);
        let mut room = budget.saturating_sub(decoding as u64).max(1);
        left.iter()
            .map(|&l| {
                let take = u64::from(l).min(room);
                room -= take;
                take as u32
            })
            .collect()
    }

    /// Whether the batch admits a request holding `kv` KV-cache tokens when
    /// `running` requests holding `kv_used` are in it: a slot free and room
    /// in the KV budget (the admission rule of `engine`, and of `predict`).
    pub fn admits(&self, running: usize, kv_used: u64, kv: u64) -> bool {
        running < self.max_num_seqs as usize
            && self.kv_budget().is_none_or(|budget| kv_used + kv <= budget)
    }

    /// The KV-cache budget, `None` when there is none.
    pub fn kv_budget(&self) -> Option<u64> {
        (self.kv_cache_tokens > 0).then_some(self.kv_cache_tokens)
    }

    /// Tokens the prefix cache keeps: the KV budget (cached blocks live in
    /// the cache's free space), else 16 Mi tokens.
    pub fn prefix_cache_tokens(&self) -> u64 {
        self.kv_budget().unwrap_or(16 << 20)
    }

    pub(super) fn validate(&self) -> Result<(), CoreError> {
        if !(1..=MAX_NUM_SEQS).contains(&self.max_num_seqs) {
            return Err(CoreError::config(
                "capacity.max_num_seqs",
                format!("must be in [1, {MAX_NUM_SEQS}], got {}", self.max_num_seqs),
            ));
        }
        let c = self.batch_step_cost;
        if !c.is_finite() || !(0.0..=100.0).contains(&c) {
            return Err(CoreError::config(
                "capacity.batch_step_cost",
                format!("must be a number in [0, 100], got {c}"),
            ));
        }
        Ok(())
    }
}

/// Largest accepted `capacity.max_num_seqs`.
pub const MAX_NUM_SEQS: u32 = 1_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_budget_chunks_prompts_after_the_decode_tokens() {
        let none = Capacity::default();
        assert_eq!(none.prefill_chunks(3, &[500, 700]), vec![500, 700]);
        let cap = Capacity {
            max_num_batched_tokens: 512,
            ..Capacity::default()
        };
        // 3 decode tokens first: 509 left for prompts, first come first served.
        assert_eq!(cap.prefill_chunks(3, &[500, 700]), vec![500, 9]);
        assert_eq!(cap.prefill_chunks(0, &[100, 700, 50]), vec![100, 412, 0]);
        // A batch that fills the budget still advances the head by one token.
        assert_eq!(cap.prefill_chunks(600, &[10, 10]), vec![1, 0]);
    }
}
