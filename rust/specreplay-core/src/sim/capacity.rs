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
    /// fraction of the one-sequence step. With `batch_step_factors` it is
    /// only the growth beyond the table's last size.
    pub batch_step_cost: f64,
    /// The decode step of a batch of 1, 2, … sequences as a multiple of the
    /// one-sequence step, measured per batch size (a real server's step is
    /// not linear in the batch: llama.cpp on one CPU thread takes 2.1× the
    /// one-sequence step for two and 3× for four). Between two sizes the
    /// step is interpolated; beyond the last it grows by `batch_step_cost`
    /// per sequence. Empty: the linear formula alone.
    pub batch_step_factors: Vec<f64>,
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
            batch_step_factors: Vec::new(),
            prefix_caching: true,
            max_num_batched_tokens: 0,
        }
    }
}

impl Capacity {
    /// Duration of a decode step with `decoding` sequences in the batch, µs:
    /// `step_us × step_factor(decoding)`; 0 with none.
    pub fn decode_step_us(&self, step_us: u64, decoding: usize) -> u64 {
        if decoding == 0 {
            return 0;
        }
        (step_us as f64 * self.step_factor(decoding as f64)).round() as u64
    }

    /// The decode step of `decoding` (≥ 1, may be fractional: an average
    /// batch) sequences as a multiple of the one-sequence step: the table
    /// `batch_step_factors` interpolated linearly, extended beyond its last
    /// size by `batch_step_cost` per sequence; without a table
    /// `1 + batch_step_cost × (decoding − 1)`.
    pub fn step_factor(&self, decoding: f64) -> f64 {
        let d = decoding.max(1.0);
        let table = &self.batch_step_factors;
        let Some(&last) = table.last() else {
            return 1.0 + self.batch_step_cost * (d - 1.0);
        };
        let top = table.len() as f64;
        if d >= top {
            return last + self.batch_step_cost * (d - top);
        }
        let i = d.floor() as usize; // sizes i and i + 1 are table[i - 1] and table[i]
        let frac = d - i as f64;
        table[i - 1] + frac * (table[i] - table[i - 1])
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

    pub(crate) fn validate(&self) -> Result<(), CoreError> {
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
        if self.batch_step_factors.len() > MAX_STEP_FACTORS {
            return Err(CoreError::config(
                "capacity.batch_step_factors",
                format!("at most {MAX_STEP_FACTORS} batch sizes"),
            ));
        }
        for (i, f) in self.batch_step_factors.iter().enumerate() {
            if !f.is_finite() || !(0.0..=10_000.0).contains(f) || *f == 0.0 {
                return Err(CoreError::config(
                    format!("capacity.batch_step_factors[{i}]"),
                    format!(
                        "must be a number in (0, 10000] (batch size {}), got {f}",
                        i + 1
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Most batch sizes `capacity.batch_step_factors` lists.
pub const MAX_STEP_FACTORS: usize = 4096;

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

    #[test]
    fn a_step_table_is_interpolated_and_extended_by_the_linear_cost() {
        let cap = Capacity {
            batch_step_cost: 0.25,
            batch_step_factors: vec![1.0, 2.2, 3.0],
            ..Capacity::default()
        };
        assert_eq!(cap.decode_step_us(10_000, 0), 0);
        assert_eq!(cap.decode_step_us(10_000, 1), 10_000);
        assert_eq!(cap.decode_step_us(10_000, 2), 22_000);
        assert_eq!(cap.decode_step_us(10_000, 3), 30_000);
        // Beyond the table: its last size plus batch_step_cost per sequence.
        assert_eq!(cap.decode_step_us(10_000, 5), 35_000);
        assert!((cap.step_factor(1.5) - 1.6).abs() < 1e-12);
        assert!((cap.step_factor(0.5) - 1.0).abs() < 1e-12);
        let linear = Capacity {
            batch_step_cost: 0.25,
            ..Capacity::default()
        };
        assert!((linear.step_factor(3.0) - 1.5).abs() < 1e-12);
        let bad = Capacity {
            batch_step_factors: vec![1.0, f64::NAN],
            ..Capacity::default()
        };
        let err = bad.validate().unwrap_err().to_string();
        assert!(err.contains("capacity.batch_step_factors[1]"), "{err}");
    }
}
