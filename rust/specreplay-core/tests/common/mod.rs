//! Helpers shared by the engine's integration tests.

use std::time::Duration;

use specreplay_core::engine::{EngineRun, RequestRecord};

/// Every record of `run`, in the order they finished; fails the test if the
/// run has not ended within a minute.
pub async fn drain(mut run: EngineRun) -> Vec<RequestRecord> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Some(batch) = run.next_records(64, Duration::from_millis(100)).await {
        out.extend(batch);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not end"
        );
    }
    out
}
