//! Which socket read delivered a body frame: the bridge between hyper's
//! connection task, which reads the socket, and the request task, which gets
//! the body frames later.
//!
//! hyper hands out body data as zero-copy slices of its connection read
//! buffer: HTTP/1.1's decoder splits `Bytes` off that buffer (`read_mem` in
//! hyper's `proto/h1/io.rs`, for chunked and length-delimited bodies), and h2
//! keeps each DATA frame's payload as a slice of tokio-util's `FramedRead`
//! buffer (`frame::Data::load` in h2's `codec/framed_read.rs`). The stream
//! wrapper (`stream::Recording`) sees the buffer hyper reads into, so it
//! records, per read, the address range the read filled and that read's kernel
//! stamp. The request task looks up the address of a frame's **last byte**:
//! the read that wrote it is the read that completed the frame.
//!
//! Why the newest range containing the address is the right one: memory a
//! frame points at is kept alive by the frame, so no later read can write
//! there while the request task holds it; and hyper and tokio-util split a
//! frame off as soon as its last byte is read, before the next read (the only
//! time they move unconsumed bytes, in `BytesMut::reserve`), so the last byte
//! is never a copy. Two guards turn anything else into a visible miss (the
//! chunk then keeps its user-space stamp): a frame's read may not be older
//! than the previous frame's of the same response, and the log keeps only the
//! last `capacity` reads.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

use super::read_ring::ReadRing;
use crate::clock::now_us;
use crate::engine::record::Stamp;

/// `last_rx` when the latest socket read had no kernel stamp.
const NO_STAMP: i64 = i64::MIN;

/// Reads kept per HTTP/1.1 connection. The request task looks a frame up as
/// soon as it gets it, and hyper's connection task reads again only once the
/// body channel (one frame) has room, so a frame's read is at most a few
/// reads old (more only when the network cuts the chunked framing into
/// tiny reads); an older one is a visible miss (the chunk keeps the engine's
/// stamp), never a wrong stamp.
pub const H1_READS: usize = 16;
/// Reads kept per HTTP/2 connection, shared by every stream on it.
pub const H2_READS: usize = 4096;

/// One connection's record of its reads, its set-up time and whether it was
/// opened before the clock started. Shared by the connection's stream (which
/// writes it) and every response on it (through `Connected::extra`).
#[derive(Debug)]
pub struct ConnLog {
    /// Kernel stamp of the latest socket read (the ciphertext read under TLS).
    last_rx: AtomicI64,
    /// Made at the first recorded read, with `capacity` slots.
    reads: OnceLock<ReadRing>,
    capacity: AtomicUsize,
    /// TCP connect plus TLS handshake, µs; set once by the connector.
    connect_us: AtomicI64,
    preconnected: AtomicBool,
    connect_claimed: AtomicBool,
    /// HTTP/2: streams interleave, so no read answers one write.
    h2: AtomicBool,
    /// A request was written and no byte has been read since.
    awaiting_response: AtomicBool,
    /// Kernel stamp of the first read after the latest write (NO_STAMP: none).
    response_start: AtomicI64,
    /// Cancelled when the socket is dropped (`KernelStamped`'s drop).
    closed: CancellationToken,
}

/// Where a frame's stamp came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameStamp {
    /// The kernel's receive stamp of the read that completed the frame, and
    /// that read's sequence number on its connection.
    Kernel { us: i64, seq: u64 },
    /// The read was found but the kernel gave it no stamp.
    Unstamped { seq: u64 },
    /// No recorded read holds the frame's last byte.
    Miss,
}

impl ConnLog {
    pub fn new(capacity: usize) -> Self {
        ConnLog {
            last_rx: AtomicI64::new(NO_STAMP),
            reads: OnceLock::new(),
            capacity: AtomicUsize::new(capacity.max(1)),
            connect_us: AtomicI64::new(-1),
            preconnected: AtomicBool::new(false),
            connect_claimed: AtomicBool::new(false),
            h2: AtomicBool::new(false),
            awaiting_response: AtomicBool::new(false),
            response_start: AtomicI64::new(NO_STAMP),
            closed: CancellationToken::new(),
        }
    }

    /// The socket is gone: nothing more can be read on this connection.
    pub fn mark_closed(&self) {
        self.closed.cancel();
    }

    /// Resolves once the socket is gone (at once if it already is).
    pub async fn closed(&self) {
        self.closed.cancelled().await
    }

    /// The kernel stamp of the socket read that just returned (None: none given).
    pub fn set_last_rx(&self, stamp: Option<i64>) {
        self.last_rx
            .store(stamp.unwrap_or(NO_STAMP), Ordering::Relaxed);
    }

    /// hyper's buffer got `len` bytes at `start` from a read whose kernel
    /// stamp is the latest socket read's.
    pub fn record(&self, start: usize, len: usize) {
        self.record_read(start, len, self.last_rx.load(Ordering::Relaxed));
    }

    /// hyper's buffer got `len` bytes at `start` straight from the socket
    /// read stamped `stamp` (plain TCP: the socket is what hyper reads).
    pub fn record_stamped(&self, start: usize, len: usize, stamp: Option<i64>) {
        self.record_read(start, len, stamp.unwrap_or(NO_STAMP));
    }

    fn record_read(&self, start: usize, len: usize, stamp: i64) {
        // A plain load first: the swap (a locked instruction) only once per response.
        if self.awaiting_response.load(Ordering::Relaxed)
            && self.awaiting_response.swap(false, Ordering::Relaxed)
        {
            self.response_start.store(stamp, Ordering::Relaxed);
        }
        self.ring().push(start, start + len, stamp);
    }

    fn ring(&self) -> &ReadRing {
        self.reads
            .get_or_init(|| ReadRing::new(self.capacity.load(Ordering::Relaxed)))
    }

    /// HTTP/2 multiplexes every stream over one connection: keep more reads
    /// (called before the first read is recorded, when ALPN has chosen it),
    /// and no read answers a particular write.
    pub fn set_h2(&self) {
        self.h2.store(true, Ordering::Relaxed);
        self.capacity.store(H2_READS, Ordering::Relaxed);
    }

    /// Bytes were written: the next read starts the answer (HTTP/1.1 does not
    /// pipeline, so the request just written is the one answered next).
    pub fn note_write(&self) {
        self.awaiting_response.store(true, Ordering::Relaxed);
        self.response_start.store(NO_STAMP, Ordering::Relaxed);
    }

    /// The kernel stamp of the response's first byte: the first read after
    /// the request was written. HTTP/1.1 only (None over HTTP/2, or without a
    /// kernel stamp).
    pub fn response_start(&self) -> Option<i64> {
        if self.h2.load(Ordering::Relaxed) {
            return None;
        }
        Some(self.response_start.load(Ordering::Relaxed)).filter(|&s| s != NO_STAMP)
    }

    /// The read that wrote the last byte of `data` (a body frame from hyper).
    pub fn lookup(&self, data: &[u8]) -> FrameStamp {
        let Some(last) = (data.as_ptr() as usize).checked_add(data.len().saturating_sub(1)) else {
            return FrameStamp::Miss;
        };
        if data.is_empty() {
            return FrameStamp::Miss;
        }
        // Newest first: the newest read covering an address wrote it last.
        let Some(read) = self
            .reads
            .get()
            .and_then(|ring| ring.find_newest(|r| r.start <= last && last < r.end))
        else {
            return FrameStamp::Miss;
        };
        match read.stamp {
            NO_STAMP => FrameStamp::Unstamped { seq: read.seq },
            us => FrameStamp::Kernel { us, seq: read.seq },
        }
    }

    pub fn set_connect_us(&self, us: i64) {
        self.connect_us.store(us, Ordering::Relaxed);
    }

    pub fn mark_preconnected(&self) {
        self.preconnected.store(true, Ordering::Relaxed);
    }

    /// The connection's set-up time, for the first response on it only, and
    /// never for a connection opened before the clock started.
    pub fn claim_connect_us(&self) -> Option<i64> {
        if self.preconnected.load(Ordering::Relaxed)
            || self.connect_claimed.swap(true, Ordering::Relaxed)
        {
            return None;
        }
        Some(self.connect_us.load(Ordering::Relaxed)).filter(|&us| us >= 0)
    }
}

/// Stamps the body frames of one response: the kernel stamp of the read that
/// completed each frame, and the engine's delay (now − that stamp); the
/// engine's stamp alone when the kernel gave none or the lookup missed.
///
/// The stamps never go back in time. A frame that fell back to the engine's
/// stamp got it when the request task took it, after its arrival, and hyper
/// reads ahead of the request task: the next frame's read (its kernel stamp)
/// may well precede that. Left so, such a response had a chunk stamped before
/// the previous one (a negative gap; once seen as a first answer chunk after
/// the last token, in one of 27 runs of a test). That frame keeps the
/// previous frame's stamp instead, as an engine stamp (no delay): frames of
/// one response arrive in order, and it arrived no earlier than that.
#[derive(Debug, Default)]
pub struct FrameClock {
    log: Option<Arc<ConnLog>>,
    last_seq: u64,
    last_ts_us: i64,
}

impl FrameClock {
    /// `log`: the response's connection log (None: not an instrumented
    /// connection, so every frame gets the engine's stamp).
    pub fn new(log: Option<Arc<ConnLog>>) -> Self {
        FrameClock {
            log,
            last_seq: 0,
            last_ts_us: i64::MIN,
        }
    }

    pub fn stamp(&mut self, frame: &[u8]) -> Stamp {
        let stamp = self.read_stamp(frame);
        if stamp.ts_us < self.last_ts_us {
            return Stamp::from(self.last_ts_us);
        }
        self.last_ts_us = stamp.ts_us;
        stamp
    }

    /// The frame's own stamp: its read's, or the engine's.
    fn read_stamp(&mut self, frame: &[u8]) -> Stamp {
        let now = now_us();
        let Some(log) = &self.log else {
            return Stamp::from(now);
        };
        match log.lookup(frame) {
            // Frames of one response arrive in order: an older read than the
            // previous frame's is a stale range, not this frame's read.
            FrameStamp::Kernel { us, seq } if seq >= self.last_seq => {
                self.last_seq = seq;
                Stamp {
                    ts_us: us,
                    delay_us: Some(
                        (now - us).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
                    ),
                }
            }
            FrameStamp::Unstamped { seq } if seq >= self.last_seq => {
                self.last_seq = seq;
                Stamp::from(now)
            }
            _ => Stamp::from(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice_at(buf: &[u8], from: usize, to: usize) -> &[u8] {
        &buf[from..to]
    }

    #[test]
    fn a_frame_gets_the_read_that_wrote_its_last_byte() {
        let buf = vec![0u8; 100];
        let base = buf.as_ptr() as usize;
        let log = ConnLog::new(H1_READS);
        log.set_last_rx(Some(10));
        log.record(base, 40);
        log.set_last_rx(None);
        log.record(base + 40, 20);
        log.set_last_rx(Some(30));
        log.record(base + 60, 40);
        assert_eq!(
            log.lookup(slice_at(&buf, 0, 40)),
            FrameStamp::Kernel { us: 10, seq: 1 }
        );
        // Spans reads 1 and 3's ranges: the last byte decides.
        assert_eq!(
            log.lookup(slice_at(&buf, 30, 61)),
            FrameStamp::Kernel { us: 30, seq: 3 }
        );
        assert_eq!(
            log.lookup(slice_at(&buf, 41, 45)),
            FrameStamp::Unstamped { seq: 2 }
        );
        assert_eq!(log.lookup(&[]), FrameStamp::Miss);
        let elsewhere = [1u8; 4];
        assert_eq!(log.lookup(&elsewhere), FrameStamp::Miss);
    }

    #[test]
    fn reused_memory_belongs_to_the_newest_read() {
        let buf = vec![0u8; 64];
        let base = buf.as_ptr() as usize;
        let log = ConnLog::new(H1_READS);
        log.set_last_rx(Some(1));
        log.record(base, 64);
        log.set_last_rx(Some(2));
        log.record(base, 16);
        assert_eq!(
            log.lookup(slice_at(&buf, 0, 8)),
            FrameStamp::Kernel { us: 2, seq: 2 }
        );
        assert_eq!(
            log.lookup(slice_at(&buf, 0, 32)),
            FrameStamp::Kernel { us: 1, seq: 1 }
        );
    }

    #[test]
    fn only_the_last_reads_are_kept() {
        let buf = vec![0u8; 8];
        let base = buf.as_ptr() as usize;
        let log = ConnLog::new(2);
        for i in 0..3 {
            log.set_last_rx(Some(i));
            log.record(base + i as usize, 1);
        }
        assert_eq!(log.lookup(slice_at(&buf, 0, 1)), FrameStamp::Miss);
        assert_eq!(
            log.lookup(slice_at(&buf, 2, 3)),
            FrameStamp::Kernel { us: 2, seq: 3 }
        );
    }

    #[test]
    fn the_first_read_after_a_write_starts_the_response() {
        let buf = [0u8; 8];
        let base = buf.as_ptr() as usize;
        let log = ConnLog::new(H1_READS);
        log.set_last_rx(Some(5));
        log.record(base, 1);
        assert_eq!(log.response_start(), None, "nothing was written yet");
        log.note_write();
        log.set_last_rx(Some(7));
        log.record(base + 1, 1);
        log.set_last_rx(Some(9));
        log.record(base + 2, 1);
        assert_eq!(log.response_start(), Some(7));
        log.note_write();
        assert_eq!(
            log.response_start(),
            None,
            "the next answer has not started"
        );
        log.set_h2();
        log.record(base + 3, 1);
        assert_eq!(log.response_start(), None, "HTTP/2 streams interleave");
    }

    #[test]
    fn a_frame_read_before_a_missed_one_was_taken_is_not_stamped_before_it() {
        // hyper has read frames 1 and 2 (kernel stamps 1 ms ago); frame 1's
        // lookup misses (its bytes were moved), so it gets the engine's now.
        let buf = vec![0u8; 64];
        let base = buf.as_ptr() as usize;
        let log = Arc::new(ConnLog::new(H1_READS));
        let read_at = now_us() - 1_000;
        log.set_last_rx(Some(read_at));
        log.record(base, 64);
        let mut clock = FrameClock::new(Some(log));
        let moved = [0u8; 8];
        let first = clock.stamp(&moved);
        assert!(first.delay_us.is_none() && first.ts_us > read_at);
        let second = clock.stamp(slice_at(&buf, 32, 64));
        assert_eq!(
            second,
            Stamp::from(first.ts_us),
            "held at the missed frame's stamp"
        );
        // Later frames with later reads keep their kernel stamps.
        let later = now_us() + 1_000;
        let more = vec![0u8; 16];
        clock.log.as_ref().unwrap().set_last_rx(Some(later));
        clock
            .log
            .as_ref()
            .unwrap()
            .record(more.as_ptr() as usize, 16);
        let third = clock.stamp(&more);
        assert_eq!(third.ts_us, later);
        assert!(third.delay_us.is_some());
    }

    #[test]
    fn connect_time_goes_to_the_first_response_of_a_fresh_connection_only() {
        let log = ConnLog::new(1);
        assert_eq!(log.claim_connect_us(), None, "not set yet");
        let log = ConnLog::new(1);
        log.set_connect_us(1234);
        assert_eq!(log.claim_connect_us(), Some(1234));
        assert_eq!(log.claim_connect_us(), None);
        let warm = ConnLog::new(1);
        warm.set_connect_us(99);
        warm.mark_preconnected();
        assert_eq!(warm.claim_connect_us(), None);
    }
}
