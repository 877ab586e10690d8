//! Real-time scheduling for the threads that must act at a moment.
//!
//! On a loaded machine a thread woken at its deadline waits in the run queue
//! behind whatever holds the core (the server, other tenants) for tens to
//! hundreds of µs, and that wait is the send lag's tail (docs/benchmarks.md,
//! issue 27). A `SCHED_FIFO` thread preempts every normal thread the moment
//! it wakes. Only allowed for root or with `CAP_SYS_NICE` (or an
//! `RLIMIT_RTPRIO`): elsewhere the thread stays as it was, and the caller
//! learns which it got. Asked for by the process (`set_wanted`: the CLI's
//! `--realtime`, on by default only against the embedded simulator, which
//! takes the same policy) or `SPECREPLAY_REALTIME=1`: a server of its own on
//! the same machine would otherwise wait behind the client. Measured: a closed loop of 1,024 streams against a mock
//! server on the same two cores took 8.2-8.5 s real-time, 4.3-5.1 s at the
//! normal policy, the same work (docs/benchmarks.md).
//!
//! The pacing thread runs one step above the engine's workers, so a busy
//! worker never delays a send's start; the workers, above the server and
//! everything else, so the task the pacer started runs at once. A real-time
//! thread that never sleeps would starve the rest of the core: the pacer
//! spins at most `pacing`'s window per send, and the kernel keeps a share of
//! every second for normal threads (`sched_rt_runtime_us`, the fair server).

use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};

/// The scheduling a thread ended up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// `SCHED_FIFO` at this priority.
    Fifo(i32),
    /// The normal policy (not permitted, or not Linux).
    Normal,
}

impl Policy {
    /// As the results file records it (the kernel's names):
    /// `SCHED_FIFO:<priority>` or `SCHED_OTHER`.
    pub fn name(self) -> String {
        match self {
            Policy::Fifo(p) => format!("SCHED_FIFO:{p}"),
            Policy::Normal => "SCHED_OTHER".into(),
        }
    }

    /// Ordered from the weakest: the normal policy 0, FIFO its priority (>= 1).
    fn code(self) -> i32 {
        match self {
            Policy::Fifo(p) => p,
            Policy::Normal => 0,
        }
    }
}

/// A policy that one thread records and others read: what a thread actually
/// got, for the results file. Empty until recorded.
#[derive(Debug)]
pub struct PolicyCell(AtomicI32);

const UNSET: i32 = i32::MAX;

impl PolicyCell {
    pub const fn new() -> Self {
        Self(AtomicI32::new(UNSET))
    }

    pub fn set(&self, policy: Policy) {
        self.0.store(policy.code(), Ordering::Relaxed);
    }

    /// Keeps the weaker of what it holds and `policy`: one cell for many
    /// threads says what the least of them got.
    fn lower(&self, policy: Policy) {
        self.0.fetch_min(policy.code(), Ordering::Relaxed);
    }

    pub fn get(&self) -> Option<Policy> {
        match self.0.load(Ordering::Relaxed) {
            UNSET => None,
            0 => Some(Policy::Normal),
            p => Some(Policy::Fifo(p)),
        }
    }
}

impl Default for PolicyCell {
    fn default() -> Self {
        Self::new()
    }
}

/// What the engine's worker threads got (the weakest of them), once the
/// runtime has started them (`raise_worker`).
static WORKERS_GOT: PolicyCell = PolicyCell::new();

/// The lowest real-time priority: above every normal thread, below the
/// kernel's own real-time threads and anything a user raised on purpose.
pub const LOW_FIFO: i32 = 1;

/// The engine's workers' priority; the pacing thread's is one above.
pub const WORKERS: i32 = LOW_FIFO;
pub const PACER: i32 = LOW_FIFO + 1;

/// What the process decided (`set_wanted`): 0 nothing yet, 1 no, 2 yes.
static DECIDED: AtomicU8 = AtomicU8::new(0);

/// Decides for the process, over the environment: the CLI sets it from
/// `--realtime` and where the runs' servers are, once, before the first
/// point. (Writing the variable instead would make the next command run in
/// the same process read its predecessor's decision as its own flag.)
pub fn set_wanted(wanted: bool) {
    DECIDED.store(if wanted { 2 } else { 1 }, Ordering::Relaxed);
}

/// Whether the engine's threads should ask for real-time scheduling: as
/// decided (`set_wanted`), else as `SPECREPLAY_REALTIME` says.
pub fn wanted() -> bool {
    match DECIDED.load(Ordering::Relaxed) {
        0 => wanted_by(std::env::var("SPECREPLAY_REALTIME").ok().as_deref()),
        decided => decided == 2,
    }
}

/// Only an explicit `1` opts in.
fn wanted_by(setting: Option<&str>) -> bool {
    setting.is_some_and(|v| v.trim() == "1")
}

/// `try_fifo(priority)` unless [`wanted`] says no.
pub fn raise(priority: i32) -> Policy {
    if wanted() {
        try_fifo(priority)
    } else {
        current()
    }
}

/// `raise(WORKERS)` for one of the engine's worker threads, recorded for
/// [`workers`].
pub fn raise_worker() -> Policy {
    let got = raise(WORKERS);
    WORKERS_GOT.lower(got);
    got
}

/// What the engine's workers got: the weakest policy any of them ended up
/// with; None before the runtime started any.
pub fn workers() -> Option<Policy> {
    WORKERS_GOT.get()
}

/// Puts the calling thread under `SCHED_FIFO` at `priority` if permitted.
pub fn try_fifo(priority: i32) -> Policy {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param {
            sched_priority: priority,
        };
        // SAFETY: pid 0 is the calling thread; `param` outlives the call.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
            return Policy::Fifo(priority);
        }
    }
    let _ = priority;
    Policy::Normal
}

/// The calling thread's policy now.
pub fn current() -> Policy {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain queries of the calling thread.
        let policy = unsafe { libc::sched_getscheduler(0) };
        if policy == libc::SCHED_FIFO {
            let mut param = libc::sched_param { sched_priority: 0 };
            unsafe { libc::sched_getparam(0, &mut param) };
            return Policy::Fifo(param.sched_priority);
        }
    }
    Policy::Normal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_reports_what_it_got() {
        // On its own thread: the test harness's threads stay as they were.
        std::thread::spawn(|| {
            let got = try_fifo(LOW_FIFO);
            assert_eq!(current(), got);
            assert!(matches!(got, Policy::Fifo(LOW_FIFO) | Policy::Normal));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_cell_holds_the_weakest_policy_recorded() {
        let cell = PolicyCell::new();
        assert_eq!(cell.get(), None);
        cell.lower(Policy::Fifo(PACER));
        assert_eq!(cell.get(), Some(Policy::Fifo(PACER)));
        cell.lower(Policy::Fifo(WORKERS));
        cell.lower(Policy::Normal);
        cell.lower(Policy::Fifo(PACER));
        assert_eq!(cell.get(), Some(Policy::Normal));
        cell.set(Policy::Fifo(WORKERS));
        assert_eq!(cell.get(), Some(Policy::Fifo(WORKERS)));
        assert_eq!(Policy::Fifo(2).name(), "SCHED_FIFO:2");
        assert_eq!(Policy::Normal.name(), "SCHED_OTHER");
    }

    #[test]
    fn only_one_opts_in() {
        assert!(!wanted_by(None));
        assert!(wanted_by(Some("1")));
        assert!(wanted_by(Some(" 1 ")));
        assert!(!wanted_by(Some("")));
        assert!(!wanted_by(Some("0")));
    }

    #[test]
    fn an_impossible_priority_leaves_the_thread_normal() {
        std::thread::spawn(|| {
            assert_eq!(try_fifo(1000), Policy::Normal);
            assert_eq!(current(), Policy::Normal);
        })
        .join()
        .unwrap();
    }
}
