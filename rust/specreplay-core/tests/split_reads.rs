//! Where a socket read ends is up to the network, so the parser and decoders
//! must give the same answer for every way of cutting a stream into reads,
//! and must survive any bytes at all.

use proptest::prelude::*;
use specreplay_core::decode::{decode_body, decoder_for, Dialect, Record};
use specreplay_core::sse::{SseError, SseEvent, SseParser};

const VECTORS: &[(&str, Dialect)] = &[
    ("chat_vllm_reasoning.sse", Dialect::Chat),
    ("chat_vllm_transition.sse", Dialect::Chat),
    ("chat_sglang.sse", Dialect::Chat),
    ("chat_llamacpp.sse", Dialect::Chat),
    ("chat_llamacpp_timings_per_token.sse", Dialect::Chat),
    ("chat_llamacpp_scripted.sse", Dialect::Chat),
    ("chat_vllm_scripted.sse", Dialect::Chat),
    ("chat_vllm_scripted_trap_continuous.sse", Dialect::Chat),
    ("chat_vllm_continuous_usage.sse", Dialect::Chat),
    ("chat_openrouter_error.sse", Dialect::Chat),
    ("chat_deepseek_keepalive.sse", Dialect::Chat),
    ("chat_tool_calls.sse", Dialect::Chat),
    ("chat_truncated.sse", Dialect::Chat),
    ("completions_vllm.sse", Dialect::Completions),
    ("responses_full.sse", Dialect::Responses),
    ("responses_incomplete.sse", Dialect::Responses),
    ("responses_failed.sse", Dialect::Responses),
    ("responses_error_event.sse", Dialect::Responses),
    ("anthropic_thinking.sse", Dialect::Anthropic),
    ("anthropic_error.sse", Dialect::Anthropic),
    ("anthropic_max_tokens.sse", Dialect::Anthropic),
];

#[derive(Debug, Clone, Copy)]
enum Ending {
    Lf,
    CrLf,
    Cr,
}

fn vector(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The recorded stream re-spelled with another line ending and optional BOM
/// (the vectors hold no raw CR, and JSON escapes newlines inside strings).
fn variant(name: &str, ending: Ending, bom: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if bom {
        out.extend_from_slice(b"\xEF\xBB\xBF");
    }
    for &b in &vector(name) {
        match (b, ending) {
            (b'\n', Ending::CrLf) => out.extend_from_slice(b"\r\n"),
            (b'\n', Ending::Cr) => out.push(b'\r'),
            _ => out.push(b),
        }
    }
    out
}

/// Parses `reads` in order; returns the events (the unterminated one last) and the records.
fn run(reads: &[&[u8]], dialect: Dialect) -> (Vec<SseEvent>, Vec<Record>) {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    for r in reads {
        parser.feed(r, &mut events).unwrap();
    }
    events.extend(parser.finish().unwrap());
    let mut decoder = decoder_for(dialect);
    let mut records = Vec::new();
    for ev in &events {
        decoder.decode(ev, &mut records).unwrap();
    }
    (events, records)
}

fn split_at_points<'a>(bytes: &'a [u8], points: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = points.iter().map(|p| p % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut reads = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for cut in cuts {
        reads.push(&bytes[start..cut]);
        start = cut;
    }
    reads.push(&bytes[start..]);
    reads
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![Just(Ending::Lf), Just(Ending::CrLf), Just(Ending::Cr)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_split_gives_same_events_and_records(
        which in 0..VECTORS.len(),
        ending in ending(),
        bom in any::<bool>(),
        points in prop::collection::vec(any::<usize>(), 0..40),
    ) {
        let (name, dialect) = VECTORS[which];
        let bytes = variant(name, ending, bom);
        let (whole_events, whole_records) = run(&[&bytes], dialect);
        let (split_events, split_records) = run(&split_at_points(&bytes, &points), dialect);
        prop_assert_eq!(&split_events, &whole_events);
        prop_assert_eq!(&split_records, &whole_records);
        // The spelling of line ends and the BOM must not change what was said.
        let (_, plain_records) = run(&[&vector(name)], dialect);
        prop_assert_eq!(&whole_records, &plain_records);
        prop_assert!(!whole_records.is_empty());
    }

    #[test]
    fn byte_at_a_time_matches_whole(which in 0..VECTORS.len(), ending in ending(), bom in any::<bool>()) {
        let (name, dialect) = VECTORS[which];
        let bytes = variant(name, ending, bom);
        let reads: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(run(&reads, dialect), run(&[&bytes], dialect));
    }

}

/// The never-panic properties double as the fuzz run: `SPECREPLAY_FUZZ_CASES`
/// sets how many inputs each tries (CI runs 20,000; `make test` sets it).
fn fuzz_cases() -> u32 {
    std::env::var("SPECREPLAY_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases()))]

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
        points in prop::collection::vec(any::<usize>(), 0..16),
        limit in 1usize..4096,
    ) {
        exercise(&bytes, &points, limit);
    }

    #[test]
    fn sse_and_json_shaped_noise_never_panics(
        parts in prop::collection::vec(prop::sample::select(FRAGMENTS), 0..64),
        points in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let bytes: Vec<u8> = parts.concat();
        exercise(&bytes, &points, 1 << 20);
    }

    #[test]
    fn damaged_vectors_never_panic(
        which in 0..VECTORS.len(),
        cut in any::<usize>(),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        points in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let mut bytes = vector(VECTORS[which].0);
        bytes.truncate(cut % (bytes.len() + 1));
        for (at, b) in flips {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] = b;
            }
        }
        exercise(&bytes, &points, 1 << 20);
    }
}

/// Pieces that steer random input into deep parser and decoder paths.
const FRAGMENTS: &[&[u8]] = &[
    b"data: ",
    b"data:",
    b"event: ",
    b"id: 1",
    b"retry: 10",
    b": c",
    b"\n",
    b"\r",
    b"\r\n",
    b"\xEF\xBB\xBF",
    b"\xEF\xBB",
    b"\xFF",
    b"\xC3",
    b"\xA9",
    b"[DONE]",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"null",
    b"-1",
    b"1e400",
    b"12.5",
    b"\"x\"",
    b"\"\"",
    b"\"\\ud800\"",
    b"{\"choices\":[{\"delta\":{\"content\":",
    b"{\"choices\":[{\"text\":",
    b"\"reasoning\":\"r\",\"reasoning_content\":",
    b"\"tool_calls\":[{\"function\":{\"arguments\":",
    b"\"finish_reason\":",
    b"\"usage\":{\"prompt_tokens\":",
    b"\"completion_tokens_details\":{\"reasoning_tokens\":",
    b"\"timings\":{\"prompt_ms\":",
    b"\"error\":",
    b"{\"message\":\"m\",\"code\":",
    b"{\"type\":\"response.completed\",\"response\":",
    b"{\"type\":\"response.incomplete\",\"response\":{\"incomplete_details\":",
    b"{\"type\":\"response.failed\",\"response\":{\"error\":",
    b"{\"type\":\"response.output_text.delta\",\"delta\":",
    b"{\"type\":\"error\",\"code\":",
    b"{\"type\":\"message_start\",\"message\":{\"usage\":",
    b"{\"type\":\"content_block_delta\",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":",
    b"{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":",
    b"{\"type\":\"message_stop\"}",
    b"{\"status\":\"completed\",\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":",
    b"{\"content\":[{\"type\":\"tool_use\",\"input\":",
];

/// Feeds `bytes` in the given reads and decodes every event and the whole
/// payload with every dialect. Errors are fine; panics and lost errors are not.
fn exercise(bytes: &[u8], points: &[usize], limit: usize) {
    let mut parser = SseParser::with_max_event_bytes(limit);
    let mut events = Vec::new();
    let mut failed: Option<SseError> = None;
    for r in split_at_points(bytes, points) {
        if let Err(e) = parser.feed(r, &mut events) {
            failed = Some(e);
            break;
        }
    }
    match parser.finish() {
        Ok(tail) => {
            assert!(failed.is_none(), "finish must repeat an earlier error");
            events.extend(tail);
        }
        Err(e) => assert!(failed.is_none() || failed == Some(e)),
    }
    for dialect in [
        Dialect::Chat,
        Dialect::Completions,
        Dialect::Responses,
        Dialect::Anthropic,
    ] {
        let mut decoder = decoder_for(dialect);
        let mut records = Vec::new();
        for ev in &events {
            let _ = decoder.decode(ev, &mut records);
        }
        let _ = decode_body(dialect, bytes);
        if let Ok(s) = std::str::from_utf8(bytes) {
            let _ = decoder.decode(
                &SseEvent {
                    data: s.to_owned(),
                    ..Default::default()
                },
                &mut records,
            );
        }
    }
}
