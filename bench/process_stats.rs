//! What the Rust benches under `bench/` read about their own process: CPU
//! seconds (getrusage), resident memory, command-line arguments by position.
//! Included by each bench with `#[path = "process_stats.rs"] mod process_stats;`.

/// User and system CPU seconds of this process so far.
pub fn process_cpu_s() -> (f64, f64) {
    // SAFETY: a zeroed rusage is valid, and getrusage fills it.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(r.ru_utime), secs(r.ru_stime))
}

/// This process's resident set (VmRSS), KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Positional argument `i`, parsed; panics with its name when missing or invalid.
pub fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str) -> T {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("argument {i} ({name}) missing or invalid; see the module doc"))
}

/// The bench's request body (`client_bench.payloads`): question `i % 64`.
pub fn chat_body(i: usize, max_tokens: u32) -> Vec<u8> {
    serde_json::json!({
        "model": "specreplay-sim",
        "messages": [{"role": "user", "content": format!("bench question number {}: why is the sky blue", i % 64)}],
        "stream": true,
        "max_tokens": max_tokens,
        "stream_options": {"include_usage": true},
    })
    .to_string()
    .into_bytes()
}

/// RSS samples every 250 ms from `settle_s` to `settle_s + sample_s` after
/// `started`, each with `in_flight()` at that moment.
pub fn sample_rss(
    started: std::time::Instant,
    settle_s: f64,
    sample_s: f64,
    in_flight: impl Fn() -> u64,
) -> (Vec<u64>, Vec<u64>) {
    let (mut samples, mut counts) = (Vec::new(), Vec::new());
    while started.elapsed().as_secs_f64() < settle_s + sample_s {
        std::thread::sleep(std::time::Duration::from_millis(250));
        if started.elapsed().as_secs_f64() >= settle_s {
            samples.push(rss_kib());
            counts.push(in_flight());
        }
    }
    (samples, counts)
}
