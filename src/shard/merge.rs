//! Merging result sets from several shards into the one the client sees.
//!
//! [`MergeSpec`] and its parts are the contract between the SQL analysis
//! (`sql::route`, which finds what a scattered SELECT needs) and the merge.
//! [`merge`] takes every shard's buffered reply and returns the one result
//! set the same SELECT would give on one unsharded copy of the data:
//!
//! - Columns: shard 0's column count, definitions and EOF, sent as they are.
//!   Every shard must have the same number of columns, and each column the
//!   same type code and UNSIGNED flag (a binary row is read by the client
//!   with shard 0's types, and values are compared by them).
//! - No ORDER BY: the shards' rows one shard after the other, unchanged.
//! - ORDER BY: each shard sorted its own rows; a k-way merge of the sorted
//!   streams (a heap of one head row per shard) yields them in order. Keys
//!   compare as `value.rs` says; NULL sorts first in ASC and last in
//!   DESC as in MariaDB; rows with equal keys keep shard order, then each
//!   shard's own order. Rows are relayed byte for byte; only their key
//!   columns are decoded, and only for rows the merge reaches.
//! - LIMIT/OFFSET: `offset` merged rows are skipped and at most `limit`
//!   returned, after the merge (or after the concatenation without ORDER BY).
//! - Aggregates without GROUP BY: every shard's one row combined into one
//!   (`aggregate.rs`), encoded like the input rows. ORDER BY does not
//!   matter for one row and is not looked at; LIMIT 0 or an OFFSET leaves no
//!   row, and then shards may have returned none.
//! - Terminator: [`merge_terminators`].
//!
//! A reply that is an ERR packet, has several result sets or opened a cursor
//! is not a merge's input: the caller relays errors itself. Such replies and
//! malformed bytes are [`MergeError`]s, never panics.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

pub use super::aggregate::Agg;
use super::aggregate::{self, CombineError};
use super::reply::{self, ShardReply, SplitError};
pub use super::value::Protocol;
use super::value::{self, Kind, Value};
use crate::collation::Collation;
use crate::protocol::codes::{self, ErrorCode};
use crate::protocol::column::ColumnDef;
use crate::protocol::consts::status;
use crate::protocol::reply::{self as rp, Terminator};
use crate::protocol::row::{self, Cell};
use crate::protocol::Malformed;

/// A select-list column, as ORDER BY names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnRef {
    /// 0-based position in the result set's columns (`ORDER BY 2` is `Position(1)`).
    Position(usize),
    /// A column name or alias, matched (case-insensitively) against the
    /// result set's column names (the alias, then the original name).
    Name(String),
}

/// One ORDER BY key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderKey {
    /// Which result column.
    pub column: ColumnRef,
    /// `DESC`.
    pub desc: bool,
}

/// What a scattered SELECT needs from the merge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MergeSpec {
    /// ORDER BY keys, outermost first (empty: rows in shard order).
    pub order_by: Vec<OrderKey>,
    /// LIMIT, applied after the merge.
    pub limit: Option<u64>,
    /// OFFSET, applied after the merge (shards are sent `LIMIT offset+limit`
    /// with no offset).
    pub offset: u64,
    /// `Some`: aggregates without GROUP BY, one entry per select-list column;
    /// every shard returns one row and the client gets one row.
    pub aggregates: Option<Vec<Agg>>,
    /// With `aggregates`: the column a `MIN`/`MAX` reads, per select-list
    /// column (`None`: not an aggregate of a plain column), to learn its
    /// collation.
    pub agg_columns: Vec<Option<String>>,
    /// The collation each select-list item names with `COLLATE` (by
    /// position; empty when none does): it orders that column.
    pub item_collations: Vec<Option<String>>,
    /// The table the statement reads (schema as written, table), to learn
    /// the collations of `agg_columns` (set by the router).
    pub table: Option<(Option<String>, String)>,
    /// The collation each result column is ordered by, when it is a string
    /// column whose collation the caller knows (index: result column).
    /// String keys of unknown collation are refused (`binary` and `_bin`
    /// columns excepted).
    pub collations: Vec<Option<&'static Collation>>,
}

impl MergeSpec {
    /// Rows can be relayed shard after shard as they come: no ordering,
    /// limit or aggregate to apply.
    pub fn is_concat(&self) -> bool {
        self.order_by.is_empty()
            && self.limit.is_none()
            && self.offset == 0
            && self.aggregates.is_none()
    }
}

/// Whether column `def` holds strings whose order depends on a collation
/// (the caller puts it in [`MergeSpec::collations`]).
pub fn needs_collation(def: &ColumnDef<'_>) -> bool {
    matches!(
        Kind::of(def, None),
        Kind::Unknown | Kind::Bytes { pad_space: true }
    )
}

/// Why shards' replies could not be merged. Shards are numbered from 0 in
/// the order of the replies given; rows from 0 within their shard's reply;
/// columns from 0, with their name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error("no shard replies to merge")]
    NoReplies,
    /// A reply that is not one result set (an ERR or OK packet, several
    /// result sets, an open cursor).
    #[error("shard {shard}: expected one result set, got {what}")]
    NotAResultSet { shard: usize, what: &'static str },
    /// Bytes outside the rows that do not follow the protocol.
    #[error("shard {shard}: malformed reply: {what}")]
    Malformed { shard: usize, what: &'static str },
    /// A row that does not match its columns.
    #[error("shard {shard}: row {row} is malformed: {what}")]
    BadRow {
        shard: usize,
        row: usize,
        what: &'static str,
    },
    /// A value that does not read as its column's type.
    #[error("shard {shard}: row {row}, column {column}: {what}")]
    BadValue {
        shard: usize,
        row: usize,
        column: String,
        what: &'static str,
    },
    #[error("shard {shard} returned {found} columns, shard 0 returned {expected}")]
    ColumnCount {
        shard: usize,
        expected: usize,
        found: usize,
    },
    #[error("shard {shard}: column {column} has type {found}, on shard 0 it has type {expected}")]
    ColumnType {
        shard: usize,
        column: String,
        expected: String,
        found: String,
    },
    #[error("ORDER BY `{name}`: no column of the result set has that name")]
    UnknownColumn { name: String },
    /// `position` as SQL writes it: from 1.
    #[error("ORDER BY {position}: the result set has only {columns} columns")]
    PositionOutOfRange { position: usize, columns: usize },
    #[error("ORDER BY column {column}: {what}")]
    Unorderable { column: String, what: &'static str },
    #[error("{aggregates} aggregates given for a result set of {columns} columns")]
    AggregateCount { aggregates: usize, columns: usize },
    #[error("aggregates without GROUP BY: shard {shard} returned {rows} rows instead of one")]
    AggregateRows { shard: usize, rows: usize },
    #[error("column {column}: the sum over the shards does not fit the column's type")]
    SumOverflow { column: String },
    #[error("column {column}: {what}")]
    Aggregate { column: String, what: &'static str },
}

impl MergeError {
    /// The MySQL error the client is sent.
    pub fn code(&self) -> ErrorCode {
        match self {
            MergeError::UnknownColumn { .. } | MergeError::PositionOutOfRange { .. } => {
                codes::ER_BAD_FIELD_ERROR
            }
            MergeError::Unorderable { .. } | MergeError::Aggregate { .. } => {
                codes::ER_NOT_SUPPORTED_YET
            }
            MergeError::SumOverflow { .. } => codes::ER_DATA_OUT_OF_RANGE,
            MergeError::NoReplies
            | MergeError::NotAResultSet { .. }
            | MergeError::Malformed { .. }
            | MergeError::BadRow { .. }
            | MergeError::BadValue { .. }
            | MergeError::ColumnCount { .. }
            | MergeError::ColumnType { .. }
            | MergeError::AggregateCount { .. }
            | MergeError::AggregateRows { .. } => codes::ER_UNKNOWN_ERROR,
        }
    }
}

/// Every shard's reply cut into column head, rows and terminator; an error
/// names the shard whose reply is not a result set.
pub(super) fn split_all(
    replies: &[Vec<Vec<u8>>],
    deprecate_eof: bool,
) -> Result<Vec<ShardReply<'_>>, MergeError> {
    replies
        .iter()
        .enumerate()
        .map(|(shard, r)| {
            reply::split(r, deprecate_eof).map_err(|e| match e {
                SplitError::NotAResultSet(what) => MergeError::NotAResultSet { shard, what },
                SplitError::Malformed(what) => MergeError::Malformed { shard, what },
            })
        })
        .collect()
}

/// Merges the shards' replies to one SELECT into the reply the client gets.
///
/// `replies[i]` is shard i's complete reply to a statement that returned one
/// result set, as `BackendConn::run(.., Expect::Results)` returns it: column
/// count, column definitions, an EOF packet unless `deprecate_eof`, rows, and
/// the terminator (EOF, or with `deprecate_eof` an OK packet with header
/// `0xfe`); payloads without headers. `protocol` says how rows are encoded.
///
/// Returns the packets to send to the client in order (the caller numbers
/// them): shard 0's column head, the merged rows, the merged terminator.
/// See the module documentation for the semantics and [`MergeError`] for
/// the errors.
pub fn merge(
    replies: &[Vec<Vec<u8>>],
    spec: &MergeSpec,
    protocol: Protocol,
    deprecate_eof: bool,
) -> Result<Vec<Vec<u8>>, MergeError> {
    let shards = split_all(replies, deprecate_eof)?;
    let first = shards.first().ok_or(MergeError::NoReplies)?;
    check_columns(&shards.iter().map(|s| &s.columns[..]).collect::<Vec<_>>())?;
    let columns = Columns {
        defs: &first.columns,
        types: first.columns.iter().map(|c| c.column_type).collect(),
        protocol,
        collations: &spec.collations,
    };
    let offset = usize::try_from(spec.offset).unwrap_or(usize::MAX);
    let limit = spec
        .limit
        .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let rows: Vec<Cow<'_, [u8]>> = match &spec.aggregates {
        Some(aggs) if offset > 0 || limit == 0 => {
            check_aggregate_count(aggs, &columns)?;
            Vec::new()
        }
        Some(aggs) => {
            let rows: Vec<&[Vec<u8>]> = shards.iter().map(|s| s.rows).collect();
            vec![aggregate_row(&rows, aggs, &columns)?.into()]
        }
        None if spec.order_by.is_empty() => shards
            .iter()
            .flat_map(|s| s.rows)
            .skip(offset)
            .take(limit)
            .map(|r| Cow::Borrowed(&r[..]))
            .collect(),
        None => {
            let keys = spec
                .order_by
                .iter()
                .map(|k| sort_key(k, &columns))
                .collect::<Result<Vec<_>, _>>()?;
            ordered(&shards, &keys, &columns, offset, limit)?
                .into_iter()
                .map(Cow::Borrowed)
                .collect()
        }
    };
    let terminators: Vec<&[u8]> = shards.iter().map(|s| s.terminator).collect();
    let terminator = merge_terminators(&terminators, deprecate_eof)?;
    let mut out = Vec::with_capacity(first.head.len() + rows.len() + 1);
    out.extend(first.head.iter().cloned());
    out.extend(rows.into_iter().map(Cow::into_owned));
    out.push(terminator);
    Ok(out)
}

/// The terminator of a result set made of several shards' result sets, from
/// their terminators in shard order; usable when rows are streamed
/// shard after shard ([`MergeSpec::is_concat`]).
///
/// Shard 0's packet with: the warning counts of all shards summed
/// (saturating at `u16::MAX`); the last shard's status flags (its
/// transaction state is the latest seen), except that
/// `SERVER_MORE_RESULTS_EXISTS` is cleared (the merged reply has one result
/// set) and `SERVER_SESSION_STATE_CHANGED` is shard 0's (it says whether the
/// session state changes that shard 0's OK packet carries are there).
/// Errors: [`MergeError::NoReplies`] for none, [`MergeError::Malformed`]
/// for a packet that is not a terminator.
pub fn merge_terminators<T: AsRef<[u8]>>(
    terminators: &[T],
    deprecate_eof: bool,
) -> Result<Vec<u8>, MergeError> {
    let malformed = |shard| move |e: Malformed| MergeError::Malformed { shard, what: e.0 };
    let parsed = terminators
        .iter()
        .enumerate()
        .map(|(shard, t)| rp::parse_terminator(t.as_ref(), deprecate_eof).map_err(malformed(shard)))
        .collect::<Result<Vec<_>, _>>()?;
    let (Some(first), Some(last), Some(base)) =
        (parsed.first(), parsed.last(), terminators.first())
    else {
        return Err(MergeError::NoReplies);
    };
    let warnings = parsed
        .iter()
        .fold(0u16, |sum, t| sum.saturating_add(t.warnings));
    let status = (last.status & !(status::MORE_RESULTS_EXISTS | status::SESSION_STATE_CHANGED))
        | (first.status & status::SESSION_STATE_CHANGED);
    rp::terminator_with(
        base.as_ref(),
        deprecate_eof,
        Terminator { status, warnings },
    )
    .map_err(malformed(0))
}

/// The result set's columns as the merge reads rows by them: shard 0's.
pub(super) struct Columns<'c, 'a> {
    pub(super) defs: &'c [ColumnDef<'a>],
    /// Type codes, for splitting binary rows.
    pub(super) types: Vec<u8>,
    pub(super) protocol: Protocol,
    /// The collations the caller knows, per column.
    pub(super) collations: &'c [Option<&'static Collation>],
}

impl Columns<'_, '_> {
    /// How column `i`'s values compare.
    fn kind(&self, i: usize) -> Kind {
        match self.defs.get(i) {
            Some(def) => Kind::of(def, self.collations.get(i).copied().flatten()),
            None => Kind::Unknown,
        }
    }

    fn label(&self, i: usize) -> String {
        label(i, self.defs.get(i).map_or(&b""[..], |d| d.name))
    }

    pub(super) fn split<'r>(
        &self,
        shard: usize,
        row: usize,
        bytes: &'r [u8],
    ) -> Result<Vec<Cell<'r>>, MergeError> {
        match self.protocol {
            Protocol::Text => row::text_cells(bytes, self.types.len()),
            Protocol::Binary => row::binary_cells(bytes, &self.types),
        }
        .map_err(|e| MergeError::BadRow {
            shard,
            row,
            what: e.0,
        })
    }
}

/// `2 (`price`)`: column 2, named price, for messages.
fn label(i: usize, name: &[u8]) -> String {
    format!("{i} (`{}`)", String::from_utf8_lossy(name))
}

/// Every shard has shard 0's number of columns and column types (`shards`:
/// each shard's column definitions).
pub(super) fn check_columns(shards: &[&[ColumnDef<'_>]]) -> Result<(), MergeError> {
    let Some((first, rest)) = shards.split_first() else {
        return Ok(());
    };
    let describe = |d: &ColumnDef<'_>| {
        let unsigned = if d.is_unsigned() { " unsigned" } else { "" };
        format!("{:#04x}{unsigned}", d.column_type)
    };
    for (i, s) in rest.iter().enumerate() {
        let shard = i + 1;
        if s.len() != first.len() {
            return Err(MergeError::ColumnCount {
                shard,
                expected: first.len(),
                found: s.len(),
            });
        }
        for (c, (a, b)) in first.iter().zip(s.iter()).enumerate() {
            if a.column_type != b.column_type || a.is_unsigned() != b.is_unsigned() {
                return Err(MergeError::ColumnType {
                    shard,
                    column: label(c, a.name),
                    expected: describe(a),
                    found: describe(b),
                });
            }
        }
    }
    Ok(())
}

/// One resolved ORDER BY key.
pub(super) struct SortKey {
    pub(super) column: usize,
    pub(super) kind: Kind,
    pub(super) desc: bool,
    /// The column, for messages.
    pub(super) label: String,
}

/// Finds the key's column: a name matches a column's name, else its
/// original name (ASCII case-insensitively, first match); a position is
/// 0-based.
pub(super) fn sort_key(key: &OrderKey, columns: &Columns<'_, '_>) -> Result<SortKey, MergeError> {
    let defs = columns.defs;
    let column = match &key.column {
        ColumnRef::Position(p) if *p < defs.len() => *p,
        ColumnRef::Position(p) => {
            return Err(MergeError::PositionOutOfRange {
                position: p.saturating_add(1),
                columns: defs.len(),
            })
        }
        ColumnRef::Name(name) => {
            let n = name.as_bytes();
            defs.iter()
                .position(|d| d.name.eq_ignore_ascii_case(n))
                .or_else(|| defs.iter().position(|d| d.org_name.eq_ignore_ascii_case(n)))
                .ok_or_else(|| MergeError::UnknownColumn { name: name.clone() })?
        }
    };
    let def = defs.get(column).ok_or(MergeError::PositionOutOfRange {
        position: column.saturating_add(1),
        columns: defs.len(),
    })?;
    let label = columns.label(column);
    let kind = columns.kind(column);
    if let Some(what) = value::unorderable(def, kind) {
        return Err(MergeError::Unorderable {
            column: label,
            what,
        });
    }
    Ok(SortKey {
        column,
        kind,
        desc: key.desc,
        label,
    })
}

/// A shard's next row in the k-way merge, with its decoded keys.
struct Head<'a, 'k> {
    key: Vec<Option<Value<'a>>>,
    shard: usize,
    keys: &'k [SortKey],
}

impl Head<'_, '_> {
    /// Whether this row comes before `other` in the merged order.
    fn order(&self, other: &Self) -> Ordering {
        self.key
            .iter()
            .zip(&other.key)
            .zip(self.keys)
            .map(|((a, b), k)| {
                let o = value::compare_nullable(a.as_ref(), b.as_ref());
                if k.desc {
                    o.reverse()
                } else {
                    o
                }
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
            .then(self.shard.cmp(&other.shard))
    }
}

/// `BinaryHeap` pops the greatest: the greatest head is the one that comes first.
impl Ord for Head<'_, '_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.order(other).reverse()
    }
}

impl PartialOrd for Head<'_, '_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Head<'_, '_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Head<'_, '_> {}

/// The k-way merge of the shards' sorted rows: rows `offset..offset+limit`
/// of the merged order.
fn ordered<'a>(
    shards: &[ShardReply<'a>],
    keys: &[SortKey],
    columns: &Columns<'_, '_>,
    offset: usize,
    limit: usize,
) -> Result<Vec<&'a [u8]>, MergeError> {
    let head = |shard: usize, index: usize| -> Result<Option<Head<'a, '_>>, MergeError> {
        let Some(bytes) = shards.get(shard).and_then(|s| s.rows.get(index)) else {
            return Ok(None);
        };
        let cells = columns.split(shard, index, bytes)?;
        let key = keys
            .iter()
            .map(|k| {
                cells
                    .get(k.column)
                    .copied()
                    .flatten()
                    .map(|b| k.kind.decode(b, columns.protocol))
                    .transpose()
                    .map_err(|what| MergeError::BadValue {
                        shard,
                        row: index,
                        column: k.label.clone(),
                        what,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(Head { key, shard, keys }))
    };
    let total: usize = shards.iter().map(|s| s.rows.len()).sum();
    let wanted = limit.min(total.saturating_sub(offset));
    if wanted == 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(wanted);
    let mut next = vec![0usize; shards.len()];
    let mut heap = BinaryHeap::with_capacity(shards.len());
    for shard in 0..shards.len() {
        heap.extend(head(shard, 0)?);
    }
    let mut skipped = 0;
    while out.len() < limit {
        let Some(Head { shard, .. }) = heap.pop() else {
            break;
        };
        let (Some(s), Some(index)) = (shards.get(shard), next.get_mut(shard)) else {
            break;
        };
        if let Some(row) = s.rows.get(*index) {
            if skipped < offset {
                skipped += 1;
            } else {
                out.push(&row[..]);
            }
        }
        *index += 1;
        let index = *index;
        heap.extend(head(shard, index)?);
    }
    Ok(out)
}

pub(super) fn check_aggregate_count(
    aggs: &[Agg],
    columns: &Columns<'_, '_>,
) -> Result<(), MergeError> {
    if aggs.len() == columns.defs.len() {
        Ok(())
    } else {
        Err(MergeError::AggregateCount {
            aggregates: aggs.len(),
            columns: columns.defs.len(),
        })
    }
}

/// The one row of an aggregate query without GROUP BY, from every shard's
/// one row (`shards`: each shard's rows).
pub(super) fn aggregate_row(
    shards: &[&[Vec<u8>]],
    aggs: &[Agg],
    columns: &Columns<'_, '_>,
) -> Result<Vec<u8>, MergeError> {
    check_aggregate_count(aggs, columns)?;
    let rows = shards
        .iter()
        .enumerate()
        .map(|(shard, s)| match s {
            [row] => columns.split(shard, 0, row),
            rows => Err(MergeError::AggregateRows {
                shard,
                rows: rows.len(),
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut out_cells: Vec<Option<Cow<'_, [u8]>>> = Vec::with_capacity(aggs.len());
    for (column, (&agg, def)) in aggs.iter().zip(columns.defs).enumerate() {
        let kind = columns.kind(column);
        if let (Agg::Min | Agg::Max, Some(what)) = (agg, value::unorderable(def, kind)) {
            return Err(MergeError::Unorderable {
                column: columns.label(column),
                what,
            });
        }
        let cells = rows.iter().map(|r| r.get(column).copied().flatten());
        if agg == Agg::First {
            out_cells.push(cells.clone().next().flatten().map(Cow::Borrowed));
            continue;
        }
        let inputs = cells
            .enumerate()
            .map(|(shard, cell)| {
                cell.map(|b| {
                    kind.decode(b, columns.protocol)
                        .map(|v| (v, b))
                        .map_err(|what| MergeError::BadValue {
                            shard,
                            row: 0,
                            column: columns.label(column),
                            what,
                        })
                })
                .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let combined = aggregate::combine(agg, kind, def.column_type, columns.protocol, &inputs)
            .map_err(|e| match e {
                CombineError::Overflow => MergeError::SumOverflow {
                    column: columns.label(column),
                },
                CombineError::Unsupported(what) => MergeError::Aggregate {
                    column: columns.label(column),
                    what,
                },
            })?;
        out_cells.push(combined);
    }
    let cells: Vec<Cell<'_>> = out_cells.iter().map(|c| c.as_deref()).collect();
    let mut out = Vec::new();
    match columns.protocol {
        Protocol::Text => row::put_text_row(&mut out, &cells),
        Protocol::Binary => row::put_binary_row(&mut out, &columns.types, &cells),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::column::{flags, BINARY_CHARSET};
    use crate::protocol::reply::{eof_packet, ok_packet, OkPacket, EOF};
    use crate::protocol::stmt::types;
    use crate::protocol::wire::put_lenenc;
    use proptest::prelude::*;

    const ALL: [(Protocol, bool); 4] = [
        (Protocol::Text, false),
        (Protocol::Text, true),
        (Protocol::Binary, false),
        (Protocol::Binary, true),
    ];

    #[derive(Debug, Clone, Copy)]
    struct Col {
        name: &'static str,
        org_name: &'static str,
        ty: u8,
        flags: u16,
        charset: u16,
    }

    fn col(name: &'static str, ty: u8) -> Col {
        let charset = match ty {
            0xf5..=0xfe | 0x0f => 45,
            _ => BINARY_CHARSET,
        };
        Col {
            name,
            org_name: name,
            ty,
            flags: 0,
            charset,
        }
    }

    fn unsigned(mut c: Col) -> Col {
        c.flags |= flags::UNSIGNED;
        c
    }

    type Row<'s> = Vec<Option<&'s str>>;

    /// One shard's reply: rows given as text, encoded for `p`.
    struct Shard<'s> {
        cols: Vec<Col>,
        rows: Vec<Row<'s>>,
        warnings: u16,
        status: u16,
    }

    fn shard<'s>(cols: &[Col], rows: Vec<Row<'s>>) -> Shard<'s> {
        Shard {
            cols: cols.to_vec(),
            rows,
            warnings: 0,
            status: status::AUTOCOMMIT,
        }
    }

    fn terminator(warnings: u16, st: u16, deprecate_eof: bool) -> Vec<u8> {
        if deprecate_eof {
            let mut ok = ok_packet(
                &OkPacket {
                    affected_rows: 0,
                    last_insert_id: 0,
                    status: st,
                    warnings,
                },
                b"",
            );
            ok[0] = EOF;
            ok
        } else {
            eof_packet(warnings, st)
        }
    }

    /// A text value in the binary protocol form of `ty`.
    fn binary_value(ty: u8, s: &str) -> Vec<u8> {
        let int = |w: usize| s.parse::<i128>().unwrap().to_le_bytes()[..w].to_vec();
        let nums = |s: &str| -> Vec<u32> {
            s.split(|c: char| !c.is_ascii_digit())
                .map(|n| n.parse().unwrap())
                .collect()
        };
        match ty {
            types::TINY => int(1),
            types::SHORT | types::YEAR => int(2),
            types::LONG | types::INT24 => int(4),
            types::LONGLONG => int(8),
            types::FLOAT => s.parse::<f32>().unwrap().to_le_bytes().to_vec(),
            types::DOUBLE => s.parse::<f64>().unwrap().to_le_bytes().to_vec(),
            types::DATE | types::DATETIME | types::TIMESTAMP => {
                let n = nums(s);
                let mut v = (n[0] as u16).to_le_bytes().to_vec();
                v.extend(n[1..].iter().take(5).map(|&x| x as u8));
                if let Some(&f) = n.get(6) {
                    v.extend_from_slice(&f.to_le_bytes());
                }
                v
            }
            types::TIME => {
                let n = nums(s.trim_start_matches('-'));
                let mut v = vec![u8::from(s.starts_with('-'))];
                v.extend_from_slice(&(n[0] / 24).to_le_bytes());
                v.extend([(n[0] % 24) as u8, n[1] as u8, n[2] as u8]);
                v
            }
            _ => s.as_bytes().to_vec(),
        }
    }

    fn encode_row(cols: &[Col], row: &[Option<&str>], p: Protocol) -> Vec<u8> {
        let mut out = Vec::new();
        match p {
            Protocol::Text => {
                let cells: Vec<Cell> = row.iter().map(|c| c.map(str::as_bytes)).collect();
                row::put_text_row(&mut out, &cells);
            }
            Protocol::Binary => {
                let values: Vec<Option<Vec<u8>>> = cols
                    .iter()
                    .zip(row)
                    .map(|(c, v)| v.map(|s| binary_value(c.ty, s)))
                    .collect();
                let cells: Vec<Cell> = values.iter().map(|v| v.as_deref()).collect();
                let types: Vec<u8> = cols.iter().map(|c| c.ty).collect();
                row::put_binary_row(&mut out, &types, &cells);
            }
        }
        out
    }

    fn encode(s: &Shard, p: Protocol, deprecate_eof: bool) -> Vec<Vec<u8>> {
        let mut packets = Vec::new();
        let mut count = Vec::new();
        put_lenenc(&mut count, s.cols.len() as u64);
        packets.push(count);
        for c in &s.cols {
            let mut d = Vec::new();
            ColumnDef {
                name: c.name.as_bytes(),
                org_name: c.org_name.as_bytes(),
                charset: c.charset,
                length: 20,
                column_type: c.ty,
                flags: c.flags,
                decimals: 0,
            }
            .encode(&mut d);
            packets.push(d);
        }
        if !deprecate_eof {
            packets.push(eof_packet(0, s.status));
        }
        packets.extend(s.rows.iter().map(|r| encode_row(&s.cols, r, p)));
        packets.push(terminator(s.warnings, s.status, deprecate_eof));
        packets
    }

    fn run(
        shards: &[Shard],
        spec: &MergeSpec,
        p: Protocol,
        deprecate_eof: bool,
    ) -> Result<Vec<Vec<u8>>, MergeError> {
        let replies: Vec<_> = shards.iter().map(|s| encode(s, p, deprecate_eof)).collect();
        // String columns here are utf8mb4_general_ci unless a test says.
        let mut spec = spec.clone();
        if spec.collations.is_empty() {
            spec.collations = vec![crate::collation::by_name("utf8mb4_general_ci"); 16];
        }
        let whole = merge(&replies, &spec, p, deprecate_eof);
        // The streaming merge gives the same packets (or also fails).
        let streamed = super::super::stream::merge_replies(&replies, &spec, p, deprecate_eof);
        match (&whole, &streamed) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "streamed merge differs"),
            (Err(_), Err(_)) => {}
            _ => panic!("merge gave {whole:?}, the streamed merge {streamed:?}"),
        }
        whole
    }

    /// The merged rows, checked against `expected` (as text) in every
    /// protocol and EOF mode, with shard 0's head and a terminator around them.
    fn check(shards: &[Shard], spec: &MergeSpec, expected: &[Row]) {
        for (p, deprecate_eof) in ALL {
            let out = run(shards, spec, p, deprecate_eof)
                .unwrap_or_else(|e| panic!("{p:?} deprecate_eof={deprecate_eof}: {e}"));
            let head = encode(&shards[0], p, deprecate_eof);
            let head_len = 1 + shards[0].cols.len() + usize::from(!deprecate_eof);
            assert_eq!(out[..head_len], head[..head_len], "shard 0's head");
            let rows: Vec<Vec<u8>> = expected
                .iter()
                .map(|r| encode_row(&shards[0].cols, r, p))
                .collect();
            assert_eq!(
                out[head_len..out.len() - 1],
                rows[..],
                "{p:?} deprecate_eof={deprecate_eof}"
            );
            let last = out.last().unwrap();
            assert!(rp::is_terminator(last, deprecate_eof));
        }
    }

    fn order(keys: &[(ColumnRef, bool)]) -> MergeSpec {
        MergeSpec {
            order_by: keys
                .iter()
                .map(|(column, desc)| OrderKey {
                    column: column.clone(),
                    desc: *desc,
                })
                .collect(),
            ..MergeSpec::default()
        }
    }

    fn by(name: &str) -> ColumnRef {
        ColumnRef::Name(name.to_string())
    }

    fn int_rows(values: &[Option<i64>]) -> Vec<Vec<Option<String>>> {
        values
            .iter()
            .map(|v| vec![v.map(|x| x.to_string())])
            .collect()
    }

    fn borrow(rows: &[Vec<Option<String>>]) -> Vec<Row<'_>> {
        rows.iter()
            .map(|r| r.iter().map(Option::as_deref).collect())
            .collect()
    }

    #[test]
    fn without_order_rows_are_concatenated_and_limited_after() {
        let cols = [col("id", types::LONG), col("name", 0xfd)];
        let shards = [
            shard(
                &cols,
                vec![vec![Some("3"), Some("c")], vec![Some("1"), None]],
            ),
            shard(&cols, vec![]),
            shard(&cols, vec![vec![Some("2"), Some("b")]]),
        ];
        let all = [
            vec![Some("3"), Some("c")],
            vec![Some("1"), None],
            vec![Some("2"), Some("b")],
        ];
        check(&shards, &MergeSpec::default(), &all);
        let limited = |limit, offset| MergeSpec {
            limit,
            offset,
            ..MergeSpec::default()
        };
        check(&shards, &limited(Some(2), 0), &all[..2]);
        check(&shards, &limited(Some(1), 1), &all[1..2]);
        check(&shards, &limited(None, 2), &all[2..]);
        check(&shards, &limited(Some(10), 3), &[]);
        check(&shards, &limited(Some(0), 0), &[]);
        check(&shards, &limited(Some(5), u64::MAX), &[]);
        check(&shards, &limited(Some(u64::MAX), 1), &all[1..]);
    }

    #[test]
    fn order_by_merges_sorted_shards_with_nulls_first_asc_last_desc() {
        let cols = [col("n", types::LONGLONG)];
        let asc0 = int_rows(&[None, Some(-5), Some(3), Some(9)]);
        let asc1 = int_rows(&[None, Some(-7), Some(3), Some(4)]);
        let shards = [shard(&cols, borrow(&asc0)), shard(&cols, borrow(&asc1))];
        let expected = int_rows(&[
            None,
            None,
            Some(-7),
            Some(-5),
            Some(3),
            Some(3),
            Some(4),
            Some(9),
        ]);
        check(&shards, &order(&[(by("n"), false)]), &borrow(&expected));

        let desc0 = int_rows(&[Some(9), Some(3), Some(-5), None]);
        let desc1 = int_rows(&[Some(4), Some(3), Some(-7), None]);
        let shards = [shard(&cols, borrow(&desc0)), shard(&cols, borrow(&desc1))];
        let expected = int_rows(&[
            Some(9),
            Some(4),
            Some(3),
            Some(3),
            Some(-5),
            Some(-7),
            None,
            None,
        ]);
        check(&shards, &order(&[(by("N"), true)]), &borrow(&expected));
    }

    #[test]
    fn equal_keys_keep_shard_order_and_each_shards_order() {
        let cols = [col("k", 0xfd), col("tag", types::LONG)];
        // "a" and "A" are equal case-insensitively.
        let shards = [
            shard(
                &cols,
                vec![
                    vec![Some("a"), Some("1")],
                    vec![Some("A"), Some("2")],
                    vec![Some("b"), Some("3")],
                ],
            ),
            shard(
                &cols,
                vec![vec![Some("A"), Some("4")], vec![Some("B "), Some("5")]],
            ),
            shard(&cols, vec![vec![Some("a"), Some("6")]]),
        ];
        let expected = [
            vec![Some("a"), Some("1")],
            vec![Some("A"), Some("2")],
            vec![Some("A"), Some("4")],
            vec![Some("a"), Some("6")],
            vec![Some("b"), Some("3")],
            vec![Some("B "), Some("5")],
        ];
        check(&shards, &order(&[(by("k"), false)]), &expected);
    }

    #[test]
    fn two_keys_in_mixed_directions_on_mixed_types() {
        let cols = [
            col("d", types::NEWDECIMAL),
            col("at", types::DATETIME),
            col("t", types::TIME),
        ];
        // ORDER BY d DESC, at ASC
        let shards = [
            shard(
                &cols,
                vec![
                    vec![
                        Some("10.50"),
                        Some("2024-01-02 00:00:00"),
                        Some("-01:00:00"),
                    ],
                    vec![Some("10.5"), Some("2024-03-01 00:00:00"), Some("30:00:00")],
                    vec![Some("-2.000"), None, None],
                ],
            ),
            shard(
                &cols,
                vec![
                    vec![
                        Some("99999999999999999999.1"),
                        Some("2020-01-01 00:00:00"),
                        Some("00:00:01"),
                    ],
                    vec![
                        Some("10.500"),
                        Some("2024-02-01 00:00:00"),
                        Some("-100:00:00"),
                    ],
                    vec![Some("-2"), Some("1999-12-31 23:59:59"), Some("00:00:00")],
                    vec![None, Some("2000-01-01 00:00:00"), None],
                ],
            ),
        ];
        let expected = [
            vec![
                Some("99999999999999999999.1"),
                Some("2020-01-01 00:00:00"),
                Some("00:00:01"),
            ],
            vec![
                Some("10.50"),
                Some("2024-01-02 00:00:00"),
                Some("-01:00:00"),
            ],
            vec![
                Some("10.500"),
                Some("2024-02-01 00:00:00"),
                Some("-100:00:00"),
            ],
            vec![Some("10.5"), Some("2024-03-01 00:00:00"), Some("30:00:00")],
            vec![Some("-2.000"), None, None],
            vec![Some("-2"), Some("1999-12-31 23:59:59"), Some("00:00:00")],
            vec![None, Some("2000-01-01 00:00:00"), None],
        ];
        check(
            &shards,
            &order(&[(by("d"), true), (ColumnRef::Position(1), false)]),
            &expected,
        );
        // ORDER BY t (a TIME beyond 24 hours and below zero)
        let shards = [
            shard(
                &cols,
                vec![
                    vec![Some("1"), None, Some("-100:00:00")],
                    vec![Some("2"), None, Some("30:00:00")],
                ],
            ),
            shard(
                &cols,
                vec![
                    vec![Some("3"), None, None],
                    vec![Some("4"), None, Some("-00:00:01")],
                    vec![Some("5"), None, Some("23:59:59")],
                ],
            ),
        ];
        let expected = [
            vec![Some("3"), None, None],
            vec![Some("1"), None, Some("-100:00:00")],
            vec![Some("4"), None, Some("-00:00:01")],
            vec![Some("5"), None, Some("23:59:59")],
            vec![Some("2"), None, Some("30:00:00")],
        ];
        check(&shards, &order(&[(by("t"), false)]), &expected);
    }

    #[test]
    fn unsigned_floats_and_binary_strings_compare_by_their_types() {
        let cols = [
            unsigned(col("u", types::LONGLONG)),
            col("f", types::DOUBLE),
            Col {
                charset: BINARY_CHARSET,
                ..col("b", 0xfc)
            },
        ];
        let shards = [
            shard(
                &cols,
                vec![
                    vec![Some("1"), Some("-1e10"), Some("B")],
                    vec![Some("18446744073709551615"), Some("2.5"), Some("a")],
                ],
            ),
            shard(
                &cols,
                vec![vec![Some("9223372036854775808"), Some("0.1"), Some("b")]],
            ),
        ];
        check(
            &shards,
            &order(&[(by("u"), false)]),
            &[
                vec![Some("1"), Some("-1e10"), Some("B")],
                vec![Some("9223372036854775808"), Some("0.1"), Some("b")],
                vec![Some("18446744073709551615"), Some("2.5"), Some("a")],
            ],
        );
        // Binary charset: bytes, "B" < "a" < "b".
        let shards = [
            shard(
                &cols,
                vec![
                    vec![Some("1"), Some("1"), Some("B")],
                    vec![Some("2"), Some("2"), Some("b")],
                ],
            ),
            shard(&cols, vec![vec![Some("3"), Some("3"), Some("a")]]),
        ];
        check(
            &shards,
            &order(&[(by("b"), false)]),
            &[
                vec![Some("1"), Some("1"), Some("B")],
                vec![Some("3"), Some("3"), Some("a")],
                vec![Some("2"), Some("2"), Some("b")],
            ],
        );
    }

    #[test]
    fn limit_and_offset_apply_after_the_merge() {
        let cols = [col("n", types::LONG)];
        let a = int_rows(&[Some(1), Some(4), Some(5)]);
        let b = int_rows(&[Some(2), Some(3), Some(6)]);
        let shards = [shard(&cols, borrow(&a)), shard(&cols, borrow(&b))];
        let all = int_rows(&[Some(1), Some(2), Some(3), Some(4), Some(5), Some(6)]);
        let all = borrow(&all);
        let spec = |limit, offset| MergeSpec {
            limit,
            offset,
            ..order(&[(by("n"), false)])
        };
        check(&shards, &spec(Some(3), 0), &all[..3]);
        check(&shards, &spec(Some(2), 2), &all[2..4]);
        check(&shards, &spec(None, 4), &all[4..]);
        check(&shards, &spec(Some(100), 5), &all[5..]);
        check(&shards, &spec(Some(1), 6), &[]);
        check(&shards, &spec(Some(0), 0), &[]);
        check(&shards, &spec(Some(0), 100), &[]);
    }

    #[test]
    fn order_keys_resolve_by_name_then_original_name_or_position() {
        let mut aliased = col("total", types::LONG);
        aliased.org_name = "amount";
        let cols = [col("x", types::LONG), aliased];
        let shards = [
            shard(&cols, vec![vec![Some("1"), Some("5")]]),
            shard(&cols, vec![vec![Some("2"), Some("4")]]),
        ];
        let expected = [vec![Some("2"), Some("4")], vec![Some("1"), Some("5")]];
        for key in [by("TOTAL"), by("amount"), ColumnRef::Position(1)] {
            check(&shards, &order(&[(key, false)]), &expected);
        }
        let err = |key| run(&shards, &order(&[(key, false)]), Protocol::Text, false).unwrap_err();
        assert_eq!(
            err(by("price")),
            MergeError::UnknownColumn {
                name: "price".into()
            }
        );
        assert_eq!(err(by("price")).code(), codes::ER_BAD_FIELD_ERROR);
        assert!(matches!(
            err(ColumnRef::Position(2)),
            MergeError::PositionOutOfRange {
                position: 3,
                columns: 2
            }
        ));
        let mut e = col("e", 0xfe);
        e.flags = flags::ENUM;
        let shards = [shard(&[e], vec![vec![Some("a")]])];
        let err = run(&shards, &order(&[(by("e"), false)]), Protocol::Text, false).unwrap_err();
        assert!(matches!(err, MergeError::Unorderable { .. }), "{err}");
        assert!(err.to_string().contains("`e`"), "{err}");
    }

    fn aggs(a: &[Agg]) -> MergeSpec {
        MergeSpec {
            aggregates: Some(a.to_vec()),
            ..MergeSpec::default()
        }
    }

    #[test]
    fn aggregates_combine_one_row_per_shard() {
        let cols = [
            col("c", types::LONGLONG),
            col("s", types::NEWDECIMAL),
            col("mn", types::DATETIME),
            col("mx", 0xfd),
            col("sd", types::DOUBLE),
            col("k", types::LONG),
            col("si", types::LONG),
        ];
        let spec = aggs(&[
            Agg::Count,
            Agg::Sum,
            Agg::Min,
            Agg::Max,
            Agg::Sum,
            Agg::First,
            Agg::Sum,
        ]);
        let shards = [
            shard(
                &cols,
                vec![vec![
                    Some("3"),
                    Some("10.250"),
                    Some("2024-05-01 00:00:00"),
                    Some("b"),
                    Some("0.5"),
                    Some("7"),
                    Some("2147483600"),
                ]],
            ),
            // An empty shard: COUNT 0, the others NULL.
            shard(
                &cols,
                vec![vec![Some("0"), None, None, None, None, Some("8"), None]],
            ),
            shard(
                &cols,
                vec![vec![
                    Some("2"),
                    Some("-0.255"),
                    Some("2023-05-01 00:00:00"),
                    Some("C"),
                    Some("1.25"),
                    Some("9"),
                    Some("47"),
                ]],
            ),
        ];
        check(
            &shards,
            &spec,
            &[vec![
                Some("5"),
                Some("9.995"),
                Some("2023-05-01 00:00:00"),
                Some("C"),
                Some("1.75"),
                Some("7"),
                Some("2147483647"),
            ]],
        );
        // All NULL: NULL, except COUNT.
        let empty = || {
            shard(
                &cols,
                vec![vec![Some("0"), None, None, None, None, None, None]],
            )
        };
        check(
            &[empty(), empty()],
            &spec,
            &[vec![Some("0"), None, None, None, None, None, None]],
        );
        // LIMIT 0 / OFFSET 1: no row, and shards sent LIMIT 0 returned none.
        let none = || shard(&cols, vec![]);
        for (limit, offset) in [(Some(0), 0), (Some(5), 1)] {
            let spec = MergeSpec {
                limit,
                offset,
                ..spec.clone()
            };
            check(&[none(), none()], &spec, &[]);
            check(&shards, &spec, &[]);
        }
        // ORDER BY on an aggregate query is not looked at.
        let spec = MergeSpec {
            order_by: order(&[(by("nope"), true)]).order_by,
            ..spec
        };
        check(
            &[empty()],
            &spec,
            &[vec![Some("0"), None, None, None, None, None, None]],
        );
    }

    #[test]
    fn aggregate_errors_name_the_shard_or_column() {
        let cols = [col("c", types::LONGLONG), col("s", types::LONG)];
        let spec = aggs(&[Agg::Count, Agg::Sum]);
        for (p, deprecate_eof) in ALL {
            let two = [
                shard(&cols, vec![vec![Some("1"), Some("1")]]),
                shard(
                    &cols,
                    vec![vec![Some("1"), Some("1")], vec![Some("1"), Some("1")]],
                ),
            ];
            assert_eq!(
                run(&two, &spec, p, deprecate_eof).unwrap_err(),
                MergeError::AggregateRows { shard: 1, rows: 2 }
            );
            let none = [shard(&cols, vec![])];
            assert_eq!(
                run(&none, &spec, p, deprecate_eof).unwrap_err(),
                MergeError::AggregateRows { shard: 0, rows: 0 }
            );
            let one = [shard(&cols, vec![vec![Some("1"), Some("1")]])];
            assert_eq!(
                run(&one, &aggs(&[Agg::Count]), p, deprecate_eof).unwrap_err(),
                MergeError::AggregateCount {
                    aggregates: 1,
                    columns: 2
                }
            );
            let big = [
                shard(&cols, vec![vec![Some("1"), Some("2147483647")]]),
                shard(&cols, vec![vec![Some("1"), Some("1")]]),
            ];
            let err = run(&big, &spec, p, deprecate_eof).unwrap_err();
            assert_eq!(
                err,
                MergeError::SumOverflow {
                    column: "1 (`s`)".into()
                }
            );
            assert_eq!(err.code(), codes::ER_DATA_OUT_OF_RANGE);
            let text = [col("t", 0xfd)];
            let err = run(
                &[shard(&text, vec![vec![Some("x")]])],
                &aggs(&[Agg::Sum]),
                p,
                deprecate_eof,
            )
            .unwrap_err();
            assert!(matches!(err, MergeError::Aggregate { .. }), "{err}");
        }
    }

    #[test]
    fn terminator_sums_warnings_and_takes_the_last_status() {
        for deprecate_eof in [false, true] {
            let t = |w, s| terminator(w, s, deprecate_eof);
            let merged = merge_terminators(
                &[
                    t(60000, status::AUTOCOMMIT),
                    t(5000, status::IN_TRANS | status::SESSION_STATE_CHANGED),
                    t(1000, status::IN_TRANS | status::MORE_RESULTS_EXISTS),
                ],
                deprecate_eof,
            )
            .unwrap();
            let parsed = rp::parse_terminator(&merged, deprecate_eof).unwrap();
            assert_eq!(
                parsed,
                Terminator {
                    status: status::IN_TRANS,
                    warnings: u16::MAX
                }
            );
            let merged = merge_terminators(
                &[t(1, status::SESSION_STATE_CHANGED), t(2, 0)],
                deprecate_eof,
            )
            .unwrap();
            assert_eq!(
                rp::parse_terminator(&merged, deprecate_eof).unwrap(),
                Terminator {
                    status: status::SESSION_STATE_CHANGED,
                    warnings: 3
                }
            );
            assert_eq!(
                merge_terminators::<Vec<u8>>(&[], deprecate_eof),
                Err(MergeError::NoReplies)
            );
            assert!(matches!(
                merge_terminators(&[t(0, 0), vec![0xfe]], deprecate_eof),
                Err(MergeError::Malformed { shard: 1, .. })
            ));
        }
        // The OK form keeps shard 0's tail (info, session state changes).
        let mut ok = terminator(1, status::SESSION_STATE_CHANGED, true);
        ok.extend_from_slice(b"\x00\x05\x00\x03\x02db");
        let merged = merge_terminators(&[ok.clone(), terminator(2, 0, true)], true).unwrap();
        assert_eq!(merged[merged.len() - 7..], ok[ok.len() - 7..]);

        // Through merge: warnings of every shard, status of the last.
        let cols = [col("n", types::LONG)];
        let shards = [
            Shard {
                warnings: 2,
                ..shard(&cols, vec![vec![Some("1")]])
            },
            Shard {
                warnings: 3,
                status: status::IN_TRANS,
                ..shard(&cols, vec![])
            },
        ];
        for (p, deprecate_eof) in ALL {
            let out = run(&shards, &order(&[(by("n"), false)]), p, deprecate_eof).unwrap();
            assert_eq!(
                rp::parse_terminator(out.last().unwrap(), deprecate_eof).unwrap(),
                Terminator {
                    status: status::IN_TRANS,
                    warnings: 5
                }
            );
        }
    }

    #[test]
    fn replies_that_are_not_one_result_set_are_errors() {
        let cols = [col("n", types::LONG)];
        let good = encode(&shard(&cols, vec![vec![Some("1")]]), Protocol::Text, false);
        let spec = order(&[(by("n"), false)]);
        let err =
            |replies: Vec<Vec<Vec<u8>>>| merge(&replies, &spec, Protocol::Text, false).unwrap_err();

        assert_eq!(err(vec![]), MergeError::NoReplies);
        let not = |what| MergeError::NotAResultSet { shard: 1, what };
        assert_eq!(
            err(vec![good.clone(), vec![vec![0xff, 0x15, 0x04]]]),
            not("an ERR packet")
        );
        assert_eq!(
            err(vec![good.clone(), vec![vec![0, 0, 0, 2, 0, 0, 0]]]),
            not("an OK packet, no result set")
        );
        assert_eq!(
            err(vec![good.clone(), vec![b"\xfbfile".to_vec()]]),
            not("a LOCAL INFILE request")
        );
        let mut multi = good.clone();
        multi.extend(good.clone());
        assert_eq!(
            err(vec![good.clone(), multi]),
            not("more than one result set")
        );
        let mut more = good.clone();
        *more.last_mut().unwrap() = eof_packet(0, status::MORE_RESULTS_EXISTS);
        assert_eq!(
            err(vec![good.clone(), more]),
            not("more than one result set")
        );
        let mut cursor = good.clone();
        cursor[2] = eof_packet(0, status::CURSOR_EXISTS);
        cursor.truncate(3);
        assert!(matches!(
            err(vec![good.clone(), cursor]),
            MergeError::NotAResultSet { shard: 1, .. }
        ));
        let mut err_in_rows = good.clone();
        err_in_rows.insert(4, vec![0xff, 1, 2]);
        assert_eq!(
            err(vec![good.clone(), err_in_rows]),
            not("an ERR packet after some rows")
        );

        let two = encode(
            &shard(&[col("n", types::LONG), col("m", types::LONG)], vec![]),
            Protocol::Text,
            false,
        );
        assert_eq!(
            err(vec![good.clone(), two]),
            MergeError::ColumnCount {
                shard: 1,
                expected: 1,
                found: 2
            }
        );
        let other = encode(
            &shard(&[unsigned(col("n", types::LONG))], vec![]),
            Protocol::Text,
            false,
        );
        let e = err(vec![good.clone(), other]);
        assert!(matches!(&e, MergeError::ColumnType { shard: 1, .. }), "{e}");
        assert!(e.to_string().contains("0x03 unsigned"), "{e}");
    }

    #[test]
    fn malformed_rows_and_packets_are_errors() {
        let cols = [col("a", types::LONG), col("b", types::DOUBLE)];
        let spec = order(&[(by("b"), false)]);
        for (p, deprecate_eof) in ALL {
            let good = encode(
                &shard(&cols, vec![vec![Some("1"), Some("2")]]),
                p,
                deprecate_eof,
            );
            let row_at = 3 + usize::from(!deprecate_eof);
            let mut truncated = good.clone();
            truncated[row_at].pop();
            let e = merge(&[good.clone(), truncated], &spec, p, deprecate_eof).unwrap_err();
            assert!(
                matches!(
                    e,
                    MergeError::BadRow {
                        shard: 1,
                        row: 0,
                        ..
                    }
                ),
                "{e}"
            );
            let mut longer = good.clone();
            longer[row_at].push(1);
            let e = merge(&[longer, good.clone()], &spec, p, deprecate_eof).unwrap_err();
            assert!(
                matches!(
                    e,
                    MergeError::BadRow {
                        shard: 0,
                        row: 0,
                        ..
                    }
                ),
                "{e}"
            );
            // Shard 1 sends a row of one column.
            let one = encode(&shard(&cols[..1], vec![vec![Some("1")]]), p, deprecate_eof);
            let mut wrong = good.clone();
            wrong[row_at] = one[row_at - 1].clone();
            let e = merge(&[good.clone(), wrong], &spec, p, deprecate_eof).unwrap_err();
            assert!(matches!(e, MergeError::BadRow { shard: 1, .. }), "{e}");
            // A column definition cut short.
            let mut def = good.clone();
            def[1].truncate(5);
            let e = merge(&[good.clone(), def], &spec, p, deprecate_eof).unwrap_err();
            assert!(matches!(e, MergeError::Malformed { shard: 1, .. }), "{e}");
            // No terminator.
            let mut cut = good.clone();
            cut.pop();
            let e = merge(&[good.clone(), cut], &spec, p, deprecate_eof).unwrap_err();
            assert!(matches!(e, MergeError::Malformed { shard: 1, .. }), "{e}");
        }
        // A value that does not read as its type (text protocol).
        let bad = encode(
            &shard(&cols, vec![vec![Some("1"), Some("x")]]),
            Protocol::Text,
            false,
        );
        let e = merge(&[bad], &spec, Protocol::Text, false).unwrap_err();
        assert_eq!(
            e,
            MergeError::BadValue {
                shard: 0,
                row: 0,
                column: "1 (`b`)".into(),
                what: "bad floating-point number"
            }
        );
    }

    /// Reference: a stable sort of all shards' rows in shard order.
    fn reference(
        shards: &[Vec<(Option<i64>, u8)>],
        desc: bool,
        offset: usize,
        limit: usize,
    ) -> Vec<(Option<i64>, u8)> {
        let mut all: Vec<_> = shards.concat();
        all.sort_by(|a, b| {
            let o = a.0.cmp(&b.0); // None < Some, as NULL first in ASC
            if desc {
                o.reverse()
            } else {
                o
            }
        });
        all.into_iter().skip(offset).take(limit).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        #[test]
        fn k_way_merge_equals_a_stable_sort_of_the_concatenation(
            mut shards in proptest::collection::vec(
                proptest::collection::vec((proptest::option::of(-5i64..5), any::<u8>()), 0..8),
                1..5,
            ),
            desc in any::<bool>(),
            offset in 0usize..12,
            limit in 0usize..40,
            binary in any::<bool>(),
            deprecate_eof in any::<bool>(),
        ) {
            // Each shard sorts its own rows, as ORDER BY on it does.
            for s in &mut shards {
                s.sort_by(|a, b| if desc { b.0.cmp(&a.0) } else { a.0.cmp(&b.0) });
            }
            let p = if binary { Protocol::Binary } else { Protocol::Text };
            let cols = [col("k", types::LONGLONG), unsigned(col("tag", types::TINY))];
            let text: Vec<Vec<Vec<Option<String>>>> = shards
                .iter()
                .map(|s| s.iter().map(|(k, t)| vec![k.map(|k| k.to_string()), Some(t.to_string())]).collect())
                .collect();
            let built: Vec<Shard> = text.iter().map(|rows| shard(&cols, borrow(rows))).collect();
            let spec = MergeSpec {
                limit: Some(limit as u64),
                offset: offset as u64,
                ..order(&[(by("k"), desc)])
            };
            let out = run(&built, &spec, p, deprecate_eof).unwrap();
            let head_len = 3 + usize::from(!deprecate_eof);
            let expected: Vec<Vec<u8>> = reference(&shards, desc, offset, limit)
                .iter()
                .map(|(k, t)| {
                    let (k, t) = (k.map(|k| k.to_string()), t.to_string());
                    encode_row(&cols, &[k.as_deref(), Some(&t)], p)
                })
                .collect();
            prop_assert_eq!(&out[head_len..out.len() - 1], &expected[..]);
        }

        #[test]
        fn damaged_replies_are_errors_not_panics(
            cut in proptest::collection::vec((0usize..16, 0usize..40, any::<u8>(), 0u8..3), 1..4),
            binary in any::<bool>(),
            deprecate_eof in any::<bool>(),
            with_aggs in any::<bool>(),
        ) {
            let p = if binary { Protocol::Binary } else { Protocol::Text };
            let cols = [
                col("a", types::LONG),
                col("b", types::NEWDECIMAL),
                col("c", types::DATETIME),
                col("d", types::TIME),
                col("e", 0xfd),
                col("f", types::FLOAT),
            ];
            let row = vec![Some("1"), Some("2.5"), Some("2024-01-02 03:04:05.000006"), Some("-30:00:00"), Some("x"), Some("1.5")];
            let mut replies = vec![
                encode(&shard(&cols, vec![row.clone()]), p, deprecate_eof),
                encode(&shard(&cols, vec![row]), p, deprecate_eof),
            ];
            for (packet, at, byte, how) in cut {
                let r = &mut replies[packet % 2];
                let n = r.len();
                let pk = &mut r[packet % n];
                match how {
                    0 => pk.truncate(at % (pk.len() + 1)),
                    1 => if !pk.is_empty() { let i = at % pk.len(); pk[i] = byte },
                    _ => pk.insert(at % (pk.len() + 1), byte),
                }
            }
            let spec = if with_aggs {
                aggs(&[Agg::Sum, Agg::Sum, Agg::Min, Agg::Max, Agg::Max, Agg::Sum])
            } else {
                order(&[(by("d"), true), (by("c"), false), (by("b"), false), (by("f"), false)])
            };
            let _ = merge(&replies, &spec, p, deprecate_eof);
            let _ = super::super::stream::merge_replies(&replies, &spec, p, deprecate_eof);
        }
    }
}
