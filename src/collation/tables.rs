//! The weight tables in `data/` (written by `scripts/collation-data.py` from
//! a MariaDB server; the format is described there), decoded on first use.

use std::sync::OnceLock;

use super::Units;

static GENERAL_BIN: &[u8] = include_bytes!("data/general.bin");
static UNICODE_BIN: &[u8] = include_bytes!("data/unicode.bin");
static LATIN1_BIN: &[u8] = include_bytes!("data/latin1.bin");

/// The primary weight of a space in UCA 4.0.0.
pub(super) const UNICODE_SPACE: u16 = 0x0209;

/// The weight every character beyond U+FFFF has in `general_ci` and
/// `unicode_ci`.
pub(super) const REPLACEMENT: u16 = 0xfffd;

/// `utf8mb4_general_ci`: the weight of each BMP character (index: code point).
pub(super) fn general_table() -> &'static [u16] {
    static T: OnceLock<Box<[u16]>> = OnceLock::new();
    T.get_or_init(|| {
        let mut t: Box<[u16]> = (0..=0xffffu16).collect();
        for pair in GENERAL_BIN.chunks_exact(4) {
            let cp = u16::from_le_bytes([pair[0], pair[1]]);
            let w = u16::from_le_bytes([pair[2], pair[3]]);
            if let Some(slot) = t.get_mut(usize::from(cp)) {
                *slot = w;
            }
        }
        t
    })
}

/// The `general_ci` weight of character `cp`.
pub(super) fn general(cp: u32) -> u16 {
    if cp > 0xffff {
        return REPLACEMENT;
    }
    general_table()
        .get(cp as usize)
        .copied()
        .unwrap_or(REPLACEMENT)
}

/// `utf8mb4_unicode_ci`: for each BMP character, `(start << 4) | len` into
/// the weights, or `IMPLICIT | base` for a computed weight pair.
struct Unicode {
    index: Box<[u32]>,
    weights: Vec<u16>,
}

const IMPLICIT: u32 = 1 << 31;

fn unicode_table() -> &'static Unicode {
    static T: OnceLock<Unicode> = OnceLock::new();
    T.get_or_init(|| {
        let mut index = Vec::with_capacity(0x10000);
        let mut weights = Vec::with_capacity(UNICODE_BIN.len() / 2);
        let mut at = 0;
        while index.len() < 0x10000 {
            let Some(&tag) = UNICODE_BIN.get(at) else {
                // A truncated file: the rest weighs as unassigned.
                index.push(IMPLICIT | 0xfbc0);
                continue;
            };
            at += 1;
            match tag {
                0xfd => index.push(IMPLICIT | 0xfb40),
                0xfe => index.push(IMPLICIT | 0xfb80),
                0xff => index.push(IMPLICIT | 0xfbc0),
                n => {
                    let n = usize::from(n.min(8));
                    index.push(((weights.len() as u32) << 4) | n as u32);
                    for k in 0..n {
                        let lo = UNICODE_BIN.get(at + 2 * k).copied().unwrap_or(0);
                        let hi = UNICODE_BIN.get(at + 2 * k + 1).copied().unwrap_or(0);
                        weights.push(u16::from_le_bytes([lo, hi]));
                    }
                    at += 2 * n;
                }
            }
        }
        Unicode {
            index: index.into_boxed_slice(),
            weights,
        }
    })
}

/// The `unicode_ci` weights of character `cp`.
pub(super) fn unicode(cp: u32) -> Units {
    unicode_in(unicode_table(), cp)
}

/// Appends the `unicode_ci` weights of the characters of `cps`, big-endian.
pub(super) fn unicode_weights(cps: impl Iterator<Item = u32>, out: &mut Vec<u8>) {
    let t = unicode_table();
    for cp in cps {
        match t.index.get(cp as usize) {
            Some(&e) if e & IMPLICIT == 0 => {
                let start = (e >> 4) as usize;
                let n = (e & 0xf) as usize;
                for w in t.weights.get(start..start + n).unwrap_or(&[]) {
                    out.extend_from_slice(&w.to_be_bytes());
                }
            }
            _ => {
                for w in unicode_in(t, cp) {
                    out.extend_from_slice(&w.to_be_bytes());
                }
            }
        }
    }
}

fn unicode_in(t: &Unicode, cp: u32) -> Units {
    if cp > 0xffff {
        return Units::one(REPLACEMENT);
    }
    let Some(&e) = t.index.get(cp as usize) else {
        return Units::one(REPLACEMENT);
    };
    let mut u = Units::EMPTY;
    if e & IMPLICIT != 0 {
        let base = (e & 0xffff) as u16;
        u.buf[0] = base + (cp >> 15) as u16;
        u.buf[1] = ((cp & 0x7fff) | 0x8000) as u16;
        u.len = 2;
    } else {
        let start = (e >> 4) as usize;
        let n = (e & 0xf) as usize;
        if let Some(ws) = t.weights.get(start..start + n) {
            u.buf[..n].copy_from_slice(ws);
            u.len = n as u8;
        }
    }
    u
}

/// latin1: each byte's character and `latin1_swedish_ci` weight, and the
/// characters sorted for the reverse lookup.
struct Latin1 {
    chars: [u32; 256],
    weights: [u8; 256],
    reverse: Vec<(u32, u8)>,
}

fn latin1_table() -> &'static Latin1 {
    static T: OnceLock<Latin1> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = Latin1 {
            chars: std::array::from_fn(|b| b as u32),
            weights: std::array::from_fn(|b| b as u8),
            reverse: Vec::with_capacity(256),
        };
        for (b, e) in LATIN1_BIN.chunks_exact(3).enumerate().take(256) {
            t.chars[b] = u32::from(u16::from_le_bytes([e[0], e[1]]));
            t.weights[b] = e[2];
        }
        t.reverse = (0..=255u8).map(|b| (t.chars[usize::from(b)], b)).collect();
        t.reverse.sort_unstable();
        t
    })
}

/// The character of latin1 byte `b`.
pub(super) fn latin1_char(b: u8) -> u32 {
    latin1_table().chars[usize::from(b)]
}

/// The latin1 byte of character `cp` (`?` when latin1 has none).
pub(super) fn to_latin1(cp: u32) -> u8 {
    let r = &latin1_table().reverse;
    match r.binary_search_by_key(&cp, |&(c, _)| c) {
        Ok(i) => r.get(i).map_or(b'?', |&(_, b)| b),
        Err(_) => b'?',
    }
}

/// The `latin1_swedish_ci` weight of latin1 byte `b`.
pub(super) fn swedish(b: u8) -> u16 {
    u16::from(latin1_table().weights[usize::from(b)])
}
