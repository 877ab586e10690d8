//! The per-request plan.
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
        ..SimRequest::default()
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

#[test]
fn a_tool_call_answer_is_the_arguments_and_a_cut_one_ends_at_length() {
    use crate::sim::request::{Tool, ToolChoice};
    let mut r = request(None);
    r.tools = vec![Tool {
        name: "weather".into(),
        parameters: serde_json::json!({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}),
    }];
    r.tool_choice = ToolChoice::Required;
    let s = Script::plan(&config(), &r).unwrap();
    let answer = s.structured.clone().unwrap();
    assert_eq!(s.finish, Finish::ToolCalls);
    assert_eq!(s.content_tokens, answer.tokens());
    let mut out = Texts::default();
    s.push_range(0, s.total_tokens(), TextLayout::Split, &mut out);
    assert!(out.content.is_empty());
    assert_eq!(out.args, answer.text);
    let v: serde_json::Value = serde_json::from_str(&out.args).unwrap();
    assert!(v["city"].is_string() && v["days"].is_u64());
    // A budget that ends inside the arguments.
    let cut = request(Some(s.reasoning_tokens + 2));
    let cut = SimRequest {
        tools: r.tools.clone(),
        tool_choice: ToolChoice::Required,
        ..cut
    };
    let c = Script::plan(&config(), &cut).unwrap();
    assert_eq!(c.finish, Finish::Length);
    let mut out = Texts::default();
    c.push_range(0, c.total_tokens(), TextLayout::Split, &mut out);
    assert!(serde_json::from_str::<serde_json::Value>(&out.args).is_err());
    // No tool call at rate 0 under "auto": a prose answer.
    let auto = SimRequest {
        tool_choice: ToolChoice::Auto,
        ..r.clone()
    };
    let prose = Script::plan(
        &SimConfig {
            tool_call_rate: 0.0,
            ..config()
        },
        &auto,
    )
    .unwrap();
    assert!(prose.structured.is_none());
    assert_eq!(prose.finish, Finish::Stop);
}
