//! How MariaDB compares strings: the collations idgate reproduces exactly,
//! for placing rows by a string shard key (`shard::key`) and for merging
//! scattered `ORDER BY` / `MIN` / `MAX` (`shard::value`). One place for both,
//! so routing and merging can never disagree about which strings are equal.
//!
//! A collation turns a string into a sequence of *weights* (the units of
//! MariaDB's `WEIGHT_STRING()`); two strings compare as their weight
//! sequences do. The weights are MariaDB 10.11's own, read from the server
//! character by character by `scripts/collation-data.py` into `data/`, and
//! `tests/collation_server.rs` checks every Basic Multilingual Plane
//! character of every collation here against a live server.
//!
//! - `*_general_ci`: one 16-bit weight per character (case and most accents
//!   folded: `a` = `A` = `Å`); characters beyond U+FFFF all weigh U+FFFD.
//! - `*_unicode_ci`: UCA 4.0.0, primary level: 0 to 8 weights per character
//!   (`ß` = `ss`, ignorable characters weigh nothing), implicit weights for
//!   CJK and unassigned characters; beyond U+FFFF all weigh U+FFFD.
//! - `latin1_swedish_ci`: one weight per latin1 byte (MariaDB's latin1 is
//!   Windows-1252).
//! - `*_bin`: the characters' bytes in the column's character set; `binary`
//!   (VARBINARY, BLOB): the bytes, nothing padded.
//!
//! PAD SPACE (every collation here but `binary` and the `_nopad_` ones): a
//! shorter string compares as if padded with spaces, so `'a'` = `'a  '`,
//! and `'a\t'` < `'a'`. [`Collation::compare`] does exactly that; the
//! *key* ([`Collation::key`]) is the weight string with trailing space
//! weights removed, so equal strings have equal keys and can be hashed.
//!
//! Strings arrive in a character set ([`Charset`]): a statement's literal
//! in the session's `character_set_client`, a row's value in its
//! `character_set_results`; they are decoded to characters and weighed in
//! the column's collation, converting to latin1 (`?` for what latin1 lacks)
//! where the column is latin1, as MariaDB converts them. Bytes that are not
//! valid in their character set count as `?`.
//!
//! Other collations (language tailorings with contractions such as
//! `utf8mb4_spanish_ci`, UCA 5.2/14.0, other character sets) are not
//! reproduced: [`by_name`] and [`by_id`] return `None`, and callers refuse
//! rather than guess.

mod tables;

use std::cmp::Ordering;
use std::fmt;

/// A character set strings arrive in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charset {
    /// UTF-8 up to 4 bytes (`utf8mb4`).
    Utf8mb4,
    /// UTF-8 up to 3 bytes (`utf8mb3`, `utf8`).
    Utf8mb3,
    /// MariaDB's `latin1` (Windows-1252).
    Latin1,
    /// Bytes (`binary`).
    Binary,
}

impl Charset {
    /// The character set of a MariaDB name (`utf8mb4`, `utf8`, `latin1`...).
    pub fn by_name(name: &str) -> Option<Charset> {
        Some(match name.to_ascii_lowercase().as_str() {
            "utf8mb4" => Charset::Utf8mb4,
            "utf8mb3" | "utf8" => Charset::Utf8mb3,
            "latin1" => Charset::Latin1,
            "binary" => Charset::Binary,
            _ => return None,
        })
    }

    /// MariaDB's name.
    pub fn name(self) -> &'static str {
        match self {
            Charset::Utf8mb4 => "utf8mb4",
            Charset::Utf8mb3 => "utf8mb3",
            Charset::Latin1 => "latin1",
            Charset::Binary => "binary",
        }
    }

    fn is_utf8(self) -> bool {
        matches!(self, Charset::Utf8mb4 | Charset::Utf8mb3)
    }
}

/// How a collation weighs characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Weigh {
    /// The bytes themselves (`binary`).
    Bytes,
    /// The characters' bytes in the collation's character set (`_bin`).
    Bin,
    /// `*_general_ci`.
    General,
    /// `*_unicode_ci`.
    Unicode,
    /// `latin1_swedish_ci`.
    Swedish,
}

/// One collation idgate reproduces.
pub struct Collation {
    /// MariaDB's name (`utf8mb4_general_ci`).
    pub name: &'static str,
    /// MariaDB's number (column definitions carry it).
    pub id: u16,
    /// The character set of the column's stored bytes.
    pub charset: Charset,
    weigh: Weigh,
    /// PAD SPACE: trailing spaces do not count.
    pad: bool,
}

impl fmt::Debug for Collation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for Collation {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Collation {}

const fn c(name: &'static str, id: u16, charset: Charset, weigh: Weigh, pad: bool) -> Collation {
    Collation {
        name,
        id,
        charset,
        weigh,
        pad,
    }
}

use Charset::{Binary, Latin1, Utf8mb3, Utf8mb4};

/// Every collation idgate reproduces.
pub static ALL: &[Collation] = &[
    c("binary", 63, Binary, Weigh::Bytes, false),
    c("utf8mb4_general_ci", 45, Utf8mb4, Weigh::General, true),
    c(
        "utf8mb4_general_nopad_ci",
        1069,
        Utf8mb4,
        Weigh::General,
        false,
    ),
    c("utf8mb4_unicode_ci", 224, Utf8mb4, Weigh::Unicode, true),
    c(
        "utf8mb4_unicode_nopad_ci",
        1248,
        Utf8mb4,
        Weigh::Unicode,
        false,
    ),
    c("utf8mb4_bin", 46, Utf8mb4, Weigh::Bin, true),
    c("utf8mb4_nopad_bin", 1070, Utf8mb4, Weigh::Bin, false),
    c("utf8mb3_general_ci", 33, Utf8mb3, Weigh::General, true),
    c(
        "utf8mb3_general_nopad_ci",
        1057,
        Utf8mb3,
        Weigh::General,
        false,
    ),
    c("utf8mb3_unicode_ci", 192, Utf8mb3, Weigh::Unicode, true),
    c(
        "utf8mb3_unicode_nopad_ci",
        1216,
        Utf8mb3,
        Weigh::Unicode,
        false,
    ),
    c("utf8mb3_bin", 83, Utf8mb3, Weigh::Bin, true),
    c("utf8mb3_nopad_bin", 1107, Utf8mb3, Weigh::Bin, false),
    c("latin1_swedish_ci", 8, Latin1, Weigh::Swedish, true),
    c(
        "latin1_swedish_nopad_ci",
        1032,
        Latin1,
        Weigh::Swedish,
        false,
    ),
    c("latin1_bin", 47, Latin1, Weigh::Bin, true),
    c("latin1_nopad_bin", 1071, Latin1, Weigh::Bin, false),
];

/// The collation of a MariaDB name (`utf8_general_ci` is
/// `utf8mb3_general_ci`), if idgate reproduces it.
pub fn by_name(name: &str) -> Option<&'static Collation> {
    let lower = name.to_ascii_lowercase();
    let name = match lower.strip_prefix("utf8_") {
        Some(rest) => format!("utf8mb3_{rest}"),
        None => lower,
    };
    ALL.iter().find(|c| c.name == name)
}

/// The collation of a MariaDB collation number, if idgate reproduces it.
pub fn by_id(id: u16) -> Option<&'static Collation> {
    ALL.iter().find(|c| c.id == id)
}

/// The `binary` collation (bytes, no padding).
pub fn binary() -> &'static Collation {
    &ALL[0]
}

/// The character that stands for what cannot be converted.
const QUESTION: u32 = b'?' as u32;

/// Decodes `s` (in `cs`) into characters; invalid bytes are `?`. `Binary`
/// input yields each byte as a character (callers handle it).
fn chars(s: &[u8], cs: Charset) -> impl Iterator<Item = u32> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let b = *s.get(i)?;
        if b < 0x80 {
            // ASCII is itself in every character set here.
            i += 1;
            return Some(u32::from(b));
        }
        if !cs.is_utf8() {
            i += 1;
            return Some(match cs {
                Charset::Latin1 => tables::latin1_char(b),
                _ => u32::from(b),
            });
        }
        let (len, init) = match b {
            0x00..=0x7f => (1, u32::from(b)),
            0xc2..=0xdf => (2, u32::from(b & 0x1f)),
            0xe0..=0xef => (3, u32::from(b & 0x0f)),
            0xf0..=0xf4 if cs == Charset::Utf8mb4 => (4, u32::from(b & 0x07)),
            _ => {
                i += 1;
                return Some(QUESTION);
            }
        };
        let mut cp = init;
        for k in 1..len {
            match s.get(i + k) {
                Some(&c) if c & 0xc0 == 0x80 => cp = (cp << 6) | u32::from(c & 0x3f),
                _ => {
                    i += k;
                    return Some(QUESTION);
                }
            }
        }
        let min = [0, 0, 0x80, 0x800, 0x10000][len];
        i += len;
        Some(
            if cp < min || cp > 0x10ffff || (0xd800..=0xdfff).contains(&cp) {
                QUESTION
            } else {
                cp
            },
        )
    })
}

/// Up to 8 weights of one character.
#[derive(Clone, Copy)]
struct Units {
    buf: [u16; 8],
    len: u8,
    at: u8,
}

impl Units {
    const EMPTY: Units = Units {
        buf: [0; 8],
        len: 0,
        at: 0,
    };

    fn one(w: u16) -> Units {
        let mut u = Units::EMPTY;
        u.buf[0] = w;
        u.len = 1;
        u
    }
}

impl Iterator for Units {
    type Item = u16;
    fn next(&mut self) -> Option<u16> {
        if self.at >= self.len {
            return None;
        }
        let w = self.buf.get(usize::from(self.at)).copied();
        self.at += 1;
        w
    }
}

impl Collation {
    /// Whether trailing spaces do not count (PAD SPACE).
    pub fn pads(&self) -> bool {
        self.pad
    }

    /// Whether this is a binary (`_bin` or `binary`) collation.
    pub fn is_binary(&self) -> bool {
        matches!(self.weigh, Weigh::Bytes | Weigh::Bin)
    }

    /// Bytes per weight in [`Collation::weights`].
    fn unit_bytes(&self) -> usize {
        match self.weigh {
            Weigh::General | Weigh::Unicode => 2,
            Weigh::Bytes | Weigh::Bin | Weigh::Swedish => 1,
        }
    }

    /// The weight of a space.
    fn space(&self) -> u16 {
        match self.weigh {
            Weigh::Unicode => tables::UNICODE_SPACE,
            _ => 0x20,
        }
    }

    /// The weights of one character.
    fn weigh_char(&self, cp: u32) -> Units {
        match self.weigh {
            Weigh::Bytes => Units::one(cp as u16 & 0xff),
            Weigh::General => Units::one(tables::general(cp)),
            Weigh::Unicode => tables::unicode(cp),
            Weigh::Swedish => Units::one(tables::swedish(tables::to_latin1(cp))),
            Weigh::Bin => match self.charset {
                Charset::Latin1 => Units::one(u16::from(tables::to_latin1(cp))),
                _ => {
                    // The character's UTF-8 bytes.
                    let mut b = [0u8; 4];
                    let s = char::from_u32(cp).unwrap_or('?').encode_utf8(&mut b);
                    let mut u = Units::EMPTY;
                    for (slot, byte) in u.buf.iter_mut().zip(s.bytes()) {
                        *slot = u16::from(byte);
                    }
                    u.len = s.len() as u8;
                    u
                }
            },
        }
    }

    /// The weight units of `s`, given in `cs` (`Binary`: already in the
    /// collation's character set).
    fn units<'s>(&'s self, s: &'s [u8], cs: Charset) -> impl Iterator<Item = u16> + 's {
        let cs = self.input(cs);
        let narrow = self.charset == Utf8mb3;
        chars(s, cs)
            // A column in utf8mb3 stores `?` for what it cannot hold.
            .map(move |cp| if narrow && cp > 0xffff { QUESTION } else { cp })
            .flat_map(move |cp| self.weigh_char(cp))
    }

    /// Appends the weight string of `s` (in `cs`): what MariaDB's
    /// `WEIGHT_STRING()` returns for a VARCHAR of this collation (for a
    /// `_bin` collation: the bytes in the collation's character set).
    pub fn weights(&self, s: &[u8], cs: Charset, out: &mut Vec<u8>) {
        let cs = self.input(cs);
        let narrow = self.charset == Utf8mb3;
        match self.weigh {
            Weigh::Bytes => return out.extend_from_slice(s),
            // Valid UTF-8 is its own weight string; anything else is decoded
            // below (invalid bytes count as `?`).
            Weigh::Bin
                if self.charset.is_utf8()
                    && cs.is_utf8()
                    && !narrow
                    && std::str::from_utf8(s).is_ok() =>
            {
                return out.extend_from_slice(s);
            }
            Weigh::General => {
                let t = tables::general_table();
                out.reserve(2 * s.len());
                for cp in chars(s, cs) {
                    let cp = if narrow && cp > 0xffff { QUESTION } else { cp };
                    let w = t.get(cp as usize).copied().unwrap_or(tables::REPLACEMENT);
                    out.extend_from_slice(&w.to_be_bytes());
                }
                return;
            }
            Weigh::Unicode => {
                out.reserve(2 * s.len());
                let cps = chars(s, cs).map(|cp| if narrow && cp > 0xffff { QUESTION } else { cp });
                return tables::unicode_weights(cps, out);
            }
            _ => {}
        }
        let two = self.unit_bytes() == 2;
        for w in self.units(s, cs) {
            if two {
                out.extend_from_slice(&w.to_be_bytes());
            } else {
                out.push(w as u8);
            }
        }
    }

    /// Appends the key of `s` (in `cs`): its weight string without trailing
    /// space weights where the collation pads. Two strings are equal in
    /// this collation exactly when their keys are equal.
    pub fn key(&self, s: &[u8], cs: Charset, out: &mut Vec<u8>) {
        let start = out.len();
        self.weights(s, cs, out);
        if !self.pad {
            return;
        }
        let unit = self.unit_bytes();
        let space = self.space().to_be_bytes();
        let space = &space[2 - unit..];
        while out.len() >= start + unit && out.ends_with(space) {
            out.truncate(out.len() - unit);
        }
    }

    /// Orders `a` (in `a_cs`) and `b` (in `b_cs`) as MariaDB does in this
    /// collation. Allocates nothing.
    pub fn compare(&self, a: &[u8], a_cs: Charset, b: &[u8], b_cs: Charset) -> Ordering {
        let (a_cs, b_cs) = (self.input(a_cs), self.input(b_cs));
        let narrow = self.charset == Utf8mb3;
        let stored = move |cp: u32| if narrow && cp > 0xffff { QUESTION } else { cp };
        match self.weigh {
            // One weight per character, from one table: no per-character
            // weight buffer (the merge compares every row's key this way).
            Weigh::General => {
                let t = tables::general_table();
                let w = move |cp: u32| {
                    t.get(stored(cp) as usize)
                        .copied()
                        .unwrap_or(tables::REPLACEMENT)
                };
                self.ordered(chars(a, a_cs).map(w), chars(b, b_cs).map(w))
            }
            // The bytes themselves: UTF-8 byte order is code point order
            // (invalid bytes are decoded below, as `?`).
            Weigh::Bin
                if self.charset.is_utf8()
                    && a_cs.is_utf8()
                    && b_cs.is_utf8()
                    && !narrow
                    && std::str::from_utf8(a).is_ok()
                    && std::str::from_utf8(b).is_ok() =>
            {
                self.ordered(
                    a.iter().map(|&x| u16::from(x)),
                    b.iter().map(|&x| u16::from(x)),
                )
            }
            _ => self.ordered(self.units(a, a_cs), self.units(b, b_cs)),
        }
    }

    /// The character set bytes given in `cs` are decoded in.
    fn input(&self, cs: Charset) -> Charset {
        match (self.weigh, cs) {
            (Weigh::Bytes, _) => Charset::Binary,
            (_, Charset::Binary) => self.charset,
            (_, cs) => cs,
        }
    }

    /// Compares weight sequences, padded with spaces where the collation pads.
    fn ordered(&self, x: impl Iterator<Item = u16>, y: impl Iterator<Item = u16>) -> Ordering {
        if self.pad {
            cmp_padded(x, y, self.space())
        } else {
            x.cmp(y)
        }
    }
}

/// Compares two sequences as if the shorter were padded with `space`.
pub fn cmp_padded<T: Ord + Copy>(
    mut a: impl Iterator<Item = T>,
    mut b: impl Iterator<Item = T>,
    space: T,
) -> Ordering {
    loop {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) => match x.cmp(&y) {
                Ordering::Equal => {}
                o => return o,
            },
            (None, None) => return Ordering::Equal,
            (Some(x), None) => {
                return std::iter::once(x)
                    .chain(a)
                    .map(|c| c.cmp(&space))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            }
            (None, Some(y)) => {
                return std::iter::once(y)
                    .chain(b)
                    .map(|c| space.cmp(&c))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            }
        }
    }
}

#[cfg(test)]
mod tests;
