//! The simulator's one hash: stable across Rust versions and platforms (the
//! same prompt names the same answer and the same prefix blocks on every run).

/// 64-bit FNV-1a: stable across Rust versions and platforms, unlike `DefaultHasher`.
pub(crate) struct Fnv1a(u64);

impl Fnv1a {
    pub(crate) fn new() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator so that ("ab","c") and ("a","bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
}
