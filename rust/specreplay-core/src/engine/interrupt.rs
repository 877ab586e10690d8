//! A request's work raced against what ends it early (its deadline, the run's
//! cancellation), without paying for the race at every chunk.
//!
//! `tokio::select!` polls every branch whenever the task wakes, and a request
//! task wakes once per chunk: the deadline's timer entry and the run's
//! cancellation token (whose `Notified` takes the token's mutex at every
//! poll, one mutex for every request of the run) were polled per chunk for
//! nothing. Here the interrupter gets a waker of its own that raises a flag,
//! and is polled only at the start and after it woke the task.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use atomic_waker::AtomicWaker;

/// The interrupter's waker: marks that it is the one to poll, then wakes the task.
struct Flag {
    raised: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.raised.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// `work`'s output, or `interrupter`'s if that finishes first (checked
/// first when both are ready).
pub async fn unless<W: Future, I: Future>(work: W, interrupter: I) -> Result<W::Output, I::Output> {
    let mut work = pin!(work);
    let mut interrupter = pin!(interrupter);
    let flag = Arc::new(Flag {
        raised: AtomicBool::new(true), // poll it once, so it registers
        task: AtomicWaker::new(),
    });
    let waker = Waker::from(flag.clone());
    std::future::poll_fn(|cx| {
        // Before the flag is read: a wake after this reaches the current task.
        flag.task.register(cx.waker());
        if flag.raised.swap(false, Ordering::AcqRel) {
            if let Poll::Ready(out) = interrupter.as_mut().poll(&mut Context::from_waker(&waker)) {
                return Poll::Ready(Err(out));
            }
        }
        work.as_mut().poll(cx).map(Ok)
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    /// Pending forever, counting its polls.
    struct Counted<'a>(&'a AtomicUsize);

    impl Future for Counted<'_> {
        type Output = ();
        fn poll(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn the_work_wins_and_the_interrupter_is_polled_once_for_many_wakes() {
        let polls = AtomicUsize::new(0);
        let work = async {
            for _ in 0..100 {
                tokio::task::yield_now().await; // wakes the task each time
            }
            7
        };
        assert_eq!(unless(work, Counted(&polls)).await, Ok(7));
        assert_eq!(polls.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn the_interrupter_ends_work_that_waits() {
        let token = tokio_util::sync::CancellationToken::new();
        let cancel = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            cancel.cancel();
        });
        let work = std::future::pending::<()>();
        let got =
            tokio::time::timeout(Duration::from_secs(5), unless(work, token.cancelled())).await;
        assert_eq!(got, Ok(Err(())), "cancellation reached the waiting work");

        let deadline = tokio::time::sleep(Duration::from_millis(10));
        let slow = tokio::time::sleep(Duration::from_secs(5));
        assert_eq!(unless(slow, deadline).await, Err(()));
    }

    #[tokio::test]
    async fn the_interrupter_ends_work_that_keeps_waking_the_task() {
        // A request mid-stream: its task wakes at every chunk, and the
        // deadline must still end it when it fires between two wakes.
        let busy = async {
            for _ in 0..1_000_000 {
                tokio::time::sleep(Duration::from_micros(100)).await;
            }
        };
        let deadline = tokio::time::sleep(Duration::from_millis(30));
        let got = tokio::time::timeout(Duration::from_secs(5), unless(busy, deadline)).await;
        assert_eq!(got, Ok(Err(())), "the deadline ended the busy work");
    }
}
