//! Placement: which shard holds the rows of a table with a given shard key
//! value.
//!
//! A [`Placement`] is built by the rule loader from a `[[table]]` entry
//! (`shard_key` + `sharding`, or `broadcast = true`) and the config's
//! `[[shards]]` list; shards are named by their index in that list (0 is the
//! default shard). It is pure and cheap: no allocation on [`Placement::shard_of`].
//!
//! # The formulas (exact, so DBAs and tools can compute placement)
//!
//! A table's *shard list* is its `shards = [...]` in the order written, or
//! every `[[shards]]` entry in config order when it has none. `n` is its length.
//!
//! - `mod`: the key must be an integer `k`; the row is on
//!   `list[k.rem_euclid(n)]` (the non-negative remainder: `-1 mod 2` is 1, as
//!   in `MOD(MOD(k, n) + n, n)` in SQL).
//! - `hash`: `list[CRC32(text) % n]`, where `CRC32` is the IEEE CRC-32 that
//!   MariaDB's and MySQL's `CRC32()` compute, and `text` is the key's
//!   canonical text: an integer in decimal (a `-` sign when negative, no `+`,
//!   no leading zeros), a string as its bytes. So on a shard,
//!   `SELECT id FROM t WHERE CRC32(key) % n <> k` lists rows that are not on
//!   the shard at position `k` of the list. Works for any key type. Unless
//!   the rule says `hash = "bytes"` ([`Placement::hashes_bytes`]), the
//!   caller first makes the key canonical for its column
//!   (`frontend::shardkey`: a string becomes its collation key, so keys
//!   the column finds equal hash alike); this module hashes what it is given.
//! - `range`: the key must be an integer `k`; `ranges` are contiguous,
//!   ordered intervals `[from, to)` covering every integer (the first has no
//!   `from`, the last no `to`); the row is on the shard of the interval that
//!   holds `k`.
//! - broadcast: no key; the table is copied to every shard of its list (each
//!   write goes to all of them) and reads are served by the first shard of
//!   the list as written ([`Placement::read_shard`]).
//!   [`Placement::shard_of`] returns [`PlacementError::Broadcast`] for it, so
//!   that a write routed by key by mistake fails instead of reaching one shard
//!   only.
//!
//! Integer keys: for `mod` and `range`, a [`KeyValue::Str`] that is an
//! optional `+`/`-` sign followed by ASCII digits only (`'42'`, `'-7'`,
//! `'007'`) counts as that integer, as MySQL converts it when storing it into
//! an integer column; any other string (spaces, decimals, `0x..`, empty) is
//! [`PlacementError::NotInteger`]. For `hash`, a string is hashed as the bytes
//! written: `'007'` and `7` hash differently (`CRC32('007')` vs `CRC32(7)`),
//! so an integer key column should be written as integers.
//! NULL is never placeable ([`PlacementError::Null`]).

use std::fmt;

use crc32fast::hash as crc32;

/// A shard key value as written in SQL or bound to a prepared-statement parameter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyValue {
    /// SQL `NULL`.
    Null,
    /// An integer literal or integer parameter (covers BIGINT and BIGINT
    /// UNSIGNED).
    Int(i128),
    /// A string literal or string/blob parameter: its bytes, unescaped.
    Str(Vec<u8>),
}

impl From<i64> for KeyValue {
    fn from(v: i64) -> KeyValue {
        KeyValue::Int(i128::from(v))
    }
}

impl From<u64> for KeyValue {
    fn from(v: u64) -> KeyValue {
        KeyValue::Int(i128::from(v))
    }
}

impl From<&str> for KeyValue {
    fn from(v: &str) -> KeyValue {
        KeyValue::Str(v.as_bytes().to_vec())
    }
}

impl From<&[u8]> for KeyValue {
    fn from(v: &[u8]) -> KeyValue {
        KeyValue::Str(v.to_vec())
    }
}

/// Longest key text shown in an error message (longer keys are cut).
const SHOWN_MAX: usize = 64;

/// The value as it would be written in SQL, for messages: integers plain,
/// strings in single quotes (invalid UTF-8 replaced), cut after
/// [`SHOWN_MAX`] characters.
fn show(v: &KeyValue) -> String {
    match v {
        KeyValue::Null => "NULL".into(),
        KeyValue::Int(i) => i.to_string(),
        KeyValue::Str(b) => {
            let text = String::from_utf8_lossy(b);
            let mut s = String::with_capacity(text.len().min(SHOWN_MAX) + 5);
            s.push('\'');
            for (i, c) in text.chars().enumerate() {
                if i == SHOWN_MAX {
                    s.push_str("...");
                    break;
                }
                if c == '\'' {
                    s.push('\'');
                }
                s.push(c);
            }
            s.push('\'');
            s
        }
    }
}

/// A key value that cannot be placed. Messages show the value, not the table:
/// the caller adds the table and the column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The key is NULL.
    #[error("shard key is NULL: every row needs a shard key value")]
    Null,
    /// `mod`/`range` got a value that is not an integer (the value, as shown
    /// in SQL).
    #[error("shard key value {0} is not an integer (mod and range sharding need one)")]
    NotInteger(String),
    /// `mod`/`range` got a string of digits beyond the 128-bit range.
    #[error("shard key value {0} is out of the integer range")]
    OutOfRange(String),
    /// The table is broadcast: it has no single shard for a key.
    #[error("a broadcast table is on every shard: it has no shard for one key value")]
    Broadcast,
}

/// A placement that cannot be built (the rule loader reports these with the
/// rule's file and line before they can happen).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPlacement {
    /// An empty shard list.
    #[error("no shards")]
    NoShards,
    /// A shard listed twice.
    #[error("shard {0} is listed twice")]
    DuplicateShard(usize),
    /// Range bounds that do not increase.
    #[error("range bound {0} is not above the previous one")]
    Unordered(i128),
}

/// How a table is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharding {
    /// `sharding = "mod"`.
    Mod,
    /// `sharding = "hash"`.
    Hash,
    /// `sharding = "range"`.
    Range,
    /// `broadcast = true`.
    Broadcast,
}

impl fmt::Display for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sharding::Mod => "mod",
            Sharding::Hash => "hash",
            Sharding::Range => "range",
            Sharding::Broadcast => "broadcast",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    /// The shard list, in order.
    Mod(Box<[usize]>),
    /// The shard list, in order.
    Hash(Box<[usize]>),
    /// `targets[0]` holds keys below `starts[0]`; `targets[i + 1]` holds
    /// `starts[i] <= k < starts[i + 1]`. `targets.len() == starts.len() + 1`.
    Range {
        starts: Box<[i128]>,
        targets: Box<[usize]>,
    },
    /// The shard list, in order; the first serves reads.
    Broadcast(Box<[usize]>),
}

/// Where a table's rows live. See the module doc for the exact formulas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    rule: Rule,
    /// Every shard with rows of the table, ascending, no duplicates.
    shards: Box<[usize]>,
    /// `hash = "bytes"`: string keys are hashed as written, not folded by
    /// the column's collation (see [`Placement::hashes_bytes`]).
    by_bytes: bool,
}

fn check_list(list: &[usize]) -> Result<(), InvalidPlacement> {
    if list.is_empty() {
        return Err(InvalidPlacement::NoShards);
    }
    for (i, s) in list.iter().enumerate() {
        if list[..i].contains(s) {
            return Err(InvalidPlacement::DuplicateShard(*s));
        }
    }
    Ok(())
}

fn sorted(list: &[usize]) -> Box<[usize]> {
    let mut v = list.to_vec();
    v.sort_unstable();
    v.dedup();
    v.into_boxed_slice()
}

impl Placement {
    /// `sharding = "mod"` over `list` (shard indexes, in the rule's order).
    ///
    /// # Errors
    /// An empty list, or a shard listed twice.
    pub fn modulo(list: Vec<usize>) -> Result<Placement, InvalidPlacement> {
        check_list(&list)?;
        let shards = sorted(&list);
        Ok(Placement {
            rule: Rule::Mod(list.into_boxed_slice()),
            shards,
            by_bytes: false,
        })
    }

    /// `sharding = "hash"` over `list`.
    ///
    /// # Errors
    /// As [`Placement::modulo`].
    pub fn hash(list: Vec<usize>) -> Result<Placement, InvalidPlacement> {
        check_list(&list)?;
        let shards = sorted(&list);
        Ok(Placement {
            rule: Rule::Hash(list.into_boxed_slice()),
            shards,
            by_bytes: false,
        })
    }

    /// `sharding = "hash"` with `hash = "bytes"` over `list`: string keys
    /// are hashed as the bytes written, whatever the column's collation.
    ///
    /// # Errors
    /// As [`Placement::modulo`].
    pub fn hash_bytes(list: Vec<usize>) -> Result<Placement, InvalidPlacement> {
        let mut p = Placement::hash(list)?;
        p.by_bytes = true;
        Ok(p)
    }

    /// Whether string keys are placed by their bytes as written (`hash =
    /// "bytes"`) rather than by the column's collation. The collation fold
    /// is the caller's (`frontend::shardkey`): [`Placement::shard_of`]
    /// hashes the value it is given.
    pub fn hashes_bytes(&self) -> bool {
        self.by_bytes
    }

    /// `broadcast = true` over `list`; `list[0]` serves reads.
    ///
    /// # Errors
    /// As [`Placement::modulo`].
    pub fn broadcast(list: Vec<usize>) -> Result<Placement, InvalidPlacement> {
        check_list(&list)?;
        let shards = sorted(&list);
        Ok(Placement {
            rule: Rule::Broadcast(list.into_boxed_slice()),
            shards,
            by_bytes: false,
        })
    }

    /// `sharding = "range"`: keys below the first bound go to `first`; each
    /// `(from, shard)` of `rest` takes keys from `from` (inclusive) up to the
    /// next bound (exclusive), the last one up to the largest key. A shard may
    /// hold several ranges.
    ///
    /// # Errors
    /// [`InvalidPlacement::Unordered`] when the bounds do not strictly increase.
    pub fn range(first: usize, rest: &[(i128, usize)]) -> Result<Placement, InvalidPlacement> {
        for w in rest.windows(2) {
            if w[1].0 <= w[0].0 {
                return Err(InvalidPlacement::Unordered(w[1].0));
            }
        }
        let starts: Box<[i128]> = rest.iter().map(|r| r.0).collect();
        let targets: Box<[usize]> = std::iter::once(first)
            .chain(rest.iter().map(|r| r.1))
            .collect();
        let shards = sorted(&targets);
        Ok(Placement {
            rule: Rule::Range { starts, targets },
            shards,
            by_bytes: false,
        })
    }

    /// How the table is placed.
    pub fn kind(&self) -> Sharding {
        match self.rule {
            Rule::Mod(_) => Sharding::Mod,
            Rule::Hash(_) => Sharding::Hash,
            Rule::Range { .. } => Sharding::Range,
            Rule::Broadcast(_) => Sharding::Broadcast,
        }
    }

    /// The shard list in the rule's order: for `mod`/`hash` the list that
    /// `k % n` indexes; for broadcast the shards it is copied to (the first
    /// serves reads); for `range` the shard of each range, in range order
    /// (a shard may repeat).
    pub fn list(&self) -> &[usize] {
        match &self.rule {
            Rule::Mod(l) | Rule::Hash(l) | Rule::Broadcast(l) => l,
            Rule::Range { targets, .. } => targets,
        }
    }

    /// `range`: the lower bound (inclusive) of every range but the first, in
    /// order (range `i + 1` starts at `bounds()[i]`); empty for other kinds.
    pub fn bounds(&self) -> &[i128] {
        match &self.rule {
            Rule::Range { starts, .. } => starts,
            _ => &[],
        }
    }

    /// Index (into the config's `[[shards]]` list) of the shard holding rows
    /// with key `v`.
    ///
    /// # Errors
    /// [`PlacementError::Null`] for NULL; [`PlacementError::NotInteger`] or
    /// [`PlacementError::OutOfRange`] for a string that `mod`/`range` cannot
    /// read as an integer; [`PlacementError::Broadcast`] for a broadcast table
    /// (use [`Placement::shards`] to write, [`Placement::read_shard`] to read).
    pub fn shard_of(&self, v: &KeyValue) -> Result<usize, PlacementError> {
        if matches!(v, KeyValue::Null) {
            return Err(PlacementError::Null);
        }
        match &self.rule {
            Rule::Mod(list) => {
                let k = int_key(v)?;
                let n = list.len().max(1);
                // 64-bit division when the key fits (128-bit is a slow call).
                let i = match i64::try_from(k) {
                    Ok(k) => k.rem_euclid(n as i64) as usize,
                    Err(_) => k.rem_euclid(n as i128) as usize,
                };
                pick(list, i)
            }
            Rule::Hash(list) => {
                let crc = hash_key(v);
                pick(list, (u64::from(crc) % (list.len().max(1) as u64)) as usize)
            }
            Rule::Range { starts, targets } => {
                let k = int_key(v)?;
                pick(targets, starts.partition_point(|&s| s <= k))
            }
            Rule::Broadcast(_) => Err(PlacementError::Broadcast),
        }
    }

    /// Every shard the table has rows on (broadcast: every shard it is copied
    /// to), ascending, no duplicates.
    pub fn shards(&self) -> &[usize] {
        &self.shards
    }

    /// True for `broadcast = true` tables.
    pub fn is_broadcast(&self) -> bool {
        matches!(self.rule, Rule::Broadcast(_))
    }

    /// The shard that serves reads of a broadcast table (the first of its list
    /// as written); for other tables, `shards()[0]`.
    pub fn read_shard(&self) -> usize {
        match &self.rule {
            Rule::Broadcast(list) => list.first().copied().unwrap_or(0),
            _ => self.shards.first().copied().unwrap_or(0),
        }
    }
}

/// `list[i]`; the constructors guarantee it exists, but no input may panic.
#[inline]
fn pick(list: &[usize], i: usize) -> Result<usize, PlacementError> {
    // Unreachable: lists are never empty and `i` is reduced modulo their length.
    Ok(list.get(i).copied().unwrap_or(0))
}

/// The integer a key stands for (mod and range).
#[inline]
fn int_key(v: &KeyValue) -> Result<i128, PlacementError> {
    match v {
        KeyValue::Null => Err(PlacementError::Null),
        KeyValue::Int(i) => Ok(*i),
        KeyValue::Str(b) => parse_int(b).map_err(|overflow| {
            if overflow {
                PlacementError::OutOfRange(show(v))
            } else {
                PlacementError::NotInteger(show(v))
            }
        }),
    }
}

/// An optional sign then one or more ASCII digits. `Err(true)`: digits that
/// overflow `i128`; `Err(false)`: not of that form.
fn parse_int(b: &[u8]) -> Result<i128, bool> {
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, b),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(false);
    }
    // Accumulated negatively so that i128::MIN fits.
    let mut acc: i128 = 0;
    for d in digits {
        acc = acc
            .checked_mul(10)
            .and_then(|a| a.checked_sub(i128::from(d - b'0')))
            .ok_or(true)?;
    }
    if neg {
        Ok(acc)
    } else {
        acc.checked_neg().ok_or(true)
    }
}

/// CRC-32 of the key's canonical text (see the module doc).
#[inline]
fn hash_key(v: &KeyValue) -> u32 {
    match v {
        KeyValue::Null => crc32(b""),
        KeyValue::Str(b) => crc32(b),
        KeyValue::Int(i) => {
            let mut buf = [0u8; 40];
            crc32(decimal(*i, &mut buf))
        }
    }
}

/// `i` in decimal, written at the end of `buf` (40 bytes hold any i128).
fn decimal(i: i128, buf: &mut [u8; 40]) -> &[u8] {
    let mut m = i.unsigned_abs();
    let mut at = buf.len();
    // Digits above 64 bits with 128-bit division (a slow call), the rest
    // with 64-bit division.
    while m > u128::from(u64::MAX) {
        at -= 1;
        buf[at] = b'0' + (m % 10) as u8;
        m /= 10;
    }
    let mut m = m as u64;
    loop {
        at -= 1;
        buf[at] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if i < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    &buf[at..]
}

/// The CRC-32 placement hash of `v`, as `CRC32(v)` in MariaDB (for tools and
/// tests). NULL hashes as the empty string (it is never placed).
pub fn key_crc32(v: &KeyValue) -> u32 {
    hash_key(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> KeyValue {
        KeyValue::from(v)
    }

    /// Values computed by MariaDB 10.11 (`SELECT CRC32(...)` on the test bed).
    #[test]
    fn crc_matches_mariadb() {
        let cases: &[(KeyValue, u32)] = &[
            (s("abc"), 891_568_578),
            (s(""), 0),
            (s("0"), 4_108_050_209),
            (KeyValue::Int(0), 4_108_050_209),
            (KeyValue::Int(1), 2_212_294_583),
            (KeyValue::Int(-1), 808_273_962),
            (s("-1"), 808_273_962),
            (KeyValue::Int(123_456_789), 3_421_780_262),
            (KeyValue::Int(i128::from(i64::MIN)), 2_871_333_643),
            (KeyValue::Int(i128::from(u64::MAX)), 3_221_115_162),
            (KeyValue::Int(i128::MAX), 2_740_539_807),
            (KeyValue::Int(i128::MIN), 1_844_565_061),
            (s("user@example.com"), 1_634_596_257),
            (KeyValue::Int(42), 841_265_288),
            (KeyValue::Int(1_000_000), 469_554_653),
            (KeyValue::Str(vec![0x00, 0xff, 0x80]), 2_178_787_136),
            (s("été"), 1_154_575_572),
            // CRC32(007) is CRC32(7); CRC32('007') hashes the three bytes.
            (KeyValue::Int(7), 1_790_921_346),
            (s("007"), 3_167_858_558),
        ];
        for (v, want) in cases {
            assert_eq!(key_crc32(v), *want, "{v:?}");
        }
    }

    #[test]
    fn decimal_text() {
        let mut buf = [0u8; 40];
        let big = i128::from(u64::MAX);
        for i in [
            0i128,
            7,
            -7,
            10,
            -100,
            big,
            big + 1,
            -big - 1,
            i128::MAX,
            i128::MIN,
        ] {
            assert_eq!(decimal(i, &mut buf), i.to_string().as_bytes());
        }
    }

    #[test]
    fn modulo_is_euclidean_over_the_list_in_order() {
        let p = Placement::modulo(vec![2, 0, 1]).unwrap();
        assert_eq!(p.shards(), &[0, 1, 2]);
        assert_eq!(p.list(), &[2, 0, 1]);
        assert!(p.bounds().is_empty());
        assert_eq!(p.kind(), Sharding::Mod);
        let cases = [(0, 2), (1, 0), (2, 1), (3, 2), (-1, 1), (-2, 0), (-3, 2)];
        for (k, want) in cases {
            assert_eq!(p.shard_of(&KeyValue::Int(k)), Ok(want), "key {k}");
        }
        assert_eq!(p.shard_of(&s("4")), Ok(0));
        assert_eq!(p.shard_of(&s("+4")), Ok(0));
        assert_eq!(p.shard_of(&s("-1")), Ok(1));
        assert_eq!(p.shard_of(&s("0004")), Ok(0));
        assert_eq!(p.shard_of(&KeyValue::Int(i128::MIN)), Ok(0));
        assert_eq!(p.read_shard(), 0);
        assert!(!p.is_broadcast());
    }

    #[test]
    fn integer_strings_are_strict() {
        let p = Placement::modulo(vec![0, 1]).unwrap();
        for bad in [
            "", "-", "+", " 1", "1 ", "1.0", "1e3", "0x10", "--1", "abc", "١",
        ] {
            assert_eq!(
                p.shard_of(&s(bad)),
                Err(PlacementError::NotInteger(format!("'{bad}'"))),
                "{bad:?}"
            );
        }
        let huge = "9".repeat(40);
        assert_eq!(
            p.shard_of(&s(&huge)),
            Err(PlacementError::OutOfRange(format!("'{huge}'")))
        );
        assert_eq!(p.shard_of(&KeyValue::Null), Err(PlacementError::Null));
        assert_eq!(
            p.shard_of(&s(&i128::MIN.to_string())),
            Ok(0),
            "i128::MIN fits"
        );
        assert_eq!(
            p.shard_of(&s(&i128::MAX.to_string())),
            Ok(1),
            "i128::MAX is odd"
        );
    }

    #[test]
    fn error_messages_show_the_value() {
        let p = Placement::modulo(vec![0]).unwrap();
        let e = p.shard_of(&s("it's")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "shard key value 'it''s' is not an integer (mod and range sharding need one)"
        );
        let long = "x".repeat(100);
        let e = p.shard_of(&s(&long)).unwrap_err().to_string();
        assert!(e.contains(&format!("'{}...'", "x".repeat(64))), "{e}");
        let e = p.shard_of(&KeyValue::Str(vec![0xff, b'a'])).unwrap_err();
        assert_eq!(
            e,
            PlacementError::NotInteger("'\u{fffd}a'".into()),
            "invalid UTF-8 is shown replaced"
        );
    }

    #[test]
    fn hash_is_crc_mod_n_for_any_value() {
        let p = Placement::hash(vec![0, 1]).unwrap();
        // MariaDB: CRC32('abc') % 2 = 0, CRC32(7) % 2 = 0, CRC32(1) % 2 = 1.
        assert_eq!(p.shard_of(&s("abc")), Ok(0));
        assert_eq!(p.shard_of(&KeyValue::Int(7)), Ok(0));
        assert_eq!(p.shard_of(&KeyValue::Int(1)), Ok(1));
        let p3 = Placement::hash(vec![1, 2, 0]).unwrap();
        // CRC32(42) % 3 = 841265288 % 3 = 2 -> list[2] = shard 0.
        assert_eq!(p3.shard_of(&KeyValue::Int(42)), Ok(0));
        // CRC32('user@example.com') % 3 = 1634596257 % 3 = 0 -> shard 1.
        assert_eq!(p3.shard_of(&s("user@example.com")), Ok(1));
        assert_eq!(p3.shard_of(&KeyValue::Null), Err(PlacementError::Null));
        assert_eq!(p3.shards(), &[0, 1, 2]);
    }

    #[test]
    fn ranges_are_half_open() {
        // (.., 100) -> 1, [100, 200) -> 0, [200, ..) -> 1
        let p = Placement::range(1, &[(100, 0), (200, 1)]).unwrap();
        assert_eq!(p.kind(), Sharding::Range);
        assert_eq!(p.shards(), &[0, 1]);
        let cases = [
            (i128::MIN, 1),
            (-5, 1),
            (99, 1),
            (100, 0),
            (199, 0),
            (200, 1),
            (i128::MAX, 1),
        ];
        for (k, want) in cases {
            assert_eq!(p.shard_of(&KeyValue::Int(k)), Ok(want), "key {k}");
        }
        assert_eq!(p.shard_of(&s("150")), Ok(0));
        assert_eq!(p.list(), &[1, 0, 1]);
        assert_eq!(p.bounds(), &[100, 200]);
        assert!(matches!(
            p.shard_of(&s("x")),
            Err(PlacementError::NotInteger(_))
        ));
        let one = Placement::range(3, &[]).unwrap();
        assert_eq!(one.shard_of(&KeyValue::Int(-9)), Ok(3));
        assert_eq!(one.shards(), &[3]);
        assert_eq!(one.read_shard(), 3);
    }

    #[test]
    fn broadcast_reads_from_its_first_shard() {
        let p = Placement::broadcast(vec![2, 0]).unwrap();
        assert!(p.is_broadcast());
        assert_eq!(p.shards(), &[0, 2]);
        assert_eq!(p.read_shard(), 2);
        assert_eq!(
            p.shard_of(&KeyValue::Int(1)),
            Err(PlacementError::Broadcast)
        );
    }

    proptest::proptest! {
        /// Any key and any placement: no panic, a shard of the table, the
        /// documented formula, and a digit string placed like its integer.
        #[test]
        fn every_key_has_its_documented_shard(
            k in proptest::num::i128::ANY,
            small in -1000i128..1000,
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..48),
            n in 1usize..9,
            mut bounds in proptest::collection::vec(-2000i128..2000, 0..6),
        ) {
            let list: Vec<usize> = (0..n).rev().collect();
            let m = Placement::modulo(list.clone()).unwrap();
            let h = Placement::hash(list.clone()).unwrap();
            bounds.sort_unstable();
            bounds.dedup();
            let rest: Vec<(i128, usize)> = bounds.iter().enumerate().map(|(i, &b)| (b, i % n)).collect();
            let r = Placement::range(n - 1, &rest).unwrap();
            for key in [k, small] {
                let int = KeyValue::Int(key);
                let text = KeyValue::Str(key.to_string().into_bytes());
                let want = list[key.rem_euclid(n as i128) as usize];
                proptest::prop_assert_eq!(m.shard_of(&int), Ok(want));
                proptest::prop_assert_eq!(m.shard_of(&text), Ok(want));
                let crc = crc32fast::hash(key.to_string().as_bytes());
                let want = list[(crc as usize) % n];
                proptest::prop_assert_eq!(h.shard_of(&int), Ok(want));
                proptest::prop_assert_eq!(h.shard_of(&text), Ok(want));
                let at = bounds.iter().filter(|&&b| b <= key).count();
                let want = if at == 0 { n - 1 } else { rest[at - 1].1 };
                proptest::prop_assert_eq!(r.shard_of(&int), Ok(want));
                proptest::prop_assert_eq!(r.shard_of(&text), Ok(want));
            }
            let any = KeyValue::Str(bytes.clone());
            for p in [&m, &h, &r] {
                if let Ok(s) = p.shard_of(&any) {
                    proptest::prop_assert!(p.shards().contains(&s));
                }
            }
            let crc = crc32fast::hash(&bytes);
            proptest::prop_assert_eq!(h.shard_of(&any), Ok(list[(crc as usize) % n]));
        }
    }

    #[test]
    fn invalid_placements_are_refused() {
        assert_eq!(Placement::modulo(vec![]), Err(InvalidPlacement::NoShards));
        assert_eq!(
            Placement::hash(vec![0, 1, 0]),
            Err(InvalidPlacement::DuplicateShard(0))
        );
        assert_eq!(
            Placement::broadcast(vec![]),
            Err(InvalidPlacement::NoShards)
        );
        assert_eq!(
            Placement::range(0, &[(10, 1), (10, 0)]),
            Err(InvalidPlacement::Unordered(10))
        );
        assert_eq!(
            Placement::range(0, &[(10, 1), (5, 0)]),
            Err(InvalidPlacement::Unordered(5))
        );
    }
}
