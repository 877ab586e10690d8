//! A prepared request read for the prediction: its prompt length in server
//! tokens, its output (fixed, or drawn from its class), its session.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::model::ServerModel;
use crate::decode::Dialect;
use crate::engine::PreparedRequest;
use crate::error::CoreError;
use crate::sim::request::{Endpoint, MediaRule, SimRequest};

/// One request, read for the prediction.
pub(super) struct Planned {
    pub(super) trace_id: String,
    pub(super) api: &'static str,
    pub(super) prompt_tokens: u32,
    /// The prompt's blocks in the simulator's counting (for the prefix cache).
    pub(super) prefix_blocks: Vec<u64>,
    /// The counted prompt tokens (the simulator's rule) per server token.
    pub(super) words: u32,
    pub(super) reasoning: u32,
    pub(super) content: u32,
    pub(super) finish: &'static str,
    pub(super) rng: ChaCha8Rng,
    /// The prompt's digest (seeds `rng`; folded into the run's
    /// `trace_digest`).
    pub(super) prompt_hash: u64,
    pub(super) session: Option<(std::sync::Arc<str>, i32)>,
    pub(super) think_us: Option<i64>,
    /// Turns of its session in this point (dependent sessions).
    pub(super) session_turns: Option<i32>,
    pub(super) error: Option<String>,
}

/// A prepared request as the simulator reads it. Media parts cost what the
/// simulator's default patch rule says: the calibration fits no media cost
/// yet (docs/predict.md).
pub fn parse_request(req: &PreparedRequest) -> Result<SimRequest, CoreError> {
    let endpoint = match req.dialect {
        Dialect::Completions => Endpoint::Completions,
        _ => Endpoint::Chat,
    };
    SimRequest::parse(endpoint, &req.body, &MediaRule::default())
        .map_err(|e| CoreError::config(format!("request {}", req.trace_id), e))
}

/// Reads one prepared request: prompt length (the simulator's counting,
/// scaled by the tokenizer ratio), its budget, and its output length
/// (fixed, or drawn from its class).
pub(super) fn plan(
    model: &ServerModel,
    req: &PreparedRequest,
    lap: u64,
) -> Result<Planned, CoreError> {
    let field = || format!("request {}", req.trace_id);
    let parsed = parse_request(req)?;
    let api = req.dialect.as_str();
    let tokens = (f64::from(parsed.prompt_tokens) * model.prompt_tokens_per_word).round() as u32;
    let mut rng = ChaCha8Rng::seed_from_u64(
        model.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ parsed.prompt_hash,
    );
    let budget = parsed.max_tokens;
    let fixed = parsed.ignore_eos || budget.is_some_and(|b| parsed.min_tokens >= b);
    let (reasoning, content, finish) = match (fixed, budget) {
        (true, Some(b)) => (0, b, if parsed.ignore_eos { "length" } else { "stop" }),
        _ => {
            let class = model.output_class(api, tokens).ok_or_else(|| {
                CoreError::config(
                    field(),
                    format!(
                        "the model has no output lengths for {api} requests that end by themselves \
                         (calibrate from a run of such requests, or give the trace fixed lengths)"
                    ),
                )
            })?;
            let k = rng.random_range(0..class.content.len());
            let (r, c) = (class.reasoning[k], class.content[k]);
            let natural = (r + c).max(parsed.min_tokens).max(1);
            match budget {
                Some(b) if natural > b => (r.min(b), b - r.min(b), "length"),
                _ => (r, natural - r, "stop"),
            }
        }
    };
    let suffix = |s: &str| {
        if lap > 0 {
            format!("{s}#{lap}")
        } else {
            s.to_string()
        }
    };
    let session = req
        .session
        .as_ref()
        .map(|t| (std::sync::Arc::from(suffix(&t.session_id)), t.index));
    let think_us = req.session.as_ref().and_then(|t| t.think_time_us);
    let kv = u64::from(tokens) + u64::from(reasoning + content);
    let error = model.kv_cache_tokens.filter(|&b| kv > b).map(|b| {
        format!("the request needs {kv} KV-cache tokens, more than the whole cache ({b})")
    });
    Ok(Planned {
        trace_id: suffix(&req.trace_id),
        api,
        prompt_tokens: tokens.max(1),
        prefix_blocks: parsed.prefix_blocks,
        words: parsed.prompt_tokens,
        reasoning,
        content,
        finish,
        rng,
        prompt_hash: parsed.prompt_hash,
        session,
        think_us,
        session_turns: None,
        error,
    })
}
