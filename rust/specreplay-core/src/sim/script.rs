//! The deterministic plan of one request: how long the prefill takes, how
//! many reasoning and answer tokens come out, why it stops, and the decode
//! steps (tokens per step, when each is due).
//!
//! All randomness comes from one ChaCha8 stream seeded with `config.seed` and
//! the request's prompt hash, drawn in a fixed order (reasoning length,
//! content length, word offset, then one acceptance run per speculative
//! step), so the same request gets the same answer whatever else the server
//! is doing, and a replay can be repeated exactly.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::config::SimConfig;
use super::request::{Endpoint, SimRequest};

/// Why the generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its answer naturally.
    Stop,
    /// The output budget (`max_tokens`/`max_completion_tokens`, or the context) ran out.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// Words of the reasoning phase: none of them appears in `CONTENT_WORDS`.
pub const REASONING_WORDS: [&str; 16] = [
    "hmm",
    "wait",
    "so",
    "consider",
    "suppose",
    "check",
    "maybe",
    "think",
    "then",
    "therefore",
    "alternatively",
    "verify",
    "assume",
    "because",
    "hence",
    "recall",
];
/// Words of the answer.
pub const CONTENT_WORDS: [&str; 16] = [
    "the", "answer", "is", "clear", "and", "simple", "result", "here", "final", "value", "we",
    "get", "this", "one", "yes", "done",
];

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

        let mut rng = ChaCha8Rng::seed_from_u64(
            config.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ req.prompt_hash,
        );
        let [rlo, rhi] = config.reasoning_tokens;
        let [clo, chi] = config.content_tokens;
        let mut natural_reasoning = rng.random_range(rlo..=rhi);
        let natural_content = rng.random_range(clo..=chi);
        let word_offset = rng.random_range(0..REASONING_WORDS.len() as u32);
        // A fixed-length request (an imported trace's `ignore_eos`, or
        // `min_tokens` up to the budget) asks for a length, not an answer:
        // it is answered without a reasoning phase unless the config asks.
        let fixed_length = req.ignore_eos || req.min_tokens >= budget;
        if req.endpoint == Endpoint::Completions || (fixed_length && !config.fixed_length_reasoning)
        {
            // A raw completion has no reasoning phase: only the answer text.
            natural_reasoning = 0;
        }
        let natural = natural_reasoning + natural_content;
        // `ignore_eos` runs to the budget; so does an answer longer than the budget.
        let (total, finish) = if req.ignore_eos || natural.max(req.min_tokens) > budget {
            (budget, Finish::Length)
        } else {
            // `min_tokens` suppresses the end of the answer until it is reached.
            (natural.max(req.min_tokens), Finish::Stop)
        };
        let reasoning_tokens = natural_reasoning.min(total);
        let kv_budget = config.capacity.as_ref().and_then(|c| c.kv_budget());
        let kv_tokens = u64::from(req.prompt_tokens) + u64::from(total);
        if let Some(budget) = kv_budget.filter(|&b| kv_tokens > b) {
            return Err(format!(
                "the request needs {kv_tokens} KV-cache tokens (prompt {} + answer {total}), \
                 more than the whole cache holds (capacity.kv_cache_tokens {budget})",
                req.prompt_tokens
            ));
        }
        Ok(Script {
            prompt_tokens: req.prompt_tokens,
            prefill_us: config.prefill_us(req.prompt_tokens),
            step_us: config.step_us(),
            reasoning_tokens,
            content_tokens: total - reasoning_tokens,
            natural_reasoning,
            finish,
            word_offset,
            draft_len: config.spec_draft_len,
            acceptance: config.spec_acceptance,
            rng,
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
    /// with a reasoning parser), or all of it to `content`.
    pub fn push_range(
        &self,
        first: u32,
        count: u32,
        layout: TextLayout,
        reasoning: &mut String,
        content: &mut String,
    ) {
        match layout {
            TextLayout::Split => {
                let in_reasoning = self.reasoning_among(first, count);
                self.push_text(first, in_reasoning, false, reasoning);
                self.push_text(first + in_reasoning, count - in_reasoning, false, content);
            }
            TextLayout::Inline { think_tags } => self.push_text(first, count, think_tags, content),
        }
    }

    /// Appends the text of tokens `first..first + count` (one word with a
    /// leading space each). `think_tags` glues `<think>` to the first
    /// reasoning word and `</think>` to the last one of a finished reasoning
    /// phase (the `reasoning_field = "none"` rendering).
    pub fn push_text(&self, first: u32, count: u32, think_tags: bool, out: &mut String) {
        for i in first..first + count {
            out.push(' ');
            if i < self.reasoning_tokens {
                if think_tags && i == 0 {
                    out.push_str("<think>");
                }
                out.push_str(REASONING_WORDS[self.word_index(i)]);
                if think_tags && i + 1 == self.natural_reasoning {
                    out.push_str("</think>");
                }
            } else {
                out.push_str(CONTENT_WORDS[self.word_index(i)]);
            }
        }
    }

    fn word_index(&self, i: u32) -> usize {
        (self.word_offset.wrapping_add(i.wrapping_mul(7)) % REASONING_WORDS.len() as u32) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(max_tokens: Option<u32>) -> SimRequest {
        SimRequest {
            endpoint: Endpoint::Chat,
            stream: true,
            include_usage: true,
            continuous_usage: false,
            max_tokens,
            min_tokens: 0,
            ignore_eos: false,
            prompt_tokens: 10,
            prompt_hash: 42,
            prefix_blocks: Vec::new(),
        }
    }

    fn steps(script: &mut Script) -> Vec<Step> {
        std::iter::from_fn(|| script.next_step()).collect()
    }

    fn config() -> SimConfig {
        SimConfig {
            reasoning_tokens: [20, 40],
            content_tokens: [5, 15],
            ttft_ms: 10.0,
            prefill_us_per_token: 100.0,
            tpot_ms: 2.0,
            ..SimConfig::default()
        }
    }

    #[test]
    fn same_request_same_plan_in_any_order() {
        let c = SimConfig {
            spec_draft_len: 3,
            spec_acceptance: 0.6,
            ..config()
        };
        let mut other = request(None);
        other.prompt_hash = 7;
        // Plan A, then B, then A again: A's plan does not depend on B.
        let mut a1 = Script::plan(&c, &request(None)).unwrap();
        let mut b = Script::plan(&c, &other).unwrap();
        let mut a2 = Script::plan(&c, &request(None)).unwrap();
        let (s1, sb, s2) = (steps(&mut a1), steps(&mut b), steps(&mut a2));
        assert_eq!(s1, s2);
        assert_eq!(
            (a1.reasoning_tokens, a1.content_tokens),
            (a2.reasoning_tokens, a2.content_tokens)
        );
        // Another prompt or another seed gives other draws (over a few tries).
        assert!(sb != s1 || b.content_tokens != a1.content_tokens);
        let differs = (1..10).any(|seed| {
            let mut s = Script::plan(&SimConfig { seed, ..c.clone() }, &request(None)).unwrap();
            steps(&mut s) != s1
        });
        assert!(differs);
    }

    #[test]
    fn lengths_within_configured_ranges() {
        let c = config();
        for hash in 0..200 {
            let mut r = request(None);
            r.prompt_hash = hash;
            let s = Script::plan(&c, &r).unwrap();
            assert!((20..=40).contains(&s.reasoning_tokens));
            assert!((5..=15).contains(&s.content_tokens));
            assert_eq!(s.finish, Finish::Stop);
        }
    }

    #[test]
    fn small_budget_is_eaten_by_reasoning() {
        let mut s = Script::plan(&config(), &request(Some(12))).unwrap();
        assert_eq!(s.finish, Finish::Length);
        assert_eq!(s.reasoning_tokens, 12);
        assert_eq!(s.content_tokens, 0);
        let all = steps(&mut s);
        assert_eq!(all.iter().map(|st| st.tokens).sum::<u32>(), 12);
        assert!(all.iter().all(|st| s.reasoning_in(st) == st.tokens));
        assert!(all.last().unwrap().last);
    }

    #[test]
    fn budget_above_natural_length_stops_naturally() {
        let s = Script::plan(&config(), &request(Some(1000))).unwrap();
        assert_eq!(s.finish, Finish::Stop);
        assert!(s.total_tokens() <= 55);
    }

    #[test]
    fn ignore_eos_and_min_tokens_extend_the_answer() {
        let natural = Script::plan(&config(), &request(None)).unwrap();
        let mut r = request(Some(200));
        r.ignore_eos = true;
        // A fixed length, and the config asks for reasoning there too.
        let reasoning_too = SimConfig {
            fixed_length_reasoning: true,
            ..config()
        };
        let s = Script::plan(&reasoning_too, &r).unwrap();
        assert_eq!((s.total_tokens(), s.finish), (200, Finish::Length));
        assert_eq!(s.reasoning_tokens, natural.reasoning_tokens);
        assert_eq!(s.content_tokens, 200 - natural.reasoning_tokens);

        let mut r = request(Some(200));
        r.min_tokens = 150;
        let s = Script::plan(&config(), &r).unwrap();
        assert_eq!((s.total_tokens(), s.finish), (150, Finish::Stop));
        assert_eq!(s.reasoning_tokens, natural.reasoning_tokens);
        r.min_tokens = 201;
        assert!(Script::plan(&config(), &r).is_err());
    }

    #[test]
    fn fixed_length_requests_skip_the_reasoning() {
        let natural = Script::plan(&config(), &request(None)).unwrap();
        // ignore_eos, or min_tokens = max_tokens (an imported trace's body).
        let mut eos = request(Some(12));
        eos.ignore_eos = true;
        let mut min = request(Some(12));
        min.min_tokens = 12;
        for r in [eos, min] {
            let mut s = Script::plan(&config(), &r).unwrap();
            assert_eq!((s.reasoning_tokens, s.content_tokens), (0, 12));
            assert_eq!(
                s.finish,
                if r.ignore_eos {
                    Finish::Length
                } else {
                    Finish::Stop
                }
            );
            let all = steps(&mut s);
            assert!(all.iter().all(|st| s.reasoning_in(st) == 0));
        }
        // The same budget without a fixed length: the trap, unchanged.
        let trap = Script::plan(&config(), &request(Some(12))).unwrap();
        assert_eq!((trap.reasoning_tokens, trap.content_tokens), (12, 0));
        // The same draws either way: only the reasoning phase goes.
        let mut eos = request(Some(1000));
        eos.ignore_eos = true;
        let s = Script::plan(&config(), &eos).unwrap();
        assert_eq!(s.word_offset, natural.word_offset);
    }

    #[test]
    fn plain_decoding_one_token_per_step_on_schedule() {
        let mut s = Script::plan(&config(), &request(None)).unwrap();
        assert_eq!(s.prefill_us, 10_000 + 100 * 10);
        let all = steps(&mut s);
        assert_eq!(all.len() as u32, s.total_tokens());
        for (i, st) in all.iter().enumerate() {
            assert_eq!(st.tokens, 1);
            assert_eq!(st.due_us, s.prefill_us + i as u64 * 2_000);
        }
    }

    #[test]
    fn speculative_steps_carry_several_tokens_and_cost_more() {
        let c = SimConfig {
            spec_draft_len: 4,
            spec_acceptance: 0.8,
            spec_step_cost: 0.25,
            ..config()
        };
        let mut s = Script::plan(&c, &request(None)).unwrap();
        assert_eq!(s.step_us, 4_000);
        let all = steps(&mut s);
        assert_eq!(all[0].tokens, 1, "the prefill emits one token");
        assert!(all.iter().any(|st| st.tokens > 1));
        assert!(all.iter().all(|st| st.tokens <= 5));
        assert_eq!(
            all.iter().map(|st| st.tokens).sum::<u32>(),
            s.total_tokens()
        );
        assert!(all.len() < s.total_tokens() as usize);
        for (i, st) in all.iter().enumerate() {
            assert_eq!(st.due_us, s.prefill_us + i as u64 * 4_000);
        }
        // Acceptance 1: every step takes the full draft.
        let c = SimConfig {
            spec_acceptance: 1.0,
            ..c
        };
        let mut s = Script::plan(&c, &request(None)).unwrap();
        let all = steps(&mut s);
        assert!(all[1..all.len() - 1].iter().all(|st| st.tokens == 5));
        // Acceptance 0: one token per step, still paying for the drafts.
        let c = SimConfig {
            spec_acceptance: 0.0,
            ..c
        };
        let mut s = Script::plan(&c, &request(None)).unwrap();
        assert!(steps(&mut s).iter().all(|st| st.tokens == 1));
    }

    #[test]
    fn completions_have_no_reasoning() {
        let mut r = request(None);
        r.endpoint = Endpoint::Completions;
        let s = Script::plan(&config(), &r).unwrap();
        assert_eq!(s.reasoning_tokens, 0);
        assert!((5..=15).contains(&s.content_tokens));
    }

    #[test]
    fn text_is_one_word_per_token() {
        let s = Script::plan(&config(), &request(None)).unwrap();
        let mut out = String::new();
        s.push_text(0, s.total_tokens(), false, &mut out);
        let words: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(words.len() as u32, s.total_tokens());
        let r = s.reasoning_tokens as usize;
        assert!(words[..r].iter().all(|w| REASONING_WORDS.contains(w)));
        assert!(words[r..].iter().all(|w| CONTENT_WORDS.contains(w)));
        let mut tagged = String::new();
        s.push_text(0, s.total_tokens(), true, &mut tagged);
        assert_eq!(tagged.split_whitespace().count() as u32, s.total_tokens());
        assert!(tagged.starts_with(" <think>"));
        assert!(tagged.contains("</think> "));
    }

    #[test]
    fn lengths_zero_still_finish() {
        let c = SimConfig {
            reasoning_tokens: [0, 0],
            content_tokens: [0, 0],
            ..config()
        };
        let mut s = Script::plan(&c, &request(None)).unwrap();
        let all = steps(&mut s);
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].tokens, all[0].last), (0, true));
    }
}
