//! `SimConfig` reading and validation.
use super::*;

fn field_of(e: CoreError) -> String {
    match e {
        CoreError::Config { field, .. } => field,
        other => panic!("not a config error: {other}"),
    }
}

#[test]
fn empty_object_is_the_default() {
    assert_eq!(SimConfig::from_json("{}").unwrap(), SimConfig::default());
    SimConfig::default().validate().unwrap();
}

#[test]
fn keys_are_read() {
    let c = SimConfig::from_json(
        r#"{"model":"m","seed":7,"tpot_ms":5,"reasoning_tokens":[1,2],"reasoning_field":"none","spec_draft_len":3}"#,
    )
    .unwrap();
    assert_eq!(c.model, "m");
    assert_eq!(c.seed, 7);
    assert_eq!(c.tpot_ms, 5.0);
    assert_eq!(c.reasoning_tokens, [1, 2]);
    assert_eq!(c.reasoning_field, ReasoningField::None);
    assert_eq!(c.spec_draft_len, 3);
}

#[test]
fn unknown_key_is_named() {
    let e = SimConfig::from_json(r#"{"tpot_ms": 5, "tpot": 3}"#).unwrap_err();
    assert!(e.to_string().contains("unknown field"), "{e}");
    assert_eq!(field_of(e), "tpot");
}

#[test]
fn bad_type_is_named() {
    assert_eq!(
        field_of(SimConfig::from_json(r#"{"ttft_ms": "fast"}"#).unwrap_err()),
        "ttft_ms"
    );
    assert_eq!(
        field_of(SimConfig::from_json(r#"{"reasoning_field": "thoughts"}"#).unwrap_err()),
        "reasoning_field"
    );
    assert_eq!(
        field_of(SimConfig::from_json(r#"{"seed": -1}"#).unwrap_err()),
        "seed"
    );
}

#[test]
fn bad_values_are_named() {
    for (json, field) in [
        (r#"{"tpot_ms": -1}"#, "tpot_ms"),
        (r#"{"reasoning_tokens": [5, 1]}"#, "reasoning_tokens"),
        (r#"{"content_tokens": [0, 2000000]}"#, "content_tokens"),
        (r#"{"spec_acceptance": 1.5}"#, "spec_acceptance"),
        (r#"{"spec_draft_len": 1000}"#, "spec_draft_len"),
        (r#"{"model": " "}"#, "model"),
        (r#"{"max_model_len": 0}"#, "max_model_len"),
    ] {
        assert_eq!(
            field_of(SimConfig::from_json(json).unwrap_err()),
            field,
            "{json}"
        );
    }
    assert_eq!(field_of(SimConfig::from_json("[1]").unwrap_err()), "config");
}

#[test]
fn faults_are_read_and_validated() {
    let c = SimConfig::from_json(
        r#"{"faults": {"http_503": 0.05, "stall_between_tokens": 0.01}, "fault_stall_ms": 500, "fault_retry_after_s": 3, "fault_oversized_bytes": 1024}"#,
    )
    .unwrap();
    assert_eq!(c.faults.get(&FaultKind::Http503), Some(&0.05));
    assert_eq!(c.faults.get(&FaultKind::StallBetweenTokens), Some(&0.01));
    assert_eq!(c.fault_stall_ms, 500.0);
    assert_eq!(c.fault_retry_after_s, 3);
    assert_eq!(c.fault_oversized_bytes, 1024);
    let d = SimConfig::default();
    assert_eq!(
        (
            d.fault_stall_ms,
            d.fault_slow_headers_ms,
            d.fault_retry_after_s,
            d.fault_oversized_bytes
        ),
        (2000.0, 2000.0, 1, 8 << 20)
    );

    let e = SimConfig::from_json(r#"{"faults": {"http_503": 1.5}}"#).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid configuration: faults.http_503: must be a probability in [0, 1], got 1.5"
    );
    let e = SimConfig::from_json(r#"{"faults": {"http_504": 0.1}}"#).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("http_504") && text.contains("reset_before_headers"),
        "{text}"
    );
    assert_eq!(field_of(e), "faults.http_504");
    for (json, field) in [
        (r#"{"faults": {"http_503": "often"}}"#, "faults.http_503"),
        (r#"{"faults": {"http_503": -0.1}}"#, "faults.http_503"),
        (
            r#"{"faults": {"http_503": 0.6, "http_500": 0.6}}"#,
            "faults",
        ),
        (r#"{"faults": [1]}"#, "faults"),
        (r#"{"fault_stall_ms": -1}"#, "fault_stall_ms"),
        (
            r#"{"fault_slow_headers_ms": 1e12}"#,
            "fault_slow_headers_ms",
        ),
        (r#"{"fault_retry_after_s": -1}"#, "fault_retry_after_s"),
        (r#"{"fault_retry_after_s": 100000}"#, "fault_retry_after_s"),
        (
            r#"{"fault_oversized_bytes": 10000000000}"#,
            "fault_oversized_bytes",
        ),
    ] {
        assert_eq!(
            field_of(SimConfig::from_json(json).unwrap_err()),
            field,
            "{json}"
        );
    }
    // Fractions that add up to exactly 1 are fine.
    SimConfig::from_json(r#"{"faults": {"http_503": 0.7, "http_500": 0.2, "http_429": 0.1}}"#)
        .unwrap();
}

#[test]
fn capacity_is_read_and_validated() {
    assert_eq!(SimConfig::default().capacity, None);
    let c = SimConfig::from_json(r#"{"capacity": {}}"#).unwrap();
    assert_eq!(c.capacity, Some(Capacity::default()));
    let c = SimConfig::from_json(
        r#"{"capacity": {"max_num_seqs": 8, "kv_cache_tokens": 4000, "batch_step_cost": 0.05, "prefix_caching": false}}"#,
    )
    .unwrap();
    let cap = c.capacity.unwrap();
    assert_eq!((cap.max_num_seqs, cap.kv_budget()), (8, Some(4000)));
    assert!(!cap.prefix_caching && Capacity::default().prefix_caching);
    assert_eq!(cap.decode_step_us(10_000, 0), 0);
    assert_eq!(cap.decode_step_us(10_000, 1), 10_000);
    assert_eq!(cap.decode_step_us(10_000, 5), 12_000);
    for (json, field) in [
        (r#"{"capacity": {"max_seqs": 8}}"#, "capacity.max_seqs"),
        (
            r#"{"capacity": {"max_num_seqs": 0}}"#,
            "capacity.max_num_seqs",
        ),
        (
            r#"{"capacity": {"max_num_seqs": -1}}"#,
            "capacity.max_num_seqs",
        ),
        (
            r#"{"capacity": {"batch_step_cost": -0.1}}"#,
            "capacity.batch_step_cost",
        ),
        (r#"{"capacity": 8}"#, "capacity"),
        (
            r#"{"capacity": {"prefix_caching": "yes"}}"#,
            "capacity.prefix_caching",
        ),
    ] {
        assert_eq!(
            field_of(SimConfig::from_json(json).unwrap_err()),
            field,
            "{json}"
        );
    }
}

#[test]
fn step_cost_scales_with_draft_len() {
    let c = SimConfig {
        tpot_ms: 10.0,
        spec_draft_len: 4,
        spec_step_cost: 0.25,
        ..SimConfig::default()
    };
    assert_eq!(c.step_us(), 20_000);
    let off = SimConfig {
        spec_draft_len: 0,
        ..c
    };
    assert_eq!(off.step_us(), 10_000);
}

#[test]
fn knee_of_a_fixed_mix() {
    let config = SimConfig {
        tpot_ms: 10.0,
        prefill_us_per_token: 100.0,
        ..SimConfig::default()
    };
    let cap = Capacity {
        max_num_seqs: 4,
        kv_cache_tokens: 0,
        batch_step_cost: 0.05,
        batch_step_factors: Vec::new(),
        prefix_caching: true,
        max_num_batched_tokens: 0,
    };
    // 20 tokens: 19 steps, 0.2 admitted and 3.8 decoding per iteration;
    // T = 10 ms × (1 + 0.05 × 2.8) + 1 ms × 0.2 = 11.6 ms.
    let knee = config.knee_rate(&cap, 10, 20);
    assert!((knee - 0.2 / 0.0116).abs() < 1e-9, "{knee}");
    // A KV budget for two such requests halves the slots.
    let kv = Capacity {
        kv_cache_tokens: 60,
        ..cap.clone()
    };
    let knee2 = config.knee_rate(&kv, 10, 20);
    let t2 = 0.01 * (1.0 + 0.05 * 0.9) + 0.001 * 0.1;
    assert!((knee2 - 0.1 / t2).abs() < 1e-9, "{knee2}");
    // Speculation that always accepts 3 drafts: 4 tokens a step.
    let spec = SimConfig {
        spec_draft_len: 3,
        spec_acceptance: 1.0,
        spec_step_cost: 0.0,
        ..config.clone()
    };
    let steps = 19.0 / 4.0;
    let admitted = 4.0 / (1.0 + steps);
    let t = 0.01 * (1.0 + 0.05 * (4.0 - admitted - 1.0)) + 0.001 * admitted;
    assert!((spec.knee_rate(&cap, 10, 20) - admitted / t).abs() < 1e-6);
}
