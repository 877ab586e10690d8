//! `ServerModel`: what a prediction knows about the server, the values
//! `specreplay calibrate` fitted (docs/predict.md). The Python layer reads
//! `server.toml`, applies what-if overrides, and hands the plain values
//! here; a parameter the calibration could not measure arrives as `None`
//! and the prediction says what it assumed instead (`Assumption`).

use serde::Deserialize;

use crate::error::CoreError;
use crate::sim::capacity::{Capacity, MAX_NUM_SEQS};

/// The natural output lengths of one prompt class: paired samples of
/// reasoning and content tokens, drawn per request.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputClass {
    /// The request dialect this class describes (`chat`, `completions`, …).
    pub api: String,
    /// The class holds prompts of at most this many server tokens (a
    /// prompt-length bucket); `None`: every prompt of `api` (the fallback).
    #[serde(default)]
    pub max_prompt_tokens: Option<u32>,
    pub reasoning: Vec<u32>,
    pub content: Vec<u32>,
}

/// The server's costs and limits, µs and tokens.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerModel {
    /// Fixed time from arrival to the waiting queue (tokenising, the API server).
    pub frontend_us: f64,
    /// Spread of that time: each request's is drawn uniform in
    /// `frontend_us ± frontend_jitter_us / 2`. Requests that arrive together
    /// then reach an idle engine apart, as on a real server, instead of
    /// always sharing their prefill iteration.
    #[serde(default)]
    pub frontend_jitter_us: f64,
    /// An idle server starts one iteration for the requests sent together:
    /// with the first to reach it, it queues every request sent by then
    /// that is still in its frontend time (llama.cpp's loop, whose launch
    /// takes as long as a request takes to reach it), and a prompt found
    /// cached whole starts its iteration alone. `false`: the first arrival
    /// starts an iteration at once, those behind it wait for the next
    /// (vLLM's busy loop, the embedded simulator).
    #[serde(default = "yes")]
    pub co_launch: bool,
    /// With `co_launch`: the chance that a prompt found cached whole, sent
    /// with others to an idle server, is launched with them rather than
    /// alone (the others then prefilled in its first decode gap), whichever
    /// reached the server first. A race in llama.cpp's loop: the slot
    /// holding the prompt launches in 0.2 ms and the iteration may start
    /// before the requests sent in the same millisecond are queued; its
    /// odds differ by machine (one sitting saw the cached request alone in
    /// 5 parts of 9, another never in 5). `None`: not measured, the arrival
    /// order decides (alone when it reached the server first).
    #[serde(default)]
    pub cached_co_launch: Option<f64>,
    /// Prefill cost per computed prompt token.
    pub prefill_us_per_token: f64,
    /// Prefill cost per prompt token served from the prefix cache.
    #[serde(default)]
    pub prefill_us_per_cached_token: f64,
    /// The one-sequence decode step without speculation.
    pub step_us: f64,
    /// Extra step time per decoding sequence beyond the first, as a fraction
    /// of the one-sequence step (`Capacity::batch_step_cost`).
    pub batch_step_cost: f64,
    /// The step per batch size, 1, 2, …, as a multiple of `step_us`
    /// (`Capacity::batch_step_factors`); empty: the linear formula.
    #[serde(default)]
    pub batch_step_factors: Vec<f64>,
    /// Batch limit; `None`: unknown, predicted without one.
    #[serde(default)]
    pub max_num_seqs: Option<u32>,
    /// Tokens one iteration computes (chunked prefill,
    /// `Capacity::max_num_batched_tokens`); `None`: unknown, a prompt is
    /// prefilled whole in its admitting iteration.
    #[serde(default)]
    pub max_num_batched_tokens: Option<u32>,
    /// KV-cache budget, tokens; `None`: unknown or none.
    #[serde(default)]
    pub kv_cache_tokens: Option<u64>,
    /// Reuse cached prompt blocks (a cached prefix costs
    /// `prefill_us_per_cached_token` per token).
    #[serde(default)]
    pub prefix_caching: bool,
    /// Prompt tokens every request finds cached whatever its prompt, with
    /// prefix caching: llama.cpp's chat-template prefix (24 tokens for
    /// SmolLM2), left in its slot by the request before. A prompt's cached
    /// tokens are the prefix cache's hit or these, the larger.
    #[serde(default)]
    pub template_cached_tokens: u32,
    /// Server prompt tokens per token the simulator's rule counts (one per
    /// word, four per chat message): the tokenizer's ratio.
    #[serde(default = "one")]
    pub prompt_tokens_per_word: f64,
    /// Decode steps per delivered chunk (1: a chunk per step).
    #[serde(default = "one")]
    pub steps_per_chunk: f64,
    /// Conditional acceptance of each draft position (empty: no speculation).
    #[serde(default)]
    pub spec_acceptance: Vec<f64>,
    /// Extra step cost of each draft token, as a fraction of `step_us`.
    #[serde(default)]
    pub spec_step_cost: f64,
    /// Natural output lengths by prompt class.
    #[serde(default)]
    pub output: Vec<OutputClass>,
    /// Spread of the server's speed around the fitted costs: each
    /// iteration's cost is multiplied by `exp(speed_spread × z)`, z standard
    /// normal, drawn anew every `speed_window_us` of virtual time (a shared
    /// machine, a GPU's clocks: every request in the batch feels it). 0: none.
    #[serde(default)]
    pub speed_spread: f64,
    /// How long one speed draw lasts, µs.
    #[serde(default)]
    pub speed_window_us: f64,
    /// The replay's usage probe (the first request sent once with
    /// `max_tokens` 1 before the run) warms the prefix cache with the first
    /// request's prompt, as it does on a real server.
    #[serde(default)]
    pub usage_probe: bool,
    /// Seed of the per-request draws (output lengths, acceptance runs).
    #[serde(default)]
    pub seed: u64,
}

fn one() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

impl ServerModel {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), CoreError> {
        for (field, v) in [
            ("frontend_us", self.frontend_us),
            ("frontend_jitter_us", self.frontend_jitter_us),
            ("prefill_us_per_token", self.prefill_us_per_token),
            (
                "prefill_us_per_cached_token",
                self.prefill_us_per_cached_token,
            ),
            ("step_us", self.step_us),
            ("batch_step_cost", self.batch_step_cost),
            ("spec_step_cost", self.spec_step_cost),
            ("speed_spread", self.speed_spread),
            ("speed_window_us", self.speed_window_us),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(CoreError::config(
                    format!("model.{field}"),
                    format!("must be a finite number >= 0, got {v}"),
                ));
            }
        }
        for (field, v) in [
            ("prompt_tokens_per_word", self.prompt_tokens_per_word),
            ("steps_per_chunk", self.steps_per_chunk),
        ] {
            if !v.is_finite() || v <= 0.0 {
                return Err(CoreError::config(
                    format!("model.{field}"),
                    format!("must be a finite number > 0, got {v}"),
                ));
            }
        }
        if self.step_us + self.prefill_us_per_token <= 0.0 {
            return Err(CoreError::config(
                "model.step_us",
                "step_us and prefill_us_per_token are both 0: time would never advance",
            ));
        }
        if let Some(n) = self.max_num_seqs {
            if !(1..=MAX_NUM_SEQS).contains(&n) {
                return Err(CoreError::config(
                    "model.max_num_seqs",
                    format!("must be in [1, {MAX_NUM_SEQS}], got {n}"),
                ));
            }
        }
        if self.max_num_batched_tokens == Some(0) {
            return Err(CoreError::config(
                "model.max_num_batched_tokens",
                "must be >= 1 (leave it out for no budget)",
            ));
        }
        self.capacity().validate().map_err(|e| match e {
            CoreError::Config { field, message } => {
                CoreError::config(field.replace("capacity.", "model."), message)
            }
            other => other,
        })?;
        if let Some(p) = self.cached_co_launch.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(CoreError::config(
                "model.cached_co_launch",
                format!("must be a probability in [0, 1], got {p}"),
            ));
        }
        if self.spec_acceptance.len() > 64 {
            return Err(CoreError::config(
                "model.spec_acceptance",
                "at most 64 draft positions",
            ));
        }
        for (i, a) in self.spec_acceptance.iter().enumerate() {
            if !(0.0..=1.0).contains(a) {
                return Err(CoreError::config(
                    format!("model.spec_acceptance[{i}]"),
                    format!("must be a probability in [0, 1], got {a}"),
                ));
            }
        }
        for (i, class) in self.output.iter().enumerate() {
            if class.reasoning.len() != class.content.len() || class.content.is_empty() {
                return Err(CoreError::config(
                    format!("model.output[{i}]"),
                    "reasoning and content must be paired samples, at least one",
                ));
            }
        }
        Ok(())
    }

    /// The simulator's capacity model with these limits: the prediction
    /// schedules with the same formulas as the simulated server.
    pub fn capacity(&self) -> Capacity {
        Capacity {
            max_num_seqs: self.max_num_seqs.unwrap_or(MAX_NUM_SEQS),
            kv_cache_tokens: self.kv_cache_tokens.unwrap_or(0),
            batch_step_cost: self.batch_step_cost,
            batch_step_factors: self.batch_step_factors.clone(),
            prefix_caching: self.prefix_caching,
            max_num_batched_tokens: self.max_num_batched_tokens.unwrap_or(0),
        }
    }

    /// The one-sequence decode step with the configured drafts, µs.
    pub fn decode_step_us(&self) -> u64 {
        let drafts = self.spec_acceptance.len() as f64;
        (self.step_us * (1.0 + self.spec_step_cost * drafts)).round() as u64
    }

    /// The output-length class of a prompt of `prompt_tokens` sent to
    /// `api`: its prompt-length bucket (the narrowest that holds it), else
    /// the API's class for every prompt; `None` if not calibrated.
    pub fn output_class(&self, api: &str, prompt_tokens: u32) -> Option<&OutputClass> {
        let of_api = || self.output.iter().filter(move |c| c.api == api);
        of_api()
            .filter(|c| c.max_prompt_tokens.is_some_and(|m| prompt_tokens <= m))
            .min_by_key(|c| c.max_prompt_tokens)
            .or_else(|| of_api().find(|c| c.max_prompt_tokens.is_none()))
    }
}
