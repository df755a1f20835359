//! One shard's buffered reply to a SELECT, split into its parts: the
//! column head, the rows, the terminator.

use crate::protocol::column::ColumnDef;
use crate::protocol::consts::status;
use crate::protocol::reply::{self, ERR, LOCAL_INFILE, OK};
use crate::protocol::wire::Cursor;

/// A reply that is exactly one result set.
#[derive(Debug, Clone)]
pub struct ShardReply<'a> {
    /// Column count, column definitions and, without `CLIENT_DEPRECATE_EOF`,
    /// the EOF after them: what the client is sent before the rows.
    pub head: &'a [Vec<u8>],
    /// The decoded column definitions.
    pub columns: Vec<ColumnDef<'a>>,
    /// Row packets, as sent.
    pub rows: &'a [Vec<u8>],
    /// The EOF, or with `CLIENT_DEPRECATE_EOF` the `0xfe` OK packet, after the rows.
    pub terminator: &'a [u8],
}

/// Why a reply could not be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitError {
    /// A well-formed reply that is not one result set (ERR, OK, several
    /// result sets, a cursor).
    NotAResultSet(&'static str),
    /// Bytes that do not follow the protocol.
    Malformed(&'static str),
}

/// Splits `packets`, a complete reply to COM_QUERY or COM_STMT_EXECUTE.
pub fn split(packets: &[Vec<u8>], deprecate_eof: bool) -> Result<ShardReply<'_>, SplitError> {
    use SplitError::{Malformed, NotAResultSet};
    let first = packets.first().ok_or(Malformed("empty reply"))?;
    match first.first() {
        None => return Err(Malformed("empty packet")),
        Some(&ERR) => return Err(NotAResultSet("an ERR packet")),
        Some(&OK) => return Err(NotAResultSet("an OK packet, no result set")),
        Some(&LOCAL_INFILE) => return Err(NotAResultSet("a LOCAL INFILE request")),
        Some(_) => {}
    }
    let count = Cursor::new(first).lenenc().map_err(|e| Malformed(e.0))?;
    if count == 0 {
        return Err(Malformed("result set with no columns"));
    }
    let defs = usize::try_from(count)
        .ok()
        .and_then(|n| packets.get(1..n.checked_add(1)?))
        .ok_or(Malformed("reply ends inside its column definitions"))?;
    let columns = defs
        .iter()
        .map(|p| ColumnDef::decode(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Malformed(e.0))?;
    let mut at = 1 + defs.len();
    if !deprecate_eof {
        let eof = packets
            .get(at)
            .ok_or(Malformed("reply ends after its column definitions"))?;
        if !reply::is_eof(eof) {
            return Err(Malformed("no EOF packet after the column definitions"));
        }
        let t = reply::parse_terminator(eof, false).map_err(|e| Malformed(e.0))?;
        if t.status & status::CURSOR_EXISTS != 0 {
            return Err(NotAResultSet(
                "a cursor was opened (rows come with COM_STMT_FETCH)",
            ));
        }
        at += 1;
    }
    let (head, rest) = packets.split_at(at.min(packets.len()));
    let end = rest
        .iter()
        .position(|p| reply::is_terminator(p, deprecate_eof))
        .ok_or(Malformed(
            "reply ends without the terminator after its rows",
        ))?;
    let (rows, tail) = rest.split_at(end);
    if rows.iter().any(|r| r.first() == Some(&ERR)) {
        return Err(NotAResultSet("an ERR packet after some rows"));
    }
    let (terminator, after) = tail.split_first().ok_or(Malformed(
        "reply ends without the terminator after its rows",
    ))?;
    let t = reply::parse_terminator(terminator, deprecate_eof).map_err(|e| Malformed(e.0))?;
    if !after.is_empty() || t.status & status::MORE_RESULTS_EXISTS != 0 {
        return Err(NotAResultSet("more than one result set"));
    }
    Ok(ShardReply {
        head,
        columns,
        rows,
        terminator,
    })
}
