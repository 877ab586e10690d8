//! The extension's tokio runtimes, one per job so that no job's bursts delay
//! another's timestamps. Calls that wait (`EngineRun.next_batch`) release the
//! GIL and wait at most a quarter second, so Python sees Ctrl-C between two
//! waits and cancels the run through its token.
//!
//! Each runtime starts on first use. If it cannot start (the process may not
//! create threads: a container's pids limit, `RLIMIT_NPROC`, no memory for a
//! stack), the call that needed it raises `EngineError` saying so: tokio
//! reports some of these failures by panicking, so the construction runs
//! under `catch_unwind`, and a panic inside a `LazyLock` would otherwise
//! poison it and reach Python as a `PanicException`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::LazyLock;

use pyo3::PyResult;
use specreplay_core::engine::priority;
use tokio::runtime::{Builder, Runtime};

use crate::errors::engine_error;

/// A runtime started on first use, or why it could not be.
pub struct LazyRuntime {
    /// Whose runtime, for the message ("the engine", "the simulator", …).
    what: &'static str,
    runtime: LazyLock<Result<Runtime, String>>,
}

impl LazyRuntime {
    const fn new(what: &'static str, build: fn() -> Result<Runtime, String>) -> Self {
        LazyRuntime {
            what,
            runtime: LazyLock::new(build),
        }
    }

    /// The runtime, or an `EngineError` naming why it could not start.
    pub fn get(&'static self) -> PyResult<&'static Runtime> {
        self.runtime.as_ref().map_err(|why| {
            engine_error(format!(
                "could not start {}'s tokio runtime: {why} (can this process create threads? \
                 check the container's pids limit and `ulimit -u`)",
                self.what
            ))
        })
    }
}

/// `builder`'s runtime, its error or its panic as a message.
fn build(mut builder: Builder) -> Result<Runtime, String> {
    match catch_unwind(AssertUnwindSafe(|| builder.enable_all().build())) {
        Ok(Ok(runtime)) => Ok(runtime),
        Ok(Err(e)) => Err(e.to_string()),
        Err(payload) => Err(specreplay_core::panic_message(payload.as_ref())),
    }
}

pub static RUNTIME: LazyRuntime = LazyRuntime::new("the engine", || {
    let mut builder = Builder::new_multi_thread();
    builder.thread_name("specreplay");
    // Real-time where permitted: the task a send starts in runs as soon as
    // the pacing thread hands it over (engine/priority.rs).
    builder.on_thread_start(|| {
        priority::raise_worker();
    });
    build(builder)
});

/// The simulator's own runtime: one worker thread, so a simulated server in
/// the same process never runs on (and delays) the engine's workers, whose
/// reads it would otherwise push back by its own chunk bursts. One core holds
/// about 45 000 chunks/s (docs/simulator.md). `specreplay serve` runs on it
/// at the normal policy, like any server the engine is pointed at.
pub static SIM_RUNTIME: LazyRuntime =
    LazyRuntime::new("the simulator", || build(sim_builder("specreplay-sim")));

/// The runtime of a simulator embedded in the replaying process: real-time
/// like the engine's workers where permitted. Left at the normal policy
/// beside real-time workers, it falls behind its own schedule at a few
/// thousand requests/s and sends its steps in bursts (docs/benchmarks.md).
pub static EMBEDDED_SIM_RUNTIME: LazyRuntime = LazyRuntime::new("the embedded simulator", || {
    let mut builder = sim_builder("specreplay-esim");
    builder.on_thread_start(|| {
        priority::raise(priority::WORKERS);
    });
    build(builder)
});

fn sim_builder(thread_name: &str) -> Builder {
    let mut builder = Builder::new_multi_thread();
    builder.worker_threads(1).thread_name(thread_name);
    builder
}

/// The capture proxy's own runtime (`CaptureProxy`): its forwarding shares
/// no thread with the engine, the simulator or Python, so nothing else in the
/// process delays a chunk on its way through. Two workers, so one burst of
/// chunks is spread over two threads.
pub static PROXY_RUNTIME: LazyRuntime = LazyRuntime::new("the capture proxy", || {
    let mut builder = Builder::new_multi_thread();
    builder.worker_threads(2).thread_name("specreplay-proxy");
    build(builder)
});
