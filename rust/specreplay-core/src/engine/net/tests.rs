//! A chunk gets the stamp of the read that completed it, for any way the
//! network cuts the stream into reads and any way hyper cuts it into frames.
//!
//! The buffers are handled as hyper handles them: HTTP/1.1 reads into a
//! `BytesMut` and splits every byte off as frames before the next read
//! (`read_mem`); HTTP/2 (tokio-util's `FramedRead`) splits off complete frames
//! only, so a partial frame waits in the buffer, and `reserve` may move it
//! before the read that completes it. Frames are looked up a few frames late,
//! as the request task trails the connection task.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use super::read_log::{ConnLog, FrameClock, H1_READS, H2_READS};
use crate::sse::SseParser;

/// The SSE stream: events `data: <i><padding>\n\n`.
fn stream(pads: &[usize]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::new();
    let mut ends = Vec::new();
    for (i, pad) in pads.iter().enumerate() {
        bytes.extend_from_slice(format!("data: {i}{}\n\n", "x".repeat(*pad)).as_bytes());
        ends.push(bytes.len() - 1);
    }
    (bytes, ends)
}

/// Cut points (sorted, inside 1..len) from arbitrary numbers.
fn cuts(len: usize, points: &[usize]) -> Vec<usize> {
    let mut c: Vec<usize> = points
        .iter()
        .map(|p| 1 + p % len.max(2).saturating_sub(1))
        .filter(|&p| p < len)
        .collect();
    c.push(len);
    c.sort_unstable();
    c.dedup();
    c
}

/// Which read (index) delivered stream byte `pos`.
fn read_of(read_ends: &[usize], pos: usize) -> usize {
    read_ends.partition_point(|&end| end <= pos)
}

/// Feeds frames (with the stream offset of their last byte) through the
/// frame clock and the SSE parser, `lag` frames behind the reads, and
/// checks every event's stamp.
struct Reader {
    clock: FrameClock,
    parser: SseParser,
    pending: VecDeque<(Bytes, usize)>,
    lag: usize,
    /// Per event, in order: the stamp it got.
    stamps: Vec<i64>,
}

impl Reader {
    fn new(log: &std::sync::Arc<ConnLog>, lag: usize) -> Self {
        Reader {
            clock: FrameClock::new(Some(log.clone())),
            parser: SseParser::new(),
            pending: VecDeque::new(),
            lag,
            stamps: Vec::new(),
        }
    }

    fn push(&mut self, frame: Bytes, last: usize) {
        self.pending.push_back((frame, last));
        while self.pending.len() > self.lag {
            self.take();
        }
    }

    fn take(&mut self) {
        let (frame, _) = self.pending.pop_front().unwrap();
        let stamp = self.clock.stamp(&frame);
        assert!(stamp.delay_us.is_some(), "a lookup missed");
        let mut events = Vec::new();
        self.parser.feed(&frame, &mut events).unwrap();
        self.stamps.extend(events.iter().map(|_| stamp.ts_us));
    }

    fn drain(&mut self) {
        while !self.pending.is_empty() {
            self.take();
        }
    }
}

fn kernel_stamp(read: usize) -> i64 {
    // Far in the past, so `now − stamp` is a valid delay.
    1_000_000 + read as i64
}

/// HTTP/1.1: each read is split into frames before the next read.
fn h1(bytes: &[u8], read_ends: &[usize], frame_points: &[usize], lag: usize) -> Vec<i64> {
    let log = std::sync::Arc::new(ConnLog::new(H1_READS));
    let mut reader = Reader::new(&log, lag);
    let mut buf = BytesMut::new();
    let mut from = 0;
    for (i, &end) in read_ends.iter().enumerate() {
        let n = end - from;
        buf.reserve(n);
        let start = buf.chunk_mut().as_mut_ptr() as usize;
        buf.put_slice(&bytes[from..end]);
        log.set_last_rx(Some(kernel_stamp(i)));
        log.record(start, n);
        let mut at = from;
        for cut in cuts(n, frame_points) {
            let frame = buf.split_to(from + cut - at).freeze();
            at = from + cut;
            reader.push(frame, at - 1);
        }
        from = end;
    }
    reader.drain();
    reader.stamps
}

/// HTTP/2: frames of their own sizes, split off only when complete.
fn h2(bytes: &[u8], read_ends: &[usize], frame_ends: &[usize], lag: usize) -> Vec<i64> {
    let log = std::sync::Arc::new(ConnLog::new(H2_READS));
    let mut reader = Reader::new(&log, lag);
    let mut buf = BytesMut::new();
    let (mut from, mut consumed, mut next_frame) = (0, 0, 0);
    for (i, &end) in read_ends.iter().enumerate() {
        let n = end - from;
        // Small reserves, as tokio-util's `reserve(1)`: the partial frame
        // left in the buffer is moved whenever it must grow.
        buf.reserve(1.max(n / 2));
        if buf.capacity() - buf.len() < n {
            buf.reserve(n);
        }
        let start = buf.chunk_mut().as_mut_ptr() as usize;
        buf.put_slice(&bytes[from..end]);
        log.set_last_rx(Some(kernel_stamp(i)));
        log.record(start, n);
        from = end;
        while next_frame < frame_ends.len() && frame_ends[next_frame] <= from {
            let frame_end = frame_ends[next_frame];
            let frame = buf.split_to(frame_end - consumed).freeze();
            consumed = frame_end;
            next_frame += 1;
            reader.push(frame, frame_end - 1);
        }
    }
    reader.drain();
    reader.stamps
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn h1_chunks_get_the_stamp_of_the_read_that_completed_them(
        pads in prop::collection::vec(0usize..40, 1..30),
        read_points in prop::collection::vec(any::<usize>(), 0..40),
        frame_points in prop::collection::vec(any::<usize>(), 0..4),
        lag in 0usize..3,
    ) {
        let (bytes, event_ends) = stream(&pads);
        let read_ends = cuts(bytes.len(), &read_points);
        let got = h1(&bytes, &read_ends, &frame_points, lag);
        // HTTP/1.1 frames never span reads: the read holding an event's
        // last byte is the one that completed it.
        let want: Vec<i64> = event_ends.iter().map(|&e| kernel_stamp(read_of(&read_ends, e))).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn h2_chunks_get_the_stamp_of_the_read_that_completed_their_frame(
        pads in prop::collection::vec(0usize..40, 1..30),
        read_points in prop::collection::vec(any::<usize>(), 0..40),
        frame_points in prop::collection::vec(any::<usize>(), 0..20),
        lag in 0usize..8,
    ) {
        let (bytes, event_ends) = stream(&pads);
        let read_ends = cuts(bytes.len(), &read_points);
        let frame_ends = cuts(bytes.len(), &frame_points);
        let got = h2(&bytes, &read_ends, &frame_ends, lag);
        // An event is handed over with the frame that holds its last byte,
        // and that frame was completed by the read holding the frame's last byte.
        let want: Vec<i64> = event_ends
            .iter()
            .map(|&e| {
                let frame_last = frame_ends[frame_ends.partition_point(|&f| f <= e)] - 1;
                kernel_stamp(read_of(&read_ends, frame_last))
            })
            .collect();
        prop_assert_eq!(got, want);
    }
}

/// Reads once from `stream` as hyper does (into a fresh buffer).
async fn read_once<R: hyper::rt::Read + Unpin>(stream: &mut R) -> Vec<u8> {
    let mut storage = [std::mem::MaybeUninit::<u8>::uninit(); 64];
    let mut buf = hyper::rt::ReadBuf::uninit(&mut storage);
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_read(cx, buf.unfilled()))
        .await
        .unwrap();
    buf.filled().to_vec()
}

#[tokio::test]
async fn a_drained_socket_waits_for_new_bytes_and_wakes_on_them() {
    use std::future::Future;
    use std::task::Poll;
    use tokio::io::AsyncWriteExt;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tcp = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut server, _) = listener.accept().await.unwrap();
    let log = std::sync::Arc::new(ConnLog::new(H1_READS));
    let mut stream = super::stream::KernelStamped::new(tcp, log);
    let wait = std::time::Duration::from_secs(5);
    for word in [&b"hello"[..], b"kernel", b"stamps"] {
        server.write_all(word).await.unwrap();
        let got = tokio::time::timeout(wait, read_once(&mut stream))
            .await
            .expect("new bytes wake a reader whose last read drained the socket");
        assert_eq!(got, word);
        // The short read drained the socket: the next read waits for bytes
        // (the readiness was cleared), it does not return nothing.
        let mut next = std::pin::pin!(read_once(&mut stream));
        let polled = std::future::poll_fn(|cx| Poll::Ready(next.as_mut().poll(cx))).await;
        assert!(polled.is_pending());
    }
}
