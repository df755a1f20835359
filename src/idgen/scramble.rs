//! Non-enumerable ids: a keyed permutation of `[1, 2^bits)`.
//!
//! A scrambled sequence issues `scramble(s)` for each sequence value `s`.
//! `scramble` is a bijection, so distinct sequence values give distinct
//! ids: uniqueness is by construction, and everything the sequence
//! guarantees (segments, crash safety, several processes) carries over.
//!
//! The permutation is a balanced Feistel network over `2 * half` bits
//! (`half = ceil(bits / 2)`), 8 rounds, whose round function is SipHash-2-4
//! (a keyed pseudo-random function) of the round's half, keyed by 128 bits
//! derived from the configured key; by Luby-Rackoff, 4 such rounds already
//! make a pseudo-random permutation. Values that land outside `[1,
//! 2^bits)` are walked along their cycle until they land inside (cycle
//! walking: a bijection of the smaller set; at most a few steps on
//! average, since the set is at least a quarter of the network's domain).
//! Without the key, an id reveals nothing of its neighbours.

#![allow(deprecated)] // std's SipHasher: SipHash-2-4 with explicit keys, no dependency.

use std::hash::{Hasher, SipHasher};

use sha1::{Digest, Sha1};

/// Rounds of the Feistel network.
const ROUNDS: usize = 8;

/// A keyed permutation of `[1, 2^bits)`.
#[derive(Clone)]
pub struct Scrambler {
    /// Width of the ids (53 or 63 in rules; any 2..=63 here).
    bits: u32,
    /// Width of each Feistel half.
    half: u32,
    /// Mask of a half.
    mask: u64,
    /// Per-round SipHash keys.
    keys: [(u64, u64); ROUNDS],
}

impl PartialEq for Scrambler {
    fn eq(&self, other: &Scrambler) -> bool {
        self.bits == other.bits && self.keys == other.keys
    }
}

impl std::fmt::Debug for Scrambler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the keys.
        f.debug_struct("Scrambler")
            .field("bits", &self.bits)
            .finish()
    }
}

impl Scrambler {
    /// The permutation of `[1, 2^bits)` for `key` (any bytes; at least 16
    /// are checked by the rule loader). `bits` must be in `2..=63`.
    pub fn new(key: &[u8], bits: u32) -> Scrambler {
        let bits = bits.clamp(2, 63);
        let half = bits.div_ceil(2);
        let mut keys = [(0, 0); ROUNDS];
        for (i, k) in keys.iter_mut().enumerate() {
            let mut h = Sha1::new();
            h.update(b"idgate scramble v1");
            h.update([i as u8]);
            h.update(key);
            let d = h.finalize();
            let mut a = [0u8; 8];
            let mut b = [0u8; 8];
            a.copy_from_slice(&d[0..8]);
            b.copy_from_slice(&d[8..16]);
            *k = (u64::from_le_bytes(a), u64::from_le_bytes(b));
        }
        Scrambler {
            bits,
            half,
            mask: (1u64 << half) - 1,
            keys,
        }
    }

    /// Width of the ids.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Largest id: `2^bits - 1`.
    pub fn max(&self) -> u64 {
        (1u64 << self.bits) - 1
    }

    #[inline]
    fn f(&self, round: usize, x: u64) -> u64 {
        let (k0, k1) = self.keys[round];
        let mut h = SipHasher::new_with_keys(k0, k1);
        h.write_u64(x);
        h.finish() & self.mask
    }

    /// One pass of the network over `2 * half` bits.
    #[inline]
    fn forward(&self, v: u64) -> u64 {
        let (mut l, mut r) = (v >> self.half, v & self.mask);
        for i in 0..ROUNDS {
            (l, r) = (r, l ^ self.f(i, r));
        }
        (l << self.half) | r
    }

    #[inline]
    fn backward(&self, v: u64) -> u64 {
        let (mut l, mut r) = (v >> self.half, v & self.mask);
        for i in (0..ROUNDS).rev() {
            (l, r) = (r ^ self.f(i, l), l);
        }
        (l << self.half) | r
    }

    #[inline]
    fn inside(&self, v: u64) -> bool {
        v != 0 && v >> self.bits == 0
    }

    /// The id of sequence value `s` (`1 <= s < 2^bits`); `None` outside.
    #[inline]
    pub fn scramble(&self, s: u64) -> Option<u64> {
        if !self.inside(s) {
            return None;
        }
        let mut v = self.forward(s);
        while !self.inside(v) {
            v = self.forward(v);
        }
        Some(v)
    }

    /// The sequence value whose id is `id`; `None` if `id` is outside `[1, 2^bits)`.
    #[inline]
    pub fn unscramble(&self, id: u64) -> Option<u64> {
        if !self.inside(id) {
            return None;
        }
        let mut v = self.backward(id);
        while !self.inside(v) {
            v = self.backward(v);
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustive_bijection_on_small_widths() {
        for bits in [2u32, 3, 5, 8, 11, 16] {
            let s = Scrambler::new(b"0123456789abcdef", bits);
            let n = 1u64 << bits;
            let mut seen = vec![false; n as usize];
            for x in 1..n {
                let y = s.scramble(x).unwrap();
                assert!(y >= 1 && y < n, "bits {bits}: {x} -> {y}");
                assert!(!seen[y as usize], "bits {bits}: {y} twice");
                seen[y as usize] = true;
                assert_eq!(s.unscramble(y), Some(x));
            }
            assert_eq!(s.scramble(0), None);
            assert_eq!(s.scramble(n), None);
        }
    }

    #[test]
    fn a_million_consecutive_ids_reveal_nothing_of_their_neighbours() {
        for bits in [53u32, 63] {
            let s = Scrambler::new(b"a key of sixteen+ bytes", bits);
            let other = Scrambler::new(b"a key of sixteen+ bytez", bits);
            let ids: Vec<u64> = (1..=1_000_000u64).map(|x| s.scramble(x).unwrap()).collect();
            let up = ids.windows(2).filter(|w| w[1] > w[0]).count();
            let frac = up as f64 / (ids.len() - 1) as f64;
            // Binomial, n = 10^6: sd 0.0005; 0.49..0.51 is 20 sd.
            assert!((0.49..0.51).contains(&frac), "bits {bits}: {frac}");
            // Neighbours differ in about half their bits, and the
            // difference of two neighbours says nothing of the next.
            let mut flips = 0u64;
            let mut same_delta = 0;
            for w in ids.windows(3) {
                flips += u64::from((w[0] ^ w[1]).count_ones());
                if w[1].wrapping_sub(w[0]) == w[2].wrapping_sub(w[1]) {
                    same_delta += 1;
                }
            }
            let mean = flips as f64 / (ids.len() - 2) as f64;
            assert!(
                (mean - bits as f64 / 2.0).abs() < 0.5,
                "bits {bits}: {mean}"
            );
            assert_eq!(same_delta, 0);
            // Unique, in range, invertible; another key gives other ids.
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), ids.len());
            assert!(ids.iter().all(|&y| y >= 1 && y >> bits == 0));
            for (x, &y) in ids.iter().enumerate().step_by(997) {
                assert_eq!(s.unscramble(y), Some(x as u64 + 1));
            }
            let differ = (1..1000u64)
                .filter(|&x| s.scramble(x) != other.scramble(x))
                .count();
            assert!(differ > 990);
        }
    }

    /// A scrambled generator over a memory store shared by `n` processes.
    async fn allocators(n: usize, bits: u32) -> (tempfile::TempDir, Vec<crate::idgen::Allocator>) {
        use crate::idgen::{Allocator, FakeClock, MemoryStore, Store};
        use crate::rules::spec::{GeneratorKind, GeneratorRule};
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "0123456789abcdef0123\n").unwrap();
        let mut r = GeneratorRule::new("s", GeneratorKind::Sequence);
        r.batch = Some(100);
        r.scramble = Some(true);
        r.bits = Some(bits);
        r.scramble_key_file = Some(key.display().to_string());
        let store: std::sync::Arc<dyn Store> = MemoryStore::new();
        let clock = std::sync::Arc::new(FakeClock::new(1_800_000_000_000));
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(
                Allocator::with_store(store.clone(), clock.clone(), std::slice::from_ref(&r))
                    .await
                    .unwrap(),
            );
        }
        (dir, v)
    }

    #[tokio::test]
    async fn scrambled_generators_are_unique_across_processes() {
        let (_dir, a) = allocators(2, 53).await;
        let mut all = Vec::new();
        for round in 0..50 {
            for p in &a {
                let mut out = Vec::new();
                p.generator("s")
                    .unwrap()
                    .next(7 + round % 3, &mut out)
                    .await
                    .unwrap();
                all.extend(out);
            }
        }
        assert!(all.iter().all(|id| (1..1 << 53).contains(id)));
        let increasing = all.windows(2).filter(|w| w[1] > w[0]).count();
        assert!(increasing < all.len() * 3 / 4, "ids look ordered");
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        let g = a[0].generator("s").unwrap();
        assert!(matches!(
            g.next_block(3).await,
            Err(crate::idgen::IdgenError::Unsupported { .. })
        ));
        assert!(g.set_floor(5).await.is_err());
    }

    /// The decision for explicit ids: an id the generator already issued
    /// (its sequence value below every reservation's end) is accepted and
    /// never issued again; one it has not issued yet is refused (accepting
    /// it would mean skipping its far-away sequence value: a floor there
    /// would burn the space below it).
    #[tokio::test]
    async fn explicit_ids_of_scrambled_generators() {
        let (_dir, a) = allocators(1, 63).await;
        let g = a[0].generator("s").unwrap();
        let mut out = Vec::new();
        g.next(10, &mut out).await.unwrap();
        // Issued ids: accepted.
        for &id in &out {
            g.observe(id).await.expect("an issued id is accepted");
        }
        // 0, and values outside 63 bits: not ids of this generator.
        g.observe(0).await.unwrap();
        g.observe(u64::MAX).await.unwrap();
        // A future id: refused.
        let sc = Scrambler::new(b"0123456789abcdef0123", 63);
        let future = sc.scramble(1 << 40).unwrap();
        let e = g.observe(future).await.unwrap_err().to_string();
        assert!(e.contains("has issued it already"), "{e}");
        // The id of the value just issued is never issued again.
        let mut more = Vec::new();
        g.next(500, &mut more).await.unwrap();
        assert!(more.iter().all(|id| !out.contains(id)));
        assert_eq!(
            sc.scramble(1),
            Some(out[0]),
            "the key file's newline is ignored"
        );
    }
}
