//! The merge of scattered replies as their rows arrive, in bounded memory.
//!
//! [`Merger`] is [`super::merge::merge`] turned inside out: instead of every
//! shard's whole reply, it is given each shard's column head once, then the
//! shards' rows one at a time, when it asks for them ([`Pull::Need`]), and
//! hands back the client's rows one at a time ([`Pull::Row`]). It holds at
//! most one row per shard (the next of each, for the k-way merge; an
//! aggregate's one row per shard), plus shard 0's column head, and says how
//! many bytes that is ([`Merger::held`]), so the caller can enforce its cap.
//! The rows it returns are the rows `merge` returns for the same replies,
//! in the same order (a property test checks it):
//!
//! - no ORDER BY: shard after shard (a shard is asked for its rows only
//!   once the one before has ended), OFFSET skipped and LIMIT applied as
//!   they pass;
//! - ORDER BY: one head row per shard; the next row is the least head (keys
//!   as `value.rs` compares them, ties by shard), after which that shard is
//!   asked for its next row; OFFSET rows are skipped as they come out;
//!   once LIMIT rows are out the merge is done (the caller drains or
//!   closes what the shards still send);
//! - aggregates without GROUP BY: every shard's one row, combined when the
//!   last shard has ended.
//!
//! Which shard's reply ended, and with what terminator, is the caller's:
//! it merges the terminators with [`super::merge::merge_terminators`].

use std::cmp::Ordering;

use super::merge::{
    aggregate_row, check_aggregate_count, check_columns, sort_key, Agg, Columns, MergeError,
    MergeSpec, Protocol, SortKey,
};
use super::value::{self, Value};
use crate::collation::Collation;
use crate::protocol::column::ColumnDef;
use crate::protocol::reply as rp;
use crate::protocol::wire::Cursor;

/// What the merge needs or gives next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pull {
    /// Shard `n`'s next row ([`Merger::push`]) or the news that it has no
    /// more ([`Merger::end`]).
    Need(usize),
    /// The client's next row.
    Row(Vec<u8>),
    /// No more rows for the client (shards may still have rows the merge
    /// does not need: LIMIT reached).
    Done,
}

/// A shard's next row in an ordered merge, with where its key cells are.
#[derive(Debug)]
struct Pending {
    row: Vec<u8>,
    /// Per ORDER BY key: the key cell's bytes in `row` (`None`: NULL).
    cells: Vec<Option<(usize, usize)>>,
}

#[derive(Debug)]
enum Mode {
    /// Shard after shard.
    Concat,
    /// The k-way merge by these keys.
    Ordered(Vec<SortKey>),
    /// Aggregates without GROUP BY: each shard's rows (one expected).
    Aggregate(Vec<Agg>, Vec<Vec<Vec<u8>>>),
}

impl std::fmt::Debug for SortKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortKey")
            .field("column", &self.column)
            .field("desc", &self.desc)
            .field("label", &self.label)
            .finish()
    }
}

/// A streaming merge of one scattered SELECT (see the module doc).
#[derive(Debug)]
pub struct Merger {
    /// Shard 0's column count, definitions and (without
    /// `CLIENT_DEPRECATE_EOF`) EOF: what the client is sent first.
    head: Vec<Vec<u8>>,
    head_bytes: usize,
    types: Vec<u8>,
    protocol: Protocol,
    collations: Vec<Option<&'static Collation>>,
    mode: Mode,
    /// Per shard: its next row (ordered merge).
    pending: Vec<Option<Pending>>,
    /// Per shard: it has no more rows.
    ended: Vec<bool>,
    /// Per shard: rows received so far.
    received: Vec<usize>,
    /// The shard a concatenation reads now.
    current: usize,
    /// Rows still to skip (OFFSET), rows still to give (LIMIT).
    skip: u64,
    left: u64,
    /// Bytes of the rows held now.
    held_rows: usize,
    aggregated: bool,
}

/// The decoded column definitions of a column head (count, definitions[, EOF]).
fn decode_defs(head: &[Vec<u8>], shard: usize) -> Result<Vec<ColumnDef<'_>>, MergeError> {
    let malformed = |what| MergeError::Malformed { shard, what };
    let first = head.first().ok_or(malformed("empty reply"))?;
    match first.first() {
        None => return Err(malformed("empty packet")),
        Some(&rp::ERR) => {
            return Err(MergeError::NotAResultSet {
                shard,
                what: "an ERR packet",
            })
        }
        Some(&rp::OK) => {
            return Err(MergeError::NotAResultSet {
                shard,
                what: "an OK packet, no result set",
            })
        }
        Some(_) => {}
    }
    let count = Cursor::new(first).lenenc().map_err(|e| malformed(e.0))?;
    if count == 0 {
        return Err(malformed("result set with no columns"));
    }
    usize::try_from(count)
        .ok()
        .and_then(|n| head.get(1..n.checked_add(1)?))
        .ok_or(malformed("reply ends inside its column definitions"))?
        .iter()
        .map(|p| ColumnDef::decode(p).map_err(|e| malformed(e.0)))
        .collect()
}

impl Merger {
    /// A merge of the shards whose column heads are `heads` (shard i's
    /// column count, definitions and, unless `CLIENT_DEPRECATE_EOF`, the EOF
    /// after them), by `spec`, of rows encoded as `protocol` says.
    /// Errors: as [`super::merge::merge`]'s for the same heads.
    pub fn new(
        heads: Vec<Vec<Vec<u8>>>,
        spec: &MergeSpec,
        protocol: Protocol,
    ) -> Result<Merger, MergeError> {
        let shards = heads.len();
        let mut heads = heads.into_iter();
        let head = heads.next().ok_or(MergeError::NoReplies)?;
        let rest: Vec<Vec<Vec<u8>>> = heads.collect();
        let (types, mode) = {
            let first = decode_defs(&head, 0)?;
            let others = rest
                .iter()
                .enumerate()
                .map(|(i, h)| decode_defs(h, i + 1))
                .collect::<Result<Vec<_>, _>>()?;
            let mut all: Vec<&[ColumnDef<'_>]> = vec![&first];
            all.extend(others.iter().map(|d| &d[..]));
            check_columns(&all)?;
            let columns = Columns {
                defs: &first,
                types: first.iter().map(|c| c.column_type).collect(),
                protocol,
                collations: &spec.collations,
            };
            let mode = match &spec.aggregates {
                Some(aggs) => {
                    check_aggregate_count(aggs, &columns)?;
                    Mode::Aggregate(aggs.clone(), vec![Vec::new(); shards])
                }
                None if spec.order_by.is_empty() => Mode::Concat,
                None => Mode::Ordered(
                    spec.order_by
                        .iter()
                        .map(|k| sort_key(k, &columns))
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            };
            (columns.types, mode)
        };
        let head_bytes = head.iter().map(Vec::len).sum();
        Ok(Merger {
            head,
            head_bytes,
            types,
            protocol,
            collations: spec.collations.clone(),
            mode,
            pending: (0..shards).map(|_| None).collect(),
            ended: vec![false; shards],
            received: vec![0; shards],
            current: 0,
            skip: spec.offset,
            left: spec.limit.unwrap_or(u64::MAX),
            held_rows: 0,
            aggregated: false,
        })
    }

    /// Shard 0's column head, sent to the client before the rows.
    pub fn head(&self) -> &[Vec<u8>] {
        &self.head
    }

    /// Bytes the merge holds now: the column head and the rows waiting.
    pub fn held(&self) -> usize {
        self.head_bytes + self.held_rows
    }

    /// Whether shard `shard` has been told to have ended.
    pub fn ended(&self, shard: usize) -> bool {
        self.ended.get(shard).copied().unwrap_or(true)
    }

    /// Shard `shard`'s next row (after a [`Pull::Need`] for it).
    pub fn push(&mut self, shard: usize, row: Vec<u8>) -> Result<(), MergeError> {
        let index = self.received.get(shard).copied().unwrap_or(0);
        if let Some(r) = self.received.get_mut(shard) {
            *r += 1;
        }
        match &mut self.mode {
            Mode::Concat => {
                self.held_rows += row.len();
                if let Some(p) = self.pending.get_mut(shard) {
                    *p = Some(Pending {
                        row,
                        cells: Vec::new(),
                    });
                }
            }
            Mode::Aggregate(_, rows) => {
                let Some(rows) = rows.get_mut(shard) else {
                    return Ok(());
                };
                if !rows.is_empty() {
                    // `merge` reports the whole count; one more is enough here.
                    return Err(MergeError::AggregateRows {
                        shard,
                        rows: rows.len() + 1,
                    });
                }
                self.held_rows += row.len();
                rows.push(row);
            }
            Mode::Ordered(keys) => {
                let cells = {
                    let split = match self.protocol {
                        Protocol::Text => crate::protocol::row::text_cells(&row, self.types.len()),
                        Protocol::Binary => crate::protocol::row::binary_cells(&row, &self.types),
                    }
                    .map_err(|e| MergeError::BadRow {
                        shard,
                        row: index,
                        what: e.0,
                    })?;
                    let base = row.as_ptr() as usize;
                    keys.iter()
                        .map(|k| {
                            let cell = split.get(k.column).copied().flatten();
                            if let Some(b) = cell {
                                k.kind.decode(b, self.protocol).map_err(|what| {
                                    MergeError::BadValue {
                                        shard,
                                        row: index,
                                        column: k.label.clone(),
                                        what,
                                    }
                                })?;
                            }
                            Ok(cell.map(|b| {
                                let start = b.as_ptr() as usize - base;
                                (start, start + b.len())
                            }))
                        })
                        .collect::<Result<Vec<_>, MergeError>>()?
                };
                self.held_rows += row.len();
                if let Some(p) = self.pending.get_mut(shard) {
                    *p = Some(Pending { row, cells });
                }
            }
        }
        Ok(())
    }

    /// Shard `shard` has no more rows.
    pub fn end(&mut self, shard: usize) {
        if let Some(e) = self.ended.get_mut(shard) {
            *e = true;
        }
    }

    /// What comes next: a shard's row to read, a row for the client, or the end.
    pub fn pull(&mut self) -> Result<Pull, MergeError> {
        loop {
            if self.left == 0 {
                return Ok(Pull::Done);
            }
            let row = match &self.mode {
                Mode::Aggregate(..) => return self.pull_aggregate(),
                Mode::Concat => {
                    if let Some(p) = self.pending.get_mut(self.current).and_then(Option::take) {
                        p.row
                    } else if self.current >= self.ended.len() {
                        return Ok(Pull::Done);
                    } else if self.ended(self.current) {
                        self.current += 1;
                        continue;
                    } else {
                        return Ok(Pull::Need(self.current));
                    }
                }
                Mode::Ordered(keys) => {
                    for (shard, p) in self.pending.iter().enumerate() {
                        if p.is_none() && !self.ended(shard) {
                            return Ok(Pull::Need(shard));
                        }
                    }
                    let Some(shard) = least(&self.pending, keys, self.protocol) else {
                        return Ok(Pull::Done);
                    };
                    match self.pending.get_mut(shard).and_then(Option::take) {
                        Some(p) => p.row,
                        None => return Ok(Pull::Done),
                    }
                }
            };
            self.held_rows = self.held_rows.saturating_sub(row.len());
            if self.skip > 0 {
                self.skip -= 1;
                continue;
            }
            self.left -= 1;
            return Ok(Pull::Row(row));
        }
    }

    fn pull_aggregate(&mut self) -> Result<Pull, MergeError> {
        // An OFFSET leaves no row (as `merge`: the shards' rows are not read).
        if self.aggregated || self.skip > 0 {
            return Ok(Pull::Done);
        }
        if let Some(shard) = self.ended.iter().position(|e| !e) {
            return Ok(Pull::Need(shard));
        }
        self.aggregated = true;
        let Mode::Aggregate(aggs, rows) = &self.mode else {
            return Ok(Pull::Done);
        };
        let defs = decode_defs(&self.head, 0)?;
        let columns = Columns {
            defs: &defs,
            types: self.types.clone(),
            protocol: self.protocol,
            collations: &self.collations,
        };
        let rows: Vec<&[Vec<u8>]> = rows.iter().map(|r| &r[..]).collect();
        let row = aggregate_row(&rows, aggs, &columns)?;
        self.left -= 1;
        Ok(Pull::Row(row))
    }
}

/// The shard whose pending row comes first (ties: the lower shard), among
/// those with one. Keys are decoded as compared, without allocating.
fn least(pending: &[Option<Pending>], keys: &[SortKey], protocol: Protocol) -> Option<usize> {
    let mut best: Option<(usize, &Pending)> = None;
    for (shard, p) in pending.iter().enumerate() {
        let Some(p) = p else { continue };
        let better = match best {
            None => true,
            // Strictly before: on a tie the lower shard (seen first) stays.
            Some((_, b)) => compare(p, b, keys, protocol) == Ordering::Less,
        };
        if better {
            best = Some((shard, p));
        }
    }
    best.map(|(s, _)| s)
}

fn key_value<'p>(p: &'p Pending, i: usize, k: &SortKey, protocol: Protocol) -> Option<Value<'p>> {
    p.cells
        .get(i)
        .copied()
        .flatten()
        .and_then(|(s, e)| p.row.get(s..e))
        .and_then(|b| k.kind.decode(b, protocol).ok())
}

fn compare(a: &Pending, b: &Pending, keys: &[SortKey], protocol: Protocol) -> Ordering {
    for (i, k) in keys.iter().enumerate() {
        let o = value::compare_nullable(
            key_value(a, i, k, protocol).as_ref(),
            key_value(b, i, k, protocol).as_ref(),
        );
        let o = if k.desc { o.reverse() } else { o };
        if o.is_ne() {
            return o;
        }
    }
    Ordering::Equal
}

/// [`super::merge::merge`]'s contract (whole replies in, the client's
/// packets out) run through a [`Merger`], reading each reply's rows only
/// as the merge asks for them: what the session does with sockets, on
/// buffers. For tests and benchmarks (the two merges must agree).
pub fn merge_replies(
    replies: &[Vec<Vec<u8>>],
    spec: &MergeSpec,
    protocol: Protocol,
    deprecate_eof: bool,
) -> Result<Vec<Vec<u8>>, MergeError> {
    let shards = super::merge::split_all(replies, deprecate_eof)?;
    let heads = shards.iter().map(|s| s.head.to_vec()).collect();
    let mut m = Merger::new(heads, spec, protocol)?;
    let mut next = vec![0usize; shards.len()];
    let mut out = m.head().to_vec();
    loop {
        match m.pull()? {
            Pull::Row(r) => out.push(r),
            Pull::Done => break,
            Pull::Need(i) => {
                let (Some(s), Some(n)) = (shards.get(i), next.get_mut(i)) else {
                    m.end(i);
                    continue;
                };
                match s.rows.get(*n) {
                    Some(r) => {
                        *n += 1;
                        m.push(i, r.clone())?;
                    }
                    None => m.end(i),
                }
            }
        }
    }
    let terminators: Vec<&[u8]> = shards.iter().map(|s| s.terminator).collect();
    out.push(super::merge::merge_terminators(
        &terminators,
        deprecate_eof,
    )?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::row::put_text_row;
    use crate::protocol::wire::put_lenenc;

    /// A column head `(id BIGINT)` and rows `ids` (text protocol).
    fn reply(ids: &[u64]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let mut count = Vec::new();
        put_lenenc(&mut count, 1);
        let mut def = Vec::new();
        ColumnDef {
            name: b"id",
            org_name: b"id",
            charset: 63,
            length: 20,
            column_type: 0x08,
            flags: 0,
            decimals: 0,
        }
        .encode(&mut def);
        let head = vec![count, def, rp::eof_packet(0, 2)];
        let rows = ids
            .iter()
            .map(|id| {
                let mut r = Vec::new();
                put_text_row(&mut r, &[Some(id.to_string().as_bytes())]);
                r
            })
            .collect();
        (head, rows)
    }

    #[test]
    fn an_ordered_merge_holds_one_row_per_shard_and_reads_only_what_it_needs() {
        let shards: Vec<Vec<u64>> = (0..3u64)
            .map(|s| (0..1000u64).map(|i| i * 3 + s).collect())
            .collect();
        let parts: Vec<_> = shards.iter().map(|ids| reply(ids)).collect();
        let spec = MergeSpec {
            order_by: vec![super::super::merge::OrderKey {
                column: super::super::merge::ColumnRef::Position(0),
                desc: false,
            }],
            limit: Some(10),
            offset: 5,
            ..MergeSpec::default()
        };
        let mut m = Merger::new(
            parts.iter().map(|(h, _)| h.clone()).collect(),
            &spec,
            Protocol::Text,
        )
        .unwrap();
        let head = m.held();
        let widest = parts
            .iter()
            .flat_map(|(_, r)| r.iter().map(Vec::len))
            .max()
            .unwrap();
        let mut next = [0usize; 3];
        let mut out = Vec::new();
        loop {
            assert!(m.held() <= head + 3 * widest, "held {}", m.held());
            match m.pull().unwrap() {
                Pull::Need(i) => match parts[i].1.get(next[i]) {
                    Some(r) => {
                        next[i] += 1;
                        m.push(i, r.clone()).unwrap();
                    }
                    None => m.end(i),
                },
                Pull::Row(r) => out.push(r),
                Pull::Done => break,
            }
        }
        let want: Vec<Vec<u8>> = (5..15u64).map(|id| reply(&[id]).1[0].clone()).collect();
        assert_eq!(out, want);
        // 15 rows out of the merge: each shard was read about a third of
        // that, plus its one pending row; nothing more.
        assert!(
            next.iter().all(|&n| n <= 6),
            "rows read per shard: {next:?}"
        );
    }
}
