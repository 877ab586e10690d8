//! The deterministic plan of one request: how long the prefill takes, how
//! many reasoning and answer tokens come out, why it stops, and the decode
//! steps (tokens per step, when each is due).
//!
//! All randomness comes from one ChaCha8 stream seeded with `config.seed` and
//! the request's prompt hash, drawn in a fixed order (reasoning length,
//! content length, word offset, then one acceptance run per speculative
//! step), so the same request gets the same answer whatever else the server
//! is doing, and a replay can be repeated exactly.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::config::SimConfig;
use super::request::{Endpoint, SimRequest};
use super::structured::{Structured, ToolCall};
pub use super::words::{CONTENT_WORDS, REASONING_WORDS};

/// Why the generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its answer naturally.
    Stop,
    /// The output budget (`max_tokens`/`max_completion_tokens`, or the context) ran out.
    Length,
    /// The answer is a whole tool call.
    ToolCalls,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::ToolCalls => "tool_calls",
        }
    }
}

/// The text of some tokens, by where it goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Texts {
    pub reasoning: String,
    pub content: String,
    /// A tool call's arguments.
    pub args: String,
}

impl Texts {
    pub fn clear(&mut self) {
        self.reasoning.clear();
        self.content.clear();
        self.args.clear();
    }

    /// The text a fault decorates: the last non-empty one (content if none is).
    pub fn last_mut(&mut self) -> &mut String {
        if !self.args.is_empty() {
            &mut self.args
        } else if self.content.is_empty() && !self.reasoning.is_empty() {
            &mut self.reasoning
        } else {
            &mut self.content
        }
    }
}

/// Where the text of the answer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextLayout {
    /// Reasoning and content apart (chat with a reasoning parser).
    Split,
    /// Everything as content; `think_tags` wraps the reasoning in
    /// `<think>…</think>` (chat without a reasoning parser).
    Inline { think_tags: bool },
}

/// One decode step: `tokens` tokens starting at token index `first`, all
/// written in one chunk. On the request's own clock it is due `due_us` after
/// the request arrived; under the capacity model the engine decides when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub index: u32,
    pub due_us: u64,
    pub first: u32,
    pub tokens: u32,
    /// The step that ends the generation (carries `finish_reason`).
    pub last: bool,
    /// Draft tokens this step verified (0 for step 0 or without speculation).
    pub drafted: u32,
    /// Drafts accepted, before the cut at the end of the answer (as vLLM
    /// counts them): `tokens − 1` except on a cut last step.
    pub accepted: u32,
}

/// A request's plan. `next_step` walks the decode steps lazily, so a stream
/// of thousands of tokens costs no memory per step.
#[derive(Clone, Debug)]
pub struct Script {
    pub prompt_tokens: u32,
    /// Delay to the first token (µs after the request arrived).
    pub prefill_us: u64,
    /// Duration of one decode step (µs), speculation cost included.
    pub step_us: u64,
    /// Reasoning tokens that will be emitted (after the budget cut).
    pub reasoning_tokens: u32,
    /// Answer tokens that will be emitted.
    pub content_tokens: u32,
    /// Natural reasoning length before any budget cut.
    pub natural_reasoning: u32,
    pub finish: Finish,
    /// A JSON answer (tool call arguments or a `json_schema` format) in
    /// place of prose.
    pub structured: Option<Arc<Structured>>,
    word_offset: u32,
    draft_len: u32,
    acceptance: f64,
    rng: ChaCha8Rng,
    emitted: u32,
    next_index: u32,
}

impl Script {
    /// Plans `req` under `config`; `Err` is a 400 message (budget problems).
    pub fn plan(config: &SimConfig, req: &SimRequest) -> Result<Script, String> {
        let budget = output_budget(config, req)?;
        let mut draws = Draws::new(config, req);
        // A fixed-length request (an imported trace's `ignore_eos`, or
        // `min_tokens` up to the budget) asks for a length, not an answer:
        // it is answered without a reasoning phase unless the config asks.
        let fixed_length = req.ignore_eos || req.min_tokens >= budget;
        if req.endpoint == Endpoint::Completions || (fixed_length && !config.fixed_length_reasoning)
        {
            // A raw completion has no reasoning phase: only the answer text.
            draws.reasoning = 0;
        }
        let structured = structured_answer(config, req);
        let natural_content = structured.as_ref().map_or(draws.content, |s| s.tokens());
        let (total, finish) = length_and_finish(req, budget, draws.reasoning + natural_content);
        let finish = match &structured {
            Some(s) if s.tool.is_some() && finish == Finish::Stop => Finish::ToolCalls,
            _ => finish,
        };
        fits_the_kv_cache(config, req, total)?;
        let reasoning_tokens = draws.reasoning.min(total);
        Ok(Script {
            prompt_tokens: req.prompt_tokens,
            prefill_us: config.prefill_us(req.prompt_tokens),
            step_us: config.step_us(),
            reasoning_tokens,
            content_tokens: total - reasoning_tokens,
            natural_reasoning: draws.reasoning,
            finish,
            structured,
            word_offset: draws.word_offset,
            draft_len: config.spec_draft_len,
            acceptance: config.spec_acceptance,
            rng: draws.rng,
            emitted: 0,
            next_index: 0,
        })
    }

    /// Tokens the whole generation emits.
    pub fn total_tokens(&self) -> u32 {
        self.reasoning_tokens + self.content_tokens
    }

    /// The next decode step, or `None` after the last one. Step 0 is the
    /// prefill's token (always one); each later step emits the target token
    /// plus the accepted run of up to `spec_draft_len` drafts.
    pub fn next_step(&mut self) -> Option<Step> {
        let total = self.total_tokens();
        if self.next_index > 0 && self.emitted >= total {
            return None;
        }
        let index = self.next_index;
        let (mut drafted, mut accepted) = (0, 0);
        if index > 0 {
            drafted = self.draft_len;
            for _ in 0..self.draft_len {
                if !self.rng.random_bool(self.acceptance) {
                    break;
                }
                accepted += 1;
            }
        }
        let tokens = (1 + accepted).min(total - self.emitted);
        let step = Step {
            index,
            due_us: self.prefill_us + u64::from(index) * self.step_us,
            first: self.emitted,
            tokens,
            last: self.emitted + tokens >= total,
            drafted,
            accepted,
        };
        self.emitted += tokens;
        self.next_index += 1;
        Some(step)
    }

    /// How many of `step`'s tokens belong to the reasoning phase.
    pub fn reasoning_in(&self, step: &Step) -> u32 {
        self.reasoning_among(step.first, step.tokens)
    }

    /// How many of tokens `first..first + count` belong to the reasoning phase.
    fn reasoning_among(&self, first: u32, count: u32) -> u32 {
        self.reasoning_tokens.saturating_sub(first).min(count)
    }

    /// Appends the text of tokens `first..first + count` as `layout` says:
    /// the reasoning part to `reasoning` and the rest to `content` (a server
    /// with a reasoning parser), or all of it to `content`; a tool call's
    /// arguments always to `args`.
    pub fn push_range(&self, first: u32, count: u32, layout: TextLayout, out: &mut Texts) {
        let in_reasoning = self.reasoning_among(first, count);
        let (answer_first, answer_count) = (first + in_reasoning, count - in_reasoning);
        match layout {
            TextLayout::Split => self.push_text(first, in_reasoning, false, &mut out.reasoning),
            TextLayout::Inline { think_tags } => {
                self.push_text(first, in_reasoning, think_tags, &mut out.content)
            }
        }
        let answer = match &self.structured {
            Some(s) if s.tool.is_some() => &mut out.args,
            _ => &mut out.content,
        };
        self.push_text(answer_first, answer_count, false, answer);
    }

    /// Appends the text of tokens `first..first + count` (one word with a
    /// leading space each, or a structured answer's pieces). `think_tags`
    /// glues `<think>` to the first reasoning word and `</think>` to the
    /// last one of a finished reasoning phase (the `reasoning_field =
    /// "none"` rendering).
    pub fn push_text(&self, first: u32, count: u32, think_tags: bool, out: &mut String) {
        for i in first..first + count {
            if i < self.reasoning_tokens {
                out.push(' ');
                if think_tags && i == 0 {
                    out.push_str("<think>");
                }
                out.push_str(REASONING_WORDS[self.word_index(i)]);
                if think_tags && i + 1 == self.natural_reasoning {
                    out.push_str("</think>");
                }
            } else if let Some(s) = &self.structured {
                out.push_str(s.token(i - self.reasoning_tokens));
            } else {
                out.push(' ');
                out.push_str(CONTENT_WORDS[self.word_index(i)]);
            }
        }
    }

    fn word_index(&self, i: u32) -> usize {
        (self.word_offset.wrapping_add(i.wrapping_mul(7)) % REASONING_WORDS.len() as u32) as usize
    }
}

/// The most tokens `req` may generate: its `max_tokens`, else what the
/// context leaves; `Err` when the context or the request's own limits
/// forbid any answer.
fn output_budget(config: &SimConfig, req: &SimRequest) -> Result<u32, String> {
    let context_left = config.max_model_len.saturating_sub(req.prompt_tokens);
    if context_left == 0 {
        return Err(format!(
            "the prompt ({} tokens) fills the model's context (max_model_len {})",
            req.prompt_tokens, config.max_model_len
        ));
    }
    let budget = match req.max_tokens {
        Some(m) if m > context_left => {
            return Err(format!(
                "max_tokens {m} plus the prompt's {} tokens exceeds max_model_len {}",
                req.prompt_tokens, config.max_model_len
            ))
        }
        Some(m) => m,
        None => context_left,
    };
    if req.min_tokens > budget {
        return Err(format!(
            "min_tokens {} is larger than max_tokens {budget}",
            req.min_tokens
        ));
    }
    Ok(budget)
}

/// A request's first draws, in their fixed order: its natural reasoning and
/// content lengths and its word offset; the stream goes on to draw the
/// speculative steps.
struct Draws {
    rng: ChaCha8Rng,
    reasoning: u32,
    content: u32,
    word_offset: u32,
}

impl Draws {
    fn new(config: &SimConfig, req: &SimRequest) -> Draws {
        let mut rng = ChaCha8Rng::seed_from_u64(
            config.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ req.prompt_hash,
        );
        let [rlo, rhi] = config.reasoning_tokens;
        let [clo, chi] = config.content_tokens;
        let reasoning = rng.random_range(rlo..=rhi);
        let content = rng.random_range(clo..=chi);
        let word_offset = rng.random_range(0..REASONING_WORDS.len() as u32);
        Draws {
            rng,
            reasoning,
            content,
            word_offset,
        }
    }
}

/// How many tokens a generation of `natural` tokens emits within `budget`,
/// and why it ends.
fn length_and_finish(req: &SimRequest, budget: u32, natural: u32) -> (u32, Finish) {
    // `ignore_eos` runs to the budget; so does an answer longer than the budget.
    if req.ignore_eos || natural.max(req.min_tokens) > budget {
        (budget, Finish::Length)
    } else {
        // `min_tokens` suppresses the end of the answer until it is reached.
        (natural.max(req.min_tokens), Finish::Stop)
    }
}

/// `Err` when the prompt and `total` answer tokens need more KV cache than
/// the capacity model's whole cache holds.
fn fits_the_kv_cache(config: &SimConfig, req: &SimRequest, total: u32) -> Result<(), String> {
    let kv_budget = config.capacity.as_ref().and_then(|c| c.kv_budget());
    let kv_tokens = u64::from(req.prompt_tokens) + u64::from(total);
    match kv_budget.filter(|&b| kv_tokens > b) {
        Some(budget) => Err(format!(
            "the request needs {kv_tokens} KV-cache tokens (prompt {} + answer {total}), \
             more than the whole cache holds (capacity.kv_cache_tokens {budget})",
            req.prompt_tokens
        )),
        None => Ok(()),
    }
}

/// The JSON answer `req` gets, if any: a tool call (at `tool_call_rate`
/// unless the request insists), else its `json_schema` format. Drawn from
/// a stream of its own, so prose answers keep their draws.
fn structured_answer(config: &SimConfig, req: &SimRequest) -> Option<Arc<Structured>> {
    if req.tools.is_empty() && req.json_schema.is_none() {
        return None;
    }
    let seed = config.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ req.prompt_hash ^ 0x7001_ca11;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let draw: f64 = rng.random();
    if let Some(tool) = req.calls_tool(config.tool_call_rate, draw) {
        let call = ToolCall {
            id: format!("call_{:016x}", rng.random::<u64>()),
            name: tool.name.clone(),
        };
        return Some(Arc::new(Structured::new(
            &tool.parameters,
            rng.random(),
            Some(call),
        )));
    }
    let schema = req.json_schema.as_ref()?;
    Some(Arc::new(Structured::new(schema, rng.random(), None)))
}

#[cfg(test)]
#[path = "script_tests.rs"]
mod tests;
