//! The one entry helper every blocking call goes through: release the GIL, run
//! the future on the private tokio runtime, and turn Ctrl-C into
//! `KeyboardInterrupt` by checking Python's signal handlers every 100 ms
//! (the pattern polars uses in `enter_polars`).

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use pyo3::prelude::*;
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

/// Runs `fut` to completion with the GIL released. If the user presses Ctrl-C
/// the future is dropped (cancelling it) and the `KeyboardInterrupt` returned.
#[allow(dead_code)]
pub fn block_on_interruptible<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    let mut fut = Box::pin(fut);
    loop {
        let step = py.detach(|| {
            RUNTIME.block_on(async {
                tokio::select! {
                    out = &mut fut => Some(out),
                    _ = tokio::time::sleep(Duration::from_millis(100)) => None,
                }
            })
        });
        match step {
            Some(out) => return out,
            None => py.check_signals()?,
        }
    }
}
