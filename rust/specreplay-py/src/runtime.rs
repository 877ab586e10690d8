//! The extension's tokio runtimes, one per job so that no job's bursts delay
//! another's timestamps. Calls that wait (`EngineRun.next_batch`) release the
//! GIL and wait at most a quarter second, so Python sees Ctrl-C between two
//! waits and cancels the run through its token.

use std::sync::LazyLock;

use tokio::runtime::Runtime;

pub static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("specreplay")
        .build()
        .expect("failed to start the tokio runtime")
});

/// The embedded simulator's own runtime: one worker thread, so a simulated
/// server in the same process never runs on (and delays) the engine's
/// workers, whose reads it would otherwise push back by its own chunk
/// bursts. One core holds about 45 000 chunks/s (docs/simulator.md).
pub static SIM_RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("specreplay-sim")
        .build()
        .expect("failed to start the simulator's tokio runtime")
});

/// The capture proxy's own runtime (`CaptureProxy`): its forwarding shares
/// no thread with the engine, the simulator or Python, so nothing else in the
/// process delays a chunk on its way through. Two workers, so one burst of
/// chunks is spread over two threads.
pub static PROXY_RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("specreplay-proxy")
        .build()
        .expect("failed to start the proxy's tokio runtime")
});
