//! The last reads of one connection, written by the connection task and read
//! by request tasks without a lock.
//!
//! One writer (the connection's stream) and any number of readers (the
//! request tasks looking up their frames): a ring of slots, each guarded by
//! its sequence number as a seqlock. The writer invalidates a slot, writes
//! it, then publishes its sequence number; a reader that sees the same
//! number before and after reading a slot read a consistent slot, and one
//! that sees another number knows the slot was reused for a newer read, so
//! the read it wanted (and every older one) is gone. Every field is an
//! atomic, so there is no data race; the fences give the seqlock's order
//! (H.-J. Boehm, "Can seqlocks get along with programming language memory
//! models?", MSPC 2012).

use std::sync::atomic::{fence, AtomicI64, AtomicU64, AtomicUsize, Ordering};

/// One read: the address range it filled in the reader's buffer, its stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRange {
    pub start: usize,
    pub end: usize,
    pub stamp: i64,
    /// 1 for the connection's first recorded read, then +1 per read.
    pub seq: u64,
}

#[derive(Debug, Default)]
struct Slot {
    /// The read this slot holds; 0 while it is being written (or never was).
    seq: AtomicU64,
    start: AtomicUsize,
    end: AtomicUsize,
    stamp: AtomicI64,
}

#[derive(Debug)]
pub struct ReadRing {
    slots: Box<[Slot]>,
    /// The newest published read (0: none yet).
    head: AtomicU64,
}

impl ReadRing {
    pub fn new(capacity: usize) -> Self {
        ReadRing {
            slots: (0..capacity.max(1)).map(|_| Slot::default()).collect(),
            head: AtomicU64::new(0),
        }
    }

    fn slot(&self, seq: u64) -> &Slot {
        &self.slots[(seq % self.slots.len() as u64) as usize]
    }

    /// Records the next read and returns its sequence number. Only one
    /// thread may call this at a time (the connection's stream does).
    pub fn push(&self, start: usize, end: usize, stamp: i64) -> u64 {
        let seq = self.head.load(Ordering::Relaxed) + 1;
        let slot = self.slot(seq);
        slot.seq.store(0, Ordering::Relaxed);
        // Readers must not see the new fields with the old sequence number.
        fence(Ordering::Release);
        slot.start.store(start, Ordering::Relaxed);
        slot.end.store(end, Ordering::Relaxed);
        slot.stamp.store(stamp, Ordering::Relaxed);
        slot.seq.store(seq, Ordering::Release);
        self.head.store(seq, Ordering::Release);
        seq
    }

    /// The newest kept read that satisfies `covers`, newest first.
    pub fn find_newest(&self, covers: impl Fn(&ReadRange) -> bool) -> Option<ReadRange> {
        let head = self.head.load(Ordering::Acquire);
        let oldest = head.saturating_sub(self.slots.len() as u64 - 1).max(1);
        for seq in (oldest..=head).rev() {
            let slot = self.slot(seq);
            if slot.seq.load(Ordering::Acquire) != seq {
                return None; // reused for a newer read: this one and older are gone
            }
            let read = ReadRange {
                start: slot.start.load(Ordering::Relaxed),
                end: slot.end.load(Ordering::Relaxed),
                stamp: slot.stamp.load(Ordering::Relaxed),
                seq,
            };
            fence(Ordering::Acquire);
            if slot.seq.load(Ordering::Relaxed) != seq {
                return None; // overwritten while it was read
            }
            if covers(&read) {
                return Some(read);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_reads_newest_first() {
        let ring = ReadRing::new(3);
        for i in 1..=5u64 {
            assert_eq!(ring.push(i as usize * 10, i as usize * 10 + 5, i as i64), i);
        }
        let all = |r: &ReadRange| r.seq > 0;
        assert_eq!(ring.find_newest(all).map(|r| r.seq), Some(5));
        assert_eq!(
            ring.find_newest(|r| r.start == 30),
            Some(ReadRange {
                start: 30,
                end: 35,
                stamp: 3,
                seq: 3
            })
        );
        assert_eq!(
            ring.find_newest(|r| r.start == 20),
            None,
            "fell off the ring"
        );
        assert_eq!(ReadRing::new(4).find_newest(all), None, "nothing recorded");
    }

    #[test]
    fn a_reader_never_sees_a_torn_read() {
        // Every read's fields are derived from its sequence number: a reader
        // racing the writer must find them consistent or not at all.
        let ring = std::sync::Arc::new(ReadRing::new(4));
        let writer = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                for seq in 1..=200_000u64 {
                    let s = seq as usize;
                    ring.push(s * 3, s * 3 + 2, seq as i64 * 7);
                }
            })
        };
        let mut seen = 0u64;
        while !writer.is_finished() {
            if let Some(r) = ring.find_newest(|_| true) {
                let s = r.seq as usize;
                assert_eq!(
                    (r.start, r.end, r.stamp),
                    (s * 3, s * 3 + 2, r.seq as i64 * 7)
                );
                assert!(r.seq >= seen, "the newest read went back in time");
                seen = r.seq;
            }
        }
        writer.join().unwrap();
        assert_eq!(ring.find_newest(|_| true).map(|r| r.seq), Some(200_000));
    }
}
