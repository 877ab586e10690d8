//! `SimConfig`: what the simulated reasoning model looks like, with defaults
//! and a `validate()` whose errors name the offending key.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use super::capacity::Capacity;
use super::fault::FaultKind;
use super::request::MediaRule;
use crate::error::CoreError;

/// How reasoning tokens reach the client in a chat completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningField {
    /// `delta.reasoning_content` (vLLM before the rename, SGLang, DeepSeek).
    #[default]
    ReasoningContent,
    /// `delta.reasoning` (current vLLM, Ollama, OpenRouter).
    Reasoning,
    /// No reasoning parser: the reasoning is streamed as `content`, opened by
    /// `<think>` and closed by `</think>` glued to its first and last words.
    None,
}

impl ReasoningField {
    /// The JSON key of the reasoning text, or `None` when it goes to `content`.
    pub fn key(self) -> Option<&'static str> {
        match self {
            ReasoningField::ReasoningContent => Some("reasoning_content"),
            ReasoningField::Reasoning => Some("reasoning"),
            ReasoningField::None => None,
        }
    }
}

/// The simulated server's behaviour. Every key has a default, so `{}` is a
/// valid configuration; unknown keys are rejected.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Served model name (`/v1/models`, `model` of every response).
    pub model: String,
    /// Base seed; each request's lengths come from `seed` + a hash of its prompt.
    pub seed: u64,
    /// Fixed part of the time to first token, milliseconds.
    pub ttft_ms: f64,
    /// Prefill cost per prompt token, microseconds (added to `ttft_ms`).
    pub prefill_us_per_token: f64,
    /// Time of one decode step, milliseconds.
    pub tpot_ms: f64,
    /// Natural reasoning length, `[min, max]` tokens (inclusive, uniform).
    pub reasoning_tokens: [u32; 2],
    /// Natural answer length, `[min, max]` tokens (inclusive, uniform).
    pub content_tokens: [u32; 2],
    /// Where the reasoning text goes in chat deltas.
    pub reasoning_field: ReasoningField,
    /// Draft tokens proposed per decode step; 0 turns speculation off.
    pub spec_draft_len: u32,
    /// Probability that each draft token is accepted (the run stops at the first rejection).
    pub spec_acceptance: f64,
    /// Extra cost of each draft token, as a fraction of `tpot_ms`.
    pub spec_step_cost: f64,
    /// Add `"sim_sent_us"` (anchored clock, µs) to every streamed chunk.
    pub send_timestamps: bool,
    /// Context length: the default output budget is `max_model_len - prompt_tokens`.
    pub max_model_len: u32,
    /// The capacity model (continuous batching with a step cost that grows
    /// with the batch, a KV-cache budget and a FIFO waiting queue). Absent:
    /// every request runs on its own clock whatever else is in flight.
    pub capacity: Option<Capacity>,
    /// Reason before answering a fixed-length request too (`ignore_eos`, or
    /// `min_tokens` at least the budget). Off: such a request, which asks
    /// for a length rather than an answer (an imported trace's), gets only
    /// answer tokens.
    pub fixed_length_reasoning: bool,
    /// Fault injection: the fraction of generation requests that get each
    /// fault kind (each in `[0, 1]`, sum at most 1). Empty: no faults.
    pub faults: BTreeMap<FaultKind, f64>,
    /// Length of a stall (`stall_before_first_token`, `stall_between_tokens`), ms.
    pub fault_stall_ms: f64,
    /// Wait before the status line under `slow_headers`, ms.
    pub fault_slow_headers_ms: f64,
    /// `Retry-After` of an `http_429` answer, seconds.
    pub fault_retry_after_s: u64,
    /// Size of the `oversized_event` event (the whole `data: ...\n\n`), bytes.
    pub fault_oversized_bytes: u64,
    /// More served model names, each with its own speed (`[[sim.models]]`).
    /// Empty: any `model` a request names is answered as `model`.
    pub models: Vec<ModelSpec>,
    /// Image patch size in pixels (the vision encoder's patch).
    pub image_patch_px: u32,
    /// Patches merged per side into one token (2: 2×2 patches a token).
    pub image_merge: u32,
    /// The size an http(s) image URL counts as (it is never fetched), `[w, h]`.
    pub image_url_size: [u32; 2],
    /// Prompt tokens per second of audio.
    pub audio_tokens_per_s: f64,
    /// Prompt tokens of one video part.
    pub video_tokens: u32,
    /// The fraction of requests with `tools` (and `tool_choice` auto) that
    /// are answered with a tool call.
    pub tool_call_rate: f64,
    /// Length of each embedding vector (`/v1/embeddings`).
    pub embedding_dim: u32,
}

/// One more served model: its name, and the speed keys it overrides.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub name: String,
    pub ttft_ms: Option<f64>,
    pub prefill_us_per_token: Option<f64>,
    pub tpot_ms: Option<f64>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            model: "specreplay-sim".to_string(),
            seed: 0,
            ttft_ms: 100.0,
            prefill_us_per_token: 50.0,
            tpot_ms: 16.0,
            reasoning_tokens: [256, 1024],
            content_tokens: [64, 256],
            reasoning_field: ReasoningField::ReasoningContent,
            spec_draft_len: 0,
            spec_acceptance: 0.7,
            spec_step_cost: 0.1,
            send_timestamps: false,
            max_model_len: 32768,
            capacity: None,
            fixed_length_reasoning: false,
            faults: BTreeMap::new(),
            fault_stall_ms: 2000.0,
            fault_slow_headers_ms: 2000.0,
            fault_retry_after_s: 1,
            fault_oversized_bytes: DEFAULT_OVERSIZED_BYTES,
            models: Vec::new(),
            image_patch_px: 14,
            image_merge: 2,
            image_url_size: [1024, 1024],
            audio_tokens_per_s: 25.0,
            video_tokens: 1024,
            tool_call_rate: 1.0,
            embedding_dim: 1024,
        }
    }
}

/// Largest accepted `spec_draft_len` (real drafters propose a handful).
pub const MAX_DRAFT_LEN: u32 = 64;

/// Default size of the `oversized_event` fault's event: 8 MiB.
pub const DEFAULT_OVERSIZED_BYTES: u64 = 8 << 20;

/// Largest accepted `fault_oversized_bytes` (1 GiB): the event is built in memory.
pub const MAX_OVERSIZED_BYTES: u64 = 1 << 30;

impl SimConfig {
    /// Parses a JSON object, naming the first key that is unknown or has a
    /// bad value, then validates the result.
    pub fn from_json(text: &str) -> Result<SimConfig, CoreError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| CoreError::config("config", e.to_string()))?;
        let serde_json::Value::Object(map) = value else {
            return Err(CoreError::config("config", "expected a JSON object"));
        };
        // Each key on its own (the others defaulted): an error then belongs to that key.
        let one = |key: &str, v: &serde_json::Value| -> Result<(), String> {
            let mut one = serde_json::Map::new();
            one.insert(key.to_owned(), v.clone());
            serde_json::from_value::<SimConfig>(serde_json::Value::Object(one))
                .map(drop)
                .map_err(|e| e.to_string())
        };
        for (key, v) in &map {
            let nested = key == "faults" || key == "capacity";
            if let (true, serde_json::Value::Object(entries)) = (nested, v) {
                // One entry at a time: `faults.KIND` or `capacity.KEY` names the bad one.
                for (name, inner_value) in entries {
                    let mut inner = serde_json::Map::new();
                    inner.insert(name.clone(), inner_value.clone());
                    one(key, &serde_json::Value::Object(inner))
                        .map_err(|e| CoreError::config(format!("{key}.{name}"), e))?;
                }
            }
            one(key, v).map_err(|e| CoreError::config(key.as_str(), e))?;
        }
        let config: SimConfig = serde_json::from_value(serde_json::Value::Object(map))
            .map_err(|e| CoreError::config("config", e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The media rule of the `image_*`, `audio_*` and `video_*` keys.
    pub fn media_rule(&self) -> MediaRule {
        MediaRule {
            patch_px: self.image_patch_px,
            merge: self.image_merge,
            url_size: self.image_url_size,
            audio_tokens_per_s: self.audio_tokens_per_s,
            video_tokens: self.video_tokens,
        }
    }

    /// This config as served under `spec`'s name and speed.
    pub fn for_model(&self, spec: &ModelSpec) -> SimConfig {
        SimConfig {
            model: spec.name.clone(),
            ttft_ms: spec.ttft_ms.unwrap_or(self.ttft_ms),
            prefill_us_per_token: spec
                .prefill_us_per_token
                .unwrap_or(self.prefill_us_per_token),
            tpot_ms: spec.tpot_ms.unwrap_or(self.tpot_ms),
            models: Vec::new(),
            ..self.clone()
        }
    }

    /// The keys of multimodal input, tools, embeddings and models.
    fn validate_beyond_text(&self) -> Result<(), CoreError> {
        let positive = [
            ("image_patch_px", self.image_patch_px),
            ("image_merge", self.image_merge),
            (
                "image_url_size",
                self.image_url_size[0].min(self.image_url_size[1]),
            ),
            ("embedding_dim", self.embedding_dim),
        ];
        for (field, v) in positive {
            if v == 0 {
                return Err(CoreError::config(field, "must be at least 1"));
            }
        }
        if self.embedding_dim > 65_536 {
            return Err(CoreError::config("embedding_dim", "must be at most 65536"));
        }
        if !self.audio_tokens_per_s.is_finite() || self.audio_tokens_per_s < 0.0 {
            return Err(CoreError::config(
                "audio_tokens_per_s",
                "must be a finite number >= 0",
            ));
        }
        if !(0.0..=1.0).contains(&self.tool_call_rate) {
            return Err(CoreError::config(
                "tool_call_rate",
                format!(
                    "must be a probability in [0, 1], got {}",
                    self.tool_call_rate
                ),
            ));
        }
        let mut names = vec![self.model.as_str()];
        for (i, spec) in self.models.iter().enumerate() {
            let field = format!("models[{i}]");
            if spec.name.trim().is_empty() {
                return Err(CoreError::config(
                    format!("{field}.name"),
                    "must not be empty",
                ));
            }
            if names.contains(&spec.name.as_str()) {
                return Err(CoreError::config(
                    format!("{field}.name"),
                    format!("'{}' is served twice", spec.name),
                ));
            }
            names.push(&spec.name);
            let speeds = [
                ("ttft_ms", spec.ttft_ms),
                ("prefill_us_per_token", spec.prefill_us_per_token),
                ("tpot_ms", spec.tpot_ms),
            ];
            for (key, v) in speeds {
                if let Some(v) = v.filter(|v| !v.is_finite() || *v < 0.0 || *v > 3_600_000.0) {
                    return Err(CoreError::config(
                        format!("{field}.{key}"),
                        format!("must be a finite number in [0, 3600000], got {v}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks ranges and finiteness; the error names the field.
    pub fn validate(&self) -> Result<(), CoreError> {
        self.validate_beyond_text()?;
        if self.model.trim().is_empty() {
            return Err(CoreError::config("model", "must not be empty"));
        }
        for (field, v) in [
            ("ttft_ms", self.ttft_ms),
            ("prefill_us_per_token", self.prefill_us_per_token),
            ("tpot_ms", self.tpot_ms),
            ("spec_step_cost", self.spec_step_cost),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(CoreError::config(
                    field,
                    format!("must be a finite number >= 0, got {v}"),
                ));
            }
        }
        // An hour per token or per request is a typo, and would overflow nothing
        // but make every deadline meaningless.
        for (field, v) in [("ttft_ms", self.ttft_ms), ("tpot_ms", self.tpot_ms)] {
            if v > 3_600_000.0 {
                return Err(CoreError::config(
                    field,
                    format!("must be at most 3600000 (one hour), got {v}"),
                ));
            }
        }
        for (field, [lo, hi]) in [
            ("reasoning_tokens", self.reasoning_tokens),
            ("content_tokens", self.content_tokens),
        ] {
            if lo > hi {
                return Err(CoreError::config(
                    field,
                    format!("min {lo} is larger than max {hi}"),
                ));
            }
            if hi > 1_000_000 {
                return Err(CoreError::config(
                    field,
                    format!("max must be at most 1000000, got {hi}"),
                ));
            }
        }
        if self.spec_draft_len > MAX_DRAFT_LEN {
            return Err(CoreError::config(
                "spec_draft_len",
                format!(
                    "must be at most {MAX_DRAFT_LEN}, got {}",
                    self.spec_draft_len
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.spec_acceptance) {
            return Err(CoreError::config(
                "spec_acceptance",
                format!(
                    "must be a probability in [0, 1], got {}",
                    self.spec_acceptance
                ),
            ));
        }
        if self.max_model_len == 0 {
            return Err(CoreError::config("max_model_len", "must be at least 1"));
        }
        if let Some(capacity) = &self.capacity {
            capacity.validate()?;
        }
        self.validate_faults()
    }

    fn validate_faults(&self) -> Result<(), CoreError> {
        let mut sum = 0.0;
        for (kind, &fraction) in &self.faults {
            if !(0.0..=1.0).contains(&fraction) {
                return Err(CoreError::config(
                    format!("faults.{}", kind.as_str()),
                    format!("must be a probability in [0, 1], got {fraction}"),
                ));
            }
            sum += fraction;
        }
        // A little slack for decimal fractions that add up to 1 on paper.
        if sum > 1.0 + 1e-9 {
            return Err(CoreError::config(
                "faults",
                format!("the fractions add up to {sum}, must be at most 1"),
            ));
        }
        for (field, v) in [
            ("fault_stall_ms", self.fault_stall_ms),
            ("fault_slow_headers_ms", self.fault_slow_headers_ms),
        ] {
            if !v.is_finite() || !(0.0..=3_600_000.0).contains(&v) {
                return Err(CoreError::config(
                    field,
                    format!("must be a number in [0, 3600000] (ms), got {v}"),
                ));
            }
        }
        if self.fault_retry_after_s > 86_400 {
            return Err(CoreError::config(
                "fault_retry_after_s",
                format!(
                    "must be at most 86400 (one day), got {}",
                    self.fault_retry_after_s
                ),
            ));
        }
        if self.fault_oversized_bytes > MAX_OVERSIZED_BYTES {
            return Err(CoreError::config(
                "fault_oversized_bytes",
                format!(
                    "must be at most {MAX_OVERSIZED_BYTES} (1 GiB), got {}",
                    self.fault_oversized_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Duration of one decode step in µs: `tpot × (1 + spec_step_cost × k)`.
    pub fn step_us(&self) -> u64 {
        let factor = 1.0 + self.spec_step_cost * f64::from(self.spec_draft_len);
        (self.tpot_ms * 1000.0 * factor).round() as u64
    }

    /// `fault_stall_ms` as a `Duration`.
    pub fn fault_stall(&self) -> std::time::Duration {
        std::time::Duration::from_micros((self.fault_stall_ms * 1000.0).round() as u64)
    }

    /// `fault_slow_headers_ms` as a `Duration`.
    pub fn fault_slow_headers(&self) -> std::time::Duration {
        std::time::Duration::from_micros((self.fault_slow_headers_ms * 1000.0).round() as u64)
    }

    /// Time to the first token for a prompt of `prompt_tokens`, in µs.
    pub fn prefill_us(&self, prompt_tokens: u32) -> u64 {
        (self.ttft_ms * 1000.0 + self.prefill_us_per_token * f64::from(prompt_tokens)).round()
            as u64
    }

    /// The prompt-dependent part of `prefill_us`: what a prefill costs the
    /// capacity model's batch, µs.
    pub fn prefill_compute_us(&self, prompt_tokens: u32) -> u64 {
        (self.prefill_us_per_token * f64::from(prompt_tokens)).round() as u64
    }

    /// The fixed part of `prefill_us` (`ttft_ms`): under the capacity model,
    /// the time before a request joins the waiting queue.
    pub fn frontend_delay(&self) -> std::time::Duration {
        std::time::Duration::from_micros((self.ttft_ms * 1000.0).round() as u64)
    }

    /// The knee: the highest arrival rate (requests/s) the server sustains,
    /// under the capacity model `capacity`,
    /// for a mix of requests that all have `prompt_tokens` and an answer of
    /// `output_tokens`; above it the waiting queue grows without bound.
    ///
    /// With B slots (`max_num_seqs`, or fewer when the KV budget holds fewer
    /// requests of `prompt + output` tokens) and S decode steps per answer,
    /// each request stays 1 + S iterations in the batch. At saturation an
    /// iteration admits B / (1 + S) requests on average and decodes
    /// d = B·S / (1 + S), so it lasts
    /// T = step·(1 + c·(d − 1)) + prefill·B / (1 + S), and the knee is
    /// B / (1 + S) / T. S is `output − 1` without speculation; with it, the
    /// expected `(output − 1) / L`, L = 1 + a + … + a^k tokens per step.
    pub fn knee_rate(&self, capacity: &Capacity, prompt_tokens: u32, output_tokens: u32) -> f64 {
        let per_request = u64::from(prompt_tokens) + u64::from(output_tokens);
        let slots = match capacity.kv_budget() {
            Some(budget) => (budget / per_request.max(1)).min(u64::from(capacity.max_num_seqs)),
            None => u64::from(capacity.max_num_seqs),
        } as f64;
        let (k, a) = (self.spec_draft_len, self.spec_acceptance);
        let tokens_per_step: f64 = (0..=k).map(|i| a.powi(i as i32)).sum();
        let steps = f64::from(output_tokens.saturating_sub(1)) / tokens_per_step;
        let admitted = slots / (1.0 + steps);
        let decoding = slots - admitted;
        let step_us = self.step_us() as f64 * capacity.step_factor(decoding);
        let iteration_us = step_us + self.prefill_compute_us(prompt_tokens) as f64 * admitted;
        admitted / (iteration_us / 1e6)
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
