//! Kernel receive timestamps (Linux `SO_TIMESTAMPING`): the time the kernel
//! received the bytes a `recvmsg` returns, independent of when the engine got
//! around to the socket.
//!
//! The kernel stamps in CLOCK_REALTIME; the engine's clock is monotonic,
//! anchored once to the wall clock (`crate::clock`). A realtime stamp is mapped
//! by its *age*: at the read, `age = realtime_now − stamp`, and the stamp
//! becomes `now_us() − age`. Only the age (microseconds to milliseconds) is
//! measured on the realtime clock, so a step of the wall clock between the
//! anchor and the read cannot bend it; the error is the rate difference of the
//! two clocks over the age (NTP slews at most 500 ppm: under 0.5 µs for an age
//! of 1 ms) plus the microsecond truncation. An age that is negative by more
//! than the clocks' resolution, or longer than `MAX_AGE_NS`, means the wall
//! clock was stepped during it: that read gets no kernel stamp (the fallback is
//! recorded per chunk).

/// A kernel stamp older than this at read time is not trusted (10 s).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const MAX_AGE_NS: i64 = 10_000_000_000;

/// Maps a realtime stamp taken `age_ns` ago onto the engine's clock, given the
/// engine's `now_us` at the moment the age was measured.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn stamp_from_age(now_us: i64, age_ns: i64) -> Option<i64> {
    // Both clocks are read a few ns apart and tick in ns: a small negative age
    // is the two reads' order, not a step.
    if !(-1_000..=MAX_AGE_NS).contains(&age_ns) {
        return None;
    }
    Some(now_us - age_ns.max(0) / 1_000)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::io;
    use std::mem::{size_of, MaybeUninit};
    use std::os::fd::RawFd;

    use crate::clock::now_us;

    /// Asks the kernel for software receive stamps on `fd`. False when the
    /// kernel refuses (then reads simply carry no stamp).
    pub fn enable_rx_stamps(fd: RawFd) -> bool {
        let flags: libc::c_uint =
            libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
        // SAFETY: a valid socket and a c_uint option value of the right size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPING,
                (&flags as *const libc::c_uint).cast(),
                size_of::<libc::c_uint>() as libc::socklen_t,
            )
        };
        rc == 0
    }

    /// `struct scm_timestamping`: [software, deprecated, hardware].
    #[repr(C)]
    struct ScmTimestamping {
        ts: [libc::timespec; 3],
    }

    /// One non-blocking `recvmsg` into `buf`: the bytes read and the kernel's
    /// receive stamp of the data (the last segment the read consumed) on the
    /// engine's clock, if the kernel gave one.
    pub fn recv_stamped(
        fd: RawFd,
        buf: &mut [MaybeUninit<u8>],
    ) -> io::Result<(usize, Option<i64>)> {
        // Room for one SCM_TIMESTAMPING message (CMSG_SPACE of 48 bytes is 64
        // on 64-bit Linux), aligned for cmsghdr.
        let mut control = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: zeroed msghdr is valid; the pointers set below outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` describes writable memory owned by this frame and `buf`.
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut kernel: Option<&libc::timespec> = None;
        let mut stamps = MaybeUninit::<ScmTimestamping>::uninit();
        // SAFETY: the kernel filled `msg_controllen` bytes of `control` with
        // well-formed control messages; CMSG_* walk exactly those.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET
                    && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPING
                    && (*cmsg).cmsg_len as usize
                        >= libc::CMSG_LEN(size_of::<ScmTimestamping>() as u32) as usize
                {
                    std::ptr::copy_nonoverlapping(
                        libc::CMSG_DATA(cmsg),
                        stamps.as_mut_ptr().cast::<u8>(),
                        size_of::<ScmTimestamping>(),
                    );
                    kernel = Some(&(*stamps.as_ptr()).ts[0]);
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        let stamp = kernel
            .filter(|ts| ts.tv_sec != 0 || ts.tv_nsec != 0)
            .and_then(|ts| {
                let (now, realtime) = clocks_now();
                kernel_stamp(ts, now, realtime)
            });
        Ok((n as usize, stamp))
    }

    /// Linux stamps received packets only while some socket asks for it, and
    /// turns that on through a deferred static key: the first packets after
    /// the first socket asks arrive unstamped. One socket that asks for the
    /// life of the process keeps stamping on from the engine's first run.
    pub fn keep_enabled() {
        use std::os::fd::AsRawFd;
        use std::sync::OnceLock;
        static HOLDER: OnceLock<Option<std::net::UdpSocket>> = OnceLock::new();
        HOLDER.get_or_init(|| {
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
            enable_rx_stamps(socket.as_raw_fd()).then_some(socket)
        });
    }

    /// The engine's clock and the realtime clock as of one instant: the
    /// realtime read between two engine reads (the tightest of up to three
    /// tries), paired with the later engine read. A thread preempted between
    /// two clock reads (a loaded machine) then makes a stamp late by at most
    /// the bracket, never earlier than the kernel's receipt: read the other
    /// way round (engine, then realtime), the age took the preemption in and
    /// a chunk's stamp could land before the server wrote it.
    fn clocks_now() -> (i64, i64) {
        let mut best = (i64::MAX, 0, 0);
        for _ in 0..3 {
            let before = now_us();
            let realtime = realtime_ns();
            let after = now_us();
            if after - before < best.0 {
                best = (after - before, after, realtime);
            }
            if after - before <= 1 {
                break;
            }
        }
        (best.1, best.2)
    }

    /// Nanoseconds since the epoch: an i64 holds them until 2262 (in i128,
    /// every read paid a compiler_builtins division). Saturating: a garbled
    /// control message gives an age `stamp_from_age` refuses, not a panic.
    pub(super) fn timespec_ns(ts: &libc::timespec) -> i64 {
        ts.tv_sec
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec)
    }

    /// The engine-clock stamp of a kernel receive stamp `ts`, read when the
    /// engine's clock said `now_us` and the realtime clock `realtime_ns`.
    pub(super) fn kernel_stamp(ts: &libc::timespec, now_us: i64, realtime_ns: i64) -> Option<i64> {
        super::stamp_from_age(now_us, realtime_ns.saturating_sub(timespec_ns(ts)))
    }

    fn realtime_ns() -> i64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: CLOCK_REALTIME always exists; `ts` is a valid out pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        timespec_ns(&ts)
    }
}

#[cfg(target_os = "linux")]
pub use imp::{enable_rx_stamps, keep_enabled, recv_stamped};

/// Nothing to keep on where the kernel gives no stamps.
#[cfg(not(target_os = "linux"))]
pub fn keep_enabled() {}

#[cfg(test)]
mod tests {
    use super::stamp_from_age;

    #[test]
    fn a_stamp_is_now_minus_its_age() {
        assert_eq!(stamp_from_age(1_000_000, 250_000), Some(999_750));
        assert_eq!(stamp_from_age(1_000_000, 999), Some(1_000_000));
        // Read order of the two clocks: a few ns negative is zero age.
        assert_eq!(stamp_from_age(1_000_000, -500), Some(1_000_000));
    }

    #[test]
    fn a_stepped_wall_clock_gives_no_stamp() {
        assert_eq!(stamp_from_age(1_000_000, -5_000_000), None);
        assert_eq!(stamp_from_age(1_000_000, 11_000_000_000), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_garbled_kernel_stamp_gives_no_stamp_and_no_overflow() {
        let ts = |tv_sec, tv_nsec| libc::timespec { tv_sec, tv_nsec };
        assert_eq!(super::imp::timespec_ns(&ts(2, 5)), 2_000_000_005);
        let realtime = super::imp::timespec_ns(&ts(1_800_000_000, 0));
        // A sound stamp 250 µs old, then garbled ones: none, and no panic.
        assert_eq!(
            super::imp::kernel_stamp(&ts(1_799_999_999, 999_750_000), 1_000_000, realtime),
            Some(999_750)
        );
        for garbled in [ts(i64::MAX, 0), ts(i64::MIN, -1), ts(0, i64::MIN)] {
            assert_eq!(
                super::imp::kernel_stamp(&garbled, 1_000_000, realtime),
                None,
                "{}",
                garbled.tv_sec
            );
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn loopback_reads_carry_kernel_stamps_no_later_than_the_read() {
        use std::io::Write;
        use std::mem::MaybeUninit;
        use std::os::fd::AsRawFd;

        super::keep_enabled();
        // The kernel turns stamping on for the system a moment later (a
        // deferred static key): that is what `keep_enabled` is for.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (rx, _) = listener.accept().unwrap();
        assert!(super::enable_rx_stamps(rx.as_raw_fd()));
        let before = crate::clock::now_us();
        let mut buf = [MaybeUninit::<u8>::uninit(); 16];
        tx.write_all(b"hello").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (n, stamp) = super::recv_stamped(rx.as_raw_fd(), &mut buf).unwrap();
        let after = crate::clock::now_us();
        assert_eq!(n, 5);
        let stamp = stamp.expect("a kernel stamp on loopback");
        assert!(before <= stamp + 1, "{before} <= {stamp}");
        // The bytes waited 20 ms in the socket: the stamp says so.
        assert!(after - stamp >= 19_000, "stamp {stamp}, read at {after}");
    }
}
