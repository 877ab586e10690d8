//! What reading a request with an image costs the simulator: `SimRequest::parse`
//! (JSON parse, prompt hash, media tokens, prefix blocks) of a chat body with
//! one data-URI image of N KiB, against the same body without it, in one run.
//! Prints figures; asserts nothing.
//!
//!     cargo run --release -p specreplay-core --example sim_media -- [KIB...]

#![allow(clippy::print_stdout)] // a bench prints its figures

use std::time::Instant;

use base64::Engine;
use specreplay_core::sim::request::{Endpoint, MediaRule, SimRequest};

/// A PNG of about `kib` KiB: a real 1024×768 IHDR, then filler bytes.
fn png_uri(kib: usize) -> String {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend(1024u32.to_be_bytes());
    b.extend(768u32.to_be_bytes());
    b.extend([8, 2, 0, 0, 0]);
    b.extend((0..kib * 1024).map(|i| (i * 31 % 251) as u8));
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(b)
    )
}

fn body(image: Option<&str>) -> Vec<u8> {
    let mut parts = vec![serde_json::json!({"type": "text", "text": "what is in this picture"})];
    if let Some(url) = image {
        parts.push(serde_json::json!({"type": "image_url", "image_url": {"url": url}}));
    }
    serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": parts}]})
        .to_string()
        .into_bytes()
}

/// Mean µs per parse over `n` parses.
fn per_parse(body: &[u8], rule: &MediaRule, n: u32) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        let r = SimRequest::parse(Endpoint::Chat, body, rule).unwrap();
        std::hint::black_box(r);
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("sizes in KiB"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![64, 256, 1024]
    } else {
        sizes
    };
    let rule = MediaRule::default();
    let text = body(None);
    println!(
        "text only ({} B): {:.1} us per parse",
        text.len(),
        per_parse(&text, &rule, 20_000)
    );
    for kib in sizes {
        let with = body(Some(&png_uri(kib)));
        let n = (200_000 / kib.max(1)).clamp(50, 20_000) as u32;
        let us = per_parse(&with, &rule, n);
        println!(
            "image {kib} KiB ({} B body): {us:.1} us per parse, {:.2} ms per MB of body",
            with.len(),
            us / 1000.0 / (with.len() as f64 / 1e6)
        );
    }
}
