//! Cost of synthesizing prompt text from block ids (`specreplay_core::prompt`),
//! per block and per request, over a whole trace. Prints figures; asserts
//! nothing.
//!
//!     cargo run --release -p specreplay-core --example prompt_synthesis -- TRACE [ROUNDS]
//!
//! TRACE is a compact specreplay trace (lines with `prompt_blocks`) or a
//! Mooncake/Bailian source (`input_length`, `hash_ids`, 512-token blocks).
//! Each round builds every request's text once into a reused buffer (as the
//! engine would, one request at a time); the best round is reported, so the
//! figures are the synthesis itself, not the machine's noise.
//!
//! Then the same prompts into a request body, both ways in the same rounds:
//! as the engine does it (`body::with_prompt`, the words written straight
//! into the body) and as it did before (the text built on its own, then
//! copied into the body with its JSON-escape scan: `body::insert`).

#![allow(clippy::print_stdout)] // a bench prints its figures

use std::io::BufRead;
use std::time::Instant;

use serde_json::Value;
use specreplay_core::engine::body;
use specreplay_core::prompt::{Filler, PromptBlocks};

struct Prompt {
    tokens: u64,
    block_size: u64,
    ids: Vec<u64>,
    seed: u64,
}

impl Prompt {
    fn blocks(&self) -> PromptBlocks<'_> {
        PromptBlocks {
            tokens: self.tokens,
            block_size: self.block_size,
            hash_ids: &self.ids,
            seed: self.seed,
        }
    }
}

fn parse(line: &str) -> Option<Prompt> {
    let v: Value = serde_json::from_str(line).ok()?;
    let ids = |x: &Value| -> Option<Vec<u64>> { x.as_array()?.iter().map(Value::as_u64).collect() };
    if let Some(p) = v.get("prompt_blocks") {
        return Some(Prompt {
            tokens: p.get("tokens")?.as_u64()?,
            block_size: p.get("block_size")?.as_u64()?,
            ids: ids(p.get("hash_ids")?)?,
            seed: p.get("seed").and_then(Value::as_u64).unwrap_or(0),
        });
    }
    Some(Prompt {
        tokens: v.get("input_length")?.as_u64()?,
        block_size: 512,
        ids: ids(v.get("hash_ids")?)?,
        seed: 0,
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: prompt_synthesis TRACE [ROUNDS]");
    let rounds: usize = args
        .next()
        .map_or(5, |r| r.parse().expect("ROUNDS: a number"));
    let file = std::fs::File::open(&path).expect("cannot open the trace");
    let prompts: Vec<Prompt> = std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| parse(&l))
        .collect();
    let blocks: u64 = prompts.iter().map(|p| p.ids.len() as u64).sum();
    let tokens: u64 = prompts.iter().map(|p| p.tokens).sum();
    let filler = Filler::builtin();
    let mut out = String::new();
    let mut best = f64::INFINITY;
    let mut bytes = 0usize;
    for _ in 0..rounds {
        bytes = 0;
        let start = Instant::now();
        for p in &prompts {
            out.clear();
            filler.write(&mut out, &p.blocks()).expect("a valid prompt");
            bytes += out.len();
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!("trace: {path}");
    println!(
        "requests: {}  blocks: {blocks}  tokens: {tokens}  text: {:.1} MB",
        prompts.len(),
        bytes as f64 / 1e6
    );
    println!(
        "best of {rounds} rounds: {:.3} s  →  {:.2} µs per block, {:.1} µs per request (mean {:.0} tokens), {:.0} MB/s",
        best,
        best * 1e6 / blocks as f64,
        best * 1e6 / prompts.len() as f64,
        tokens as f64 / prompts.len() as f64,
        bytes as f64 / 1e6 / best,
    );

    // A chat body as shaping leaves it: an empty string where the prompt goes.
    let template =
        br#"{"model":"m","messages":[{"role":"user","content":""}],"max_tokens":64,"stream":true}"#;
    let at = template
        .windows(2)
        .position(|w| w == b"\"\"")
        .expect("a slot")
        + 1;
    let (mut straight, mut copied) = (f64::INFINITY, f64::INFINITY);
    let mut sink = 0usize;
    for _ in 0..rounds {
        let start = Instant::now();
        for p in &prompts {
            let blocks = p.blocks();
            sink += body::with_prompt(template, at, &blocks)
                .expect("a valid prompt")
                .len();
        }
        straight = straight.min(start.elapsed().as_secs_f64());
        let start = Instant::now();
        for p in &prompts {
            let text = filler.text(&p.blocks()).expect("a valid prompt");
            sink += body::insert(template, at, &text, "prompt_at")
                .expect("a slot")
                .len();
        }
        copied = copied.min(start.elapsed().as_secs_f64());
    }
    let per = |s: f64| s * 1e6 / prompts.len() as f64;
    println!(
        "into a body, best of {rounds} rounds: straight {:.1} µs per request, via a copy {:.1} µs ({:.0}% more)  [{sink} bytes]",
        per(straight),
        per(copied),
        (copied / straight - 1.0) * 100.0,
    );
}
