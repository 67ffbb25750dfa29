//! A fast hasher for the engine's own keys.

use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hasher (the scheme rustc's `FxHash` uses) for keys the engine builds itself:
/// much cheaper than SipHash for short keys. Not for keys an attacker picks to collide: a
/// collision only costs a lookup here, never correctness.
///
/// ```
/// use fastfallback_proto::FxBuildHasher;
/// use std::collections::HashMap;
///
/// let mut m: HashMap<&str, u32, FxBuildHasher> = HashMap::default();
/// m.insert("example.com", 1);
/// assert_eq!(m["example.com"], 1);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct FxHasher(u64);

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(FX_SEED);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Builds [`FxHasher`]s, for `HashMap<K, V, FxBuildHasher>`.
pub type FxBuildHasher = BuildHasherDefault<FxHasher>;
