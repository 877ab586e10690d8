//! Per-server fault counters, served as JSON by `GET /sim/stats`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::FaultKind;

/// Per-server counters, served as JSON by `GET /sim/stats`.
#[derive(Default)]
pub struct FaultStats {
    /// Generation requests that got a sequence number (valid requests).
    requests: AtomicU64,
    /// Generation requests answered 400 before that.
    rejected: AtomicU64,
    /// Requests whose fault (or `none`) came from the header.
    forced: AtomicU64,
    injected: [AtomicU64; FaultKind::ALL.len()],
}

impl FaultStats {
    pub fn count_request(&self, fault: Option<FaultKind>, forced: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if forced {
            self.forced.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(kind) = fault {
            self.injected[kind.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn count_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// `{"requests", "rejected", "forced", "faults_total", "faults": {kind: n, ...}}`.
    pub fn to_json(&self) -> Vec<u8> {
        let mut faults = serde_json::Map::new();
        let mut total = 0;
        for kind in FaultKind::ALL {
            let n = self.injected[kind.index()].load(Ordering::Relaxed);
            total += n;
            faults.insert(kind.as_str().into(), n.into());
        }
        let body = serde_json::json!({
            "requests": self.requests.load(Ordering::Relaxed),
            "rejected": self.rejected.load(Ordering::Relaxed),
            "forced": self.forced.load(Ordering::Relaxed),
            "faults_total": total,
            "faults": faults,
        });
        serde_json::to_vec(&body).expect("serializing stats into memory cannot fail")
    }
}
