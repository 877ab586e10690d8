//! Watches for the machine's own stalls on every CPU the engine may use,
//! while an open-loop point with a real-time pacer runs.
//!
//! The pacing thread notes when its own waits end late (`pacing::WakeStats`),
//! but it sees one CPU at a time: when the hypervisor takes away the vCPU of
//! the worker holding a due task, the pacer wakes on time, the task waits,
//! and its send is late for a reason the pacer cannot see. At 4,000/s two
//! runs in twelve were called `client_saturated` that way while the host
//! took 500-770 ms of a 4 s run (docs/benchmarks.md, "The machine's
//! stalls"). So each CPU gets a watch: a thread pinned to it, real-time one
//! step above the pacer, that sleeps `PERIOD` at a time and notes each wake
//! `pacing::HELD_MIN` or more late, as `bench/machine_stalls.py`'s canary
//! does from outside.
//!
//! A stall counts only when the guest's scheduler did not see the watch wait
//! for its CPU (its run-queue wait, /proc/thread-self/schedstat, under half
//! the stall): then the timer itself fired late, so the vCPU was not
//! running. A wait the guest did see is something on this machine holding
//! the CPU: a kernel path that does not yield, real-time throttling of the
//! client's own threads. That may be the client's own load, so it is never
//! counted as the machine's.
//!
//! Cost: one wake per CPU per millisecond. Measured at 5,000 req/s against
//! `specreplay serve` (`bench/send_lag_profile.py`, 2 CPUs): the two watches
//! took 0.05-0.10 s of CPU over a 3 s point, 1-2% of a core each, and the
//! send lag p99 was 47-145 µs (docs/benchmarks.md, "Every CPU watched").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::pacing::{self, WakeStats};
use super::priority::{self, Policy};

/// How long a watch sleeps between looks: short against the stalls it is
/// for (≥ 0.25 ms, usually milliseconds), long against its own cost.
pub const PERIOD: Duration = Duration::from_millis(1);

/// The watches' priority: above the pacer, so nothing of the client's own
/// can hold them up.
pub const WATCH: i32 = priority::PACER + 1;

/// Running watches, one per CPU; `stop` joins them and gives their spans.
/// Dropped without `stop` (the pacer unwinding), they stop on their own.
pub struct StallWatch {
    stop: Arc<AtomicBool>,
    watches: Option<JoinHandle<Watched>>,
}

/// What the watches saw, once stopped.
#[derive(Debug, Default)]
pub struct Watched {
    /// Whether every CPU had its watch, pinned and real-time; when not, no
    /// watch ran (what one saw at the normal policy would be ordinary
    /// scheduling) and there are no spans.
    pub every_cpu: bool,
    /// Every CPU's stalls as (planned wake, actual wake), earliest first,
    /// the first `pacing::HELD_KEPT`.
    pub spans: Vec<(Instant, Instant)>,
    /// How many more there were.
    pub dropped: u64,
}

impl StallWatch {
    /// One watch per CPU this process may run on. The watches are started
    /// by a thread of their own, so the caller (the pacer, at its first
    /// due time) waits for one thread's start, not one per CPU.
    pub fn start() -> Option<StallWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = stop.clone();
        let watches = std::thread::Builder::new()
            .name("specreplay-watches".into())
            .spawn(move || watch_every_cpu(&stop_flag))
            .ok()?;
        Some(StallWatch {
            stop,
            watches: Some(watches),
        })
    }

    /// Stops the watches and gives what they saw.
    pub fn stop(mut self) -> Watched {
        self.stop.store(true, Ordering::Relaxed);
        let watches = self.watches.take();
        watches.and_then(|w| w.join().ok()).unwrap_or_default()
    }
}

impl Drop for StallWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts a watch on every allowed CPU, runs them until `stop`, and joins
/// them. A watch that cannot be pinned or made real-time stops them all.
fn watch_every_cpu(stop: &Arc<AtomicBool>) -> Watched {
    let placed = Arc::new(AtomicBool::new(true));
    let mut threads = Vec::new();
    for cpu in allowed_cpus() {
        let (its_stop, its_placed) = (stop.clone(), placed.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("specreplay-watch{cpu}"))
            .spawn(move || {
                if pin_to(cpu) && matches!(priority::try_fifo(WATCH), Policy::Fifo(_)) {
                    watch(&its_stop)
                } else {
                    its_placed.store(false, Ordering::Relaxed);
                    its_stop.store(true, Ordering::Relaxed);
                    WakeStats::default()
                }
            });
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(_) => {
                placed.store(false, Ordering::Relaxed);
                stop.store(true, Ordering::Relaxed);
                break;
            }
        }
    }
    let stats: Vec<WakeStats> = threads.into_iter().filter_map(|t| t.join().ok()).collect();
    if stats.is_empty() || !placed.load(Ordering::Relaxed) {
        return Watched::default();
    }
    let mut spans: Vec<(Instant, Instant)> =
        stats.iter().flat_map(|s| s.held.iter().copied()).collect();
    let mut dropped: u64 = stats.iter().map(|s| s.held_dropped).sum();
    spans.sort();
    if spans.len() > pacing::HELD_KEPT {
        dropped += (spans.len() - pacing::HELD_KEPT) as u64;
        spans.truncate(pacing::HELD_KEPT);
    }
    Watched {
        every_cpu: true,
        spans,
        dropped,
    }
}

/// One CPU's watch: sleeps `PERIOD` at a time until stopped, noting each
/// wake the machine held up (see the module doc).
fn watch(stop: &AtomicBool) -> WakeStats {
    pacing::tighten_timer_slack();
    let mut stats = WakeStats::default();
    let queue = RunQueueWait::open();
    let mut waited_before = queue.as_ref().and_then(RunQueueWait::read);
    while !stop.load(Ordering::Relaxed) {
        let planned = Instant::now() + PERIOD;
        std::thread::sleep(PERIOD);
        let woke = Instant::now();
        let waited = queue.as_ref().and_then(RunQueueWait::read);
        let late = woke.saturating_duration_since(planned);
        if late >= pacing::HELD_MIN && machine_took(late, waited_before, waited) {
            stats.ended(planned, woke);
        }
        waited_before = waited;
    }
    stats
}

/// Whether a wake `late` was the machine's: the thread's run-queue wait over
/// it (`before` → `after`, ns) is under half of it. Unknown waits (no
/// schedstat) count nothing: the watch cannot tell the cases apart.
fn machine_took(late: Duration, before: Option<u64>, after: Option<u64>) -> bool {
    match (before, after) {
        (Some(b), Some(a)) => (a.saturating_sub(b) as u128) * 2 < late.as_nanos(),
        _ => false,
    }
}

/// The calling thread's run-queue wait so far (the second field of
/// /proc/thread-self/schedstat, ns), read through a file kept open.
struct RunQueueWait(std::fs::File);

impl RunQueueWait {
    fn open() -> Option<RunQueueWait> {
        std::fs::File::open("/proc/thread-self/schedstat")
            .ok()
            .map(RunQueueWait)
    }

    fn read(&self) -> Option<u64> {
        let mut buf = [0u8; 96];
        let n = read_at_start(&self.0, &mut buf)?;
        parse_run_queue_wait(std::str::from_utf8(&buf[..n]).ok()?)
    }
}

#[cfg(unix)]
fn read_at_start(file: &std::fs::File, buf: &mut [u8]) -> Option<usize> {
    use std::os::unix::fs::FileExt;
    file.read_at(buf, 0).ok()
}

#[cfg(not(unix))]
fn read_at_start(_file: &std::fs::File, _buf: &mut [u8]) -> Option<usize> {
    None
}

/// `<cpu time ns> <run-queue wait ns> <timeslices>` → the wait.
fn parse_run_queue_wait(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

/// The CPUs this process may run on (its affinity mask).
fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; pid 0 is this thread.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }
            == 0
        {
            return (0..libc::CPU_SETSIZE as usize)
                .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
                .collect();
        }
    }
    Vec::new()
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: as in `allowed_cpus`; the set outlives the call.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::CPU_SET(cpu, &mut set) };
        return unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) }
            == 0;
    }
    #[allow(unreachable_code)]
    {
        let _ = cpu;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_the_guest_saw_queued_is_not_the_machines() {
        let late = Duration::from_micros(1000);
        // 100 µs of run-queue wait over a 1 ms stall: the vCPU was gone.
        assert!(machine_took(late, Some(5_000), Some(105_000)));
        // 600 µs of it: something on this machine held the CPU.
        assert!(!machine_took(late, Some(5_000), Some(605_000)));
        // Exactly half is not under half.
        assert!(!machine_took(late, Some(0), Some(500_000)));
        // No schedstat: nothing is counted.
        assert!(!machine_took(late, None, Some(1)));
        assert!(!machine_took(late, Some(1), None));
    }

    #[test]
    fn schedstat_gives_its_second_field() {
        assert_eq!(parse_run_queue_wait("123 456 7\n"), Some(456));
        assert_eq!(parse_run_queue_wait("123"), None);
        assert_eq!(parse_run_queue_wait("a b c"), None);
    }

    #[test]
    fn this_threads_run_queue_wait_is_read() {
        if let Some(queue) = RunQueueWait::open() {
            let first = queue.read().expect("a schedstat line");
            std::thread::sleep(Duration::from_millis(2));
            assert!(queue.read().expect("a schedstat line") >= first);
        }
    }

    #[test]
    fn watches_run_on_every_cpu_real_time_or_not_at_all_and_stop_with_sorted_spans() {
        std::thread::spawn(|| {
            let watch = StallWatch::start().expect("a thread to start the watches");
            std::thread::sleep(Duration::from_millis(20));
            let seen = watch.stop();
            // Not permitted here (no root, no CAP_SYS_NICE): no watch ran.
            assert_eq!(
                seen.every_cpu,
                matches!(priority::try_fifo(WATCH), Policy::Fifo(_))
            );
            if !seen.every_cpu {
                assert!(seen.spans.is_empty() && seen.dropped == 0);
            }
            assert!(seen.spans.windows(2).all(|w| w[0] <= w[1]));
            assert!(seen
                .spans
                .iter()
                .all(|(planned, woke)| *woke >= *planned + pacing::HELD_MIN));
            assert!(seen.spans.len() <= pacing::HELD_KEPT);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn dropped_watches_stop_by_themselves() {
        let watch = StallWatch::start().expect("a thread to start the watches");
        let stop = watch.stop.clone();
        drop(watch);
        assert!(stop.load(Ordering::Relaxed));
    }
}
