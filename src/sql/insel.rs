//! `INSERT ... SELECT` into a rule table: recognising the statement (its
//! target, column list and source query), and writing each source value
//! back as a SQL literal that the target column converts exactly as it
//! converts the source column's value in MariaDB's own INSERT ... SELECT.
//!
//! The values come from the source query's binary-protocol rows (a
//! server-side cursor), so each carries its column's type: integers are
//! written as integers, DECIMAL as an exact decimal literal, DOUBLE as a
//! double literal with every digit (`{:e}`, shortest round trip), FLOAT as
//! `CAST(<its exact double> AS FLOAT)` (a FLOAT-typed value, so a VARCHAR
//! target gets the float's own digits), dates and times as typed temporal
//! literals (`DATE'..'`, `TIMESTAMP'..'`, `TIME'..'`, with the column's
//! fractional digits), BIT as `b'..'` (a number in numeric context, as a
//! BIT column is), strings as `_<charset> X'..'` (a string in every
//! context, never a number: a bare `X'..'` would be one in numeric
//! context; the bytes are exact whatever they hold: quotes, backslashes,
//! NUL, invalid UTF-8 in a binary column) and NULL as `NULL`, never
//! `'NULL'`. Pure: no I/O.

use std::borrow::Cow;
use std::fmt::Write as _;

use super::fast::{self, ident};
use super::lexer::{Kind, Lexer, Modes};
use crate::protocol::stmt::{int_value, types};

/// What follows the source query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Nothing (or a `;`).
    None,
    /// `ON DUPLICATE KEY UPDATE ...`.
    OnDuplicate,
    /// `RETURNING ...`.
    Returning,
}

/// An `INSERT|REPLACE [IGNORE] [INTO] t [(cols)] <query>` statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsertSelect<'a> {
    /// `REPLACE` rather than `INSERT`.
    pub replace: bool,
    /// `IGNORE` before the table.
    pub ignore: bool,
    /// The schema written before the table, unquoted.
    pub schema: Option<Cow<'a, str>>,
    /// The table, unquoted.
    pub table: Cow<'a, str>,
    /// `sql[..head_end]` is the statement up to the table name (and its
    /// `PARTITION (...)`), hints and modifiers kept: what each INSERT idgate
    /// writes starts with.
    pub head_end: usize,
    /// The column list as written, unquoted (`None`: no list).
    pub columns: Option<Vec<Cow<'a, str>>>,
    /// The source query's byte range.
    pub query: (usize, usize),
    /// What follows the query.
    pub tail: Tail,
}

/// Why a recognised INSERT ... SELECT cannot be run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfit {
    /// Executable comments (`/*! ... */`) could hide any part of it.
    ExecutableComment,
    /// A quote or comment that never ends.
    Unterminated,
    /// The column list is not a list of names.
    ColumnList,
}

/// `INSERT ... TABLE t` is not among them: MariaDB has no TABLE
/// statement, and the planner refuses it naming the table.
fn starts_query(sql: &str, t: &super::lexer::Token) -> bool {
    t.is(b'(') || ["SELECT", "WITH"].iter().any(|k| t.is_word(sql, k))
}

/// Whether `sql` may be an INSERT ... SELECT at all: it holds the word
/// SELECT somewhere (every form [`parse`] accepts does: `SELECT`, `(SELECT`,
/// `WITH ... SELECT`). A scan of the bytes, cheap beside the lexing
/// [`parse`] does, so an INSERT ... VALUES (every INSERT pays this check
/// while rules are loaded) seldom pays more; a false yes (`'select'` in a
/// string) only costs the parse.
pub fn may_be(sql: &[u8]) -> bool {
    // Scanned for its `c`, rarer in SQL text than `s` (sysbench's INSERT
    // has four `s` and one `c`; each byte found restarts the scan).
    memchr::memchr2_iter(b'c', b'C', sql).any(|i| {
        i >= 4
            && sql
                .get(i - 4..i + 2)
                .is_some_and(|w| w.eq_ignore_ascii_case(b"select"))
    })
}

/// Recognises `sql` (one statement, leading white space and comments
/// allowed) as an INSERT ... SELECT. `None`: it is not one (VALUES, SET,
/// another statement, or a form the caller's other paths judge).
pub fn parse(sql: &str, modes: Modes) -> Option<Result<InsertSelect<'_>, Unfit>> {
    let mut lx = Lexer::new(sql, 0, modes);
    let first = lx.next_token()?;
    let replace = first.is_word(sql, "REPLACE");
    if !replace && !first.is_word(sql, "INSERT") {
        return None;
    }
    let head = fast::head(&mut lx, sql).ok()?;
    // A column list, or the query at once.
    let mut ahead = lx.clone();
    let t = ahead.next_token()?;
    let mut columns = None;
    let query_start;
    if t.is(b'(') {
        let mut probe = ahead.clone();
        let inner = probe.next_token()?;
        if starts_query(sql, &inner) {
            query_start = t.start;
        } else {
            let mut names = Vec::new();
            let mut tok = inner;
            if !tok.is(b')') {
                loop {
                    let mut name = match ident(sql, &tok) {
                        Some(n) => n,
                        None => return Some(Err(Unfit::ColumnList)),
                    };
                    let mut next = probe.next_token()?;
                    while next.is(b'.') {
                        let part = probe.next_token()?;
                        name = match ident(sql, &part) {
                            Some(n) => n,
                            None => return Some(Err(Unfit::ColumnList)),
                        };
                        next = probe.next_token()?;
                    }
                    names.push(name);
                    if next.is(b')') {
                        break;
                    }
                    if !next.is(b',') {
                        return Some(Err(Unfit::ColumnList));
                    }
                    tok = probe.next_token()?;
                }
            }
            let q = probe.clone().next_token()?;
            if !starts_query(sql, &q) {
                return None;
            }
            columns = Some(names);
            query_start = q.start;
            lx = probe;
        }
    } else if starts_query(sql, &t) {
        query_start = t.start;
    } else {
        return None;
    }
    // The query runs to the end, a `;`, or a top-level ON DUPLICATE KEY
    // UPDATE / RETURNING.
    let mut depth = 0usize;
    let mut end = sql.len();
    let mut tail = Tail::None;
    let mut prev_on: Option<usize> = None;
    while let Some(t) = lx.next_token() {
        match t.kind {
            Kind::Unterminated => return Some(Err(Unfit::Unterminated)),
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            Kind::Punct(b';') if depth == 0 => {
                end = t.start;
                break;
            }
            Kind::Word if depth == 0 => {
                if let Some(on) = prev_on.filter(|_| t.is_word(sql, "DUPLICATE")) {
                    end = on;
                    tail = Tail::OnDuplicate;
                    break;
                }
                if t.is_word(sql, "RETURNING") {
                    end = t.start;
                    tail = Tail::Returning;
                    break;
                }
            }
            _ => {}
        }
        prev_on = (t.kind == Kind::Word && depth == 0 && t.is_word(sql, "ON")).then_some(t.start);
    }
    if lx.take_exec_seen() || lx.in_exec() {
        return Some(Err(Unfit::ExecutableComment));
    }
    Some(Ok(InsertSelect {
        replace,
        ignore: head.ignore,
        schema: head.schema,
        table: head.table,
        head_end: head.after_table,
        columns,
        query: (query_start, end),
        tail,
    }))
}

/// `name` as a backquoted identifier.
pub fn quote_ident(name: &str, out: &mut String) {
    out.push('`');
    out.push_str(&name.replace('`', "``"));
    out.push('`');
}

/// What [`write_literal`] needs of a source column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceColumn {
    /// `MYSQL_TYPE_*`.
    pub ty: u8,
    /// An unsigned integer column.
    pub unsigned: bool,
    /// Fractional digits of a temporal column (from its definition; 0..=6,
    /// anything larger meaning "not fixed").
    pub decimals: u8,
    /// The character set the values are sent in (an introducer name:
    /// `utf8mb4`, `latin1`, `binary`).
    pub charset: String,
}

/// A value idgate cannot write back exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadValue(pub &'static str);

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn le<const N: usize>(v: &[u8]) -> Result<[u8; N], BadValue> {
    v.get(..N)
        .and_then(|b| <[u8; N]>::try_from(b).ok())
        .ok_or(BadValue("a value shorter than its type"))
}

fn u16_at(v: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([
        v.get(at).copied().unwrap_or(0),
        v.get(at + 1).copied().unwrap_or(0),
    ])
}

fn u32_at(v: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([
        v.get(at).copied().unwrap_or(0),
        v.get(at + 1).copied().unwrap_or(0),
        v.get(at + 2).copied().unwrap_or(0),
        v.get(at + 3).copied().unwrap_or(0),
    ])
}

/// The fractional part `.ffffff` cut to `decimals` digits (all six when the
/// column's are not fixed and the value has any).
fn fraction(out: &mut String, micros: u32, decimals: u8) {
    let digits = match decimals {
        0 => return,
        d @ 1..=6 => usize::from(d),
        _ if micros == 0 => return,
        _ => 6,
    };
    let s = format!("{micros:06}");
    out.push('.');
    out.push_str(s.get(..digits).unwrap_or(&s));
}

/// Appends the literal for one binary-protocol value `cell` (`None`: NULL)
/// of column `col`.
pub fn write_literal(
    out: &mut String,
    col: &SourceColumn,
    cell: Option<&[u8]>,
) -> Result<(), BadValue> {
    let Some(v) = cell else {
        out.push_str("NULL");
        return Ok(());
    };
    match col.ty {
        types::TINY | types::SHORT | types::YEAR | types::LONG | types::INT24 | types::LONGLONG => {
            let flag = if col.unsigned {
                types::UNSIGNED_FLAG
            } else {
                0
            };
            let n = int_value([col.ty, flag], v).ok_or(BadValue("a malformed integer"))?;
            let _ = write!(out, "{n}");
        }
        types::FLOAT => {
            let f = f32::from_le_bytes(le::<4>(v)?);
            if !f.is_finite() {
                return Err(BadValue("a FLOAT that is not a finite number"));
            }
            let _ = write!(out, "CAST({:e} AS FLOAT)", f64::from(f));
        }
        types::DOUBLE => {
            let d = f64::from_le_bytes(le::<8>(v)?);
            if !d.is_finite() {
                return Err(BadValue("a DOUBLE that is not a finite number"));
            }
            let _ = write!(out, "{d:e}");
        }
        types::DECIMAL | types::NEWDECIMAL => {
            let ok = !v.is_empty()
                && v.iter()
                    .all(|b| b.is_ascii_digit() || *b == b'.' || *b == b'-');
            if !ok {
                return Err(BadValue("a malformed DECIMAL"));
            }
            // ASCII checked above.
            out.push_str(std::str::from_utf8(v).map_err(|_| BadValue("a malformed DECIMAL"))?);
        }
        types::DATE => {
            let _ = write!(
                out,
                "DATE'{:04}-{:02}-{:02}'",
                u16_at(v, 0),
                v.get(2).copied().unwrap_or(0),
                v.get(3).copied().unwrap_or(0)
            );
        }
        types::DATETIME | types::TIMESTAMP => {
            let _ = write!(
                out,
                "TIMESTAMP'{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
                u16_at(v, 0),
                v.get(2).copied().unwrap_or(0),
                v.get(3).copied().unwrap_or(0),
                v.get(4).copied().unwrap_or(0),
                v.get(5).copied().unwrap_or(0),
                v.get(6).copied().unwrap_or(0)
            );
            fraction(
                out,
                if v.len() >= 11 { u32_at(v, 7) } else { 0 },
                col.decimals,
            );
            out.push('\'');
        }
        types::TIME => {
            let negative = v.first().is_some_and(|&b| b == 1);
            let days = u64::from(u32_at(v, 1));
            let hours = days * 24 + u64::from(v.get(5).copied().unwrap_or(0));
            let _ = write!(
                out,
                "TIME'{}{:02}:{:02}:{:02}",
                if negative { "-" } else { "" },
                hours,
                v.get(6).copied().unwrap_or(0),
                v.get(7).copied().unwrap_or(0)
            );
            fraction(
                out,
                if v.len() >= 12 { u32_at(v, 8) } else { 0 },
                col.decimals,
            );
            out.push('\'');
        }
        // BIT: a number in numeric context, as the column is.
        0x10 => {
            out.push_str("b'");
            if v.is_empty() {
                out.push('0');
            }
            for b in v {
                let _ = write!(out, "{b:08b}");
            }
            out.push('\'');
        }
        // Strings of every kind (VARCHAR, ENUM, SET, BLOBs, JSON, ...).
        _ => {
            out.reserve(v.len() * 2 + col.charset.len() + 5);
            out.push('_');
            out.push_str(&col.charset);
            out.push_str(" X'");
            for b in v {
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 15)]));
            }
            out.push('\'');
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(sql: &str) -> InsertSelect<'_> {
        parse(sql, Modes::default())
            .expect("recognised")
            .expect("fit")
    }

    #[test]
    fn may_be_finds_select_in_any_case() {
        assert!(may_be(b"INSERT INTO t SELECT 1"));
        assert!(may_be(b"insert into t (a) (sElEcT a FROM u)"));
        assert!(may_be(
            b"INSERT INTO t WITH c AS (SELECT 1) SELECT * FROM c"
        ));
        assert!(!may_be(b"INSERT INTO t (a, s) VALUES (1, 'sel')"));
        assert!(!may_be(
            b"INSERT INTO t VALUES (1) ON DUPLICATE KEY UPDATE s = 2"
        ));
        // Every statement parse accepts passes the check first.
        for sql in [
            "INSERT INTO t SELECT 1",
            "REPLACE t (a) WITH x AS (SELECT 1) SELECT * FROM x",
        ] {
            assert!(parse(sql, Modes::default()).is_some() && may_be(sql.as_bytes()));
        }
    }

    proptest::proptest! {
        /// The scan anchored on `c` finds `select` wherever a plain
        /// search does (at either end of the text too).
        #[test]
        fn may_be_is_a_plain_search(t in "(select|SeLeCt|sel|ect|c|C|s|e| ){0,10}") {
            proptest::prop_assert_eq!(
                may_be(t.as_bytes()),
                crate::sql::statement::keyword::contains_ignore_case(t.as_bytes(), b"select")
            );
        }
    }

    #[test]
    fn recognises_the_forms() {
        let s = p("INSERT INTO db.t (a, `b`, x.id) SELECT a, b, id FROM src WHERE x = 1");
        assert_eq!(s.schema.as_deref(), Some("db"));
        assert_eq!(s.table, "t");
        assert_eq!(
            &"INSERT INTO db.t (a, `b`, x.id) SELECT"[..s.head_end],
            "INSERT INTO db.t"
        );
        let cols: Vec<&str> = s.columns.iter().flatten().map(|c| &**c).collect();
        assert_eq!(cols, ["a", "b", "id"]);
        let sql = "INSERT INTO db.t (a, `b`, x.id) SELECT a, b, id FROM src WHERE x = 1";
        assert_eq!(
            &sql[s.query.0..s.query.1],
            "SELECT a, b, id FROM src WHERE x = 1"
        );
        assert_eq!(s.tail, Tail::None);

        let sql = "insert ignore t (select * from u order by 1 limit 3);";
        let s = p(sql);
        assert!(s.ignore && !s.replace && s.columns.is_none());
        assert_eq!(
            &sql[s.query.0..s.query.1],
            "(select * from u order by 1 limit 3)"
        );

        let sql =
            "REPLACE INTO t SELECT a FROM u JOIN v ON u.k = v.k ON DUPLICATE KEY UPDATE a = 1";
        let s = p(sql);
        assert!(s.replace);
        assert_eq!(s.tail, Tail::OnDuplicate);
        assert_eq!(
            &sql[s.query.0..s.query.1],
            "SELECT a FROM u JOIN v ON u.k = v.k "
        );

        let sql = "INSERT INTO t WITH c AS (SELECT 1) SELECT * FROM c RETURNING id";
        assert_eq!(p(sql).tail, Tail::Returning);

        for not in [
            "INSERT INTO t VALUES (1)",
            "INSERT INTO t (a) VALUES (1)",
            "INSERT INTO t SET a = 1",
            "INSERT INTO t (a) TABLE u",
            "SELECT 1",
            "UPDATE t SET a = 1",
        ] {
            assert!(parse(not, Modes::default()).is_none(), "{not}");
        }
        assert_eq!(
            parse("INSERT INTO t /*! SELECT */ 1", Modes::default()),
            Some(Err(Unfit::ExecutableComment))
        );
        assert_eq!(
            parse("INSERT INTO t SELECT /*!1*/ 1", Modes::default()),
            Some(Err(Unfit::ExecutableComment))
        );
        assert_eq!(
            parse("INSERT INTO t SELECT 'a", Modes::default()),
            Some(Err(Unfit::Unterminated))
        );
    }

    fn lit(ty: u8, unsigned: bool, decimals: u8, v: Option<&[u8]>) -> String {
        let col = SourceColumn {
            ty,
            unsigned,
            decimals,
            charset: "utf8mb4".into(),
        };
        let mut s = String::new();
        write_literal(&mut s, &col, v).expect("literal");
        s
    }

    #[test]
    fn literals_keep_type_and_value() {
        assert_eq!(
            lit(types::LONGLONG, true, 0, Some(&u64::MAX.to_le_bytes())),
            "18446744073709551615"
        );
        assert_eq!(
            lit(types::LONGLONG, false, 0, Some(&(-5i64).to_le_bytes())),
            "-5"
        );
        assert_eq!(lit(types::TINY, false, 0, Some(&[0xff])), "-1");
        assert_eq!(lit(types::TINY, true, 0, Some(&[0xff])), "255");
        assert_eq!(
            lit(types::DOUBLE, false, 0, Some(&0.1f64.to_le_bytes())),
            "1e-1"
        );
        assert_eq!(
            lit(types::FLOAT, false, 0, Some(&0.1f32.to_le_bytes())),
            "CAST(1.0000000149011612e-1 AS FLOAT)"
        );
        assert_eq!(lit(types::NEWDECIMAL, false, 2, Some(b"-12.50")), "-12.50");
        assert_eq!(
            lit(types::DATE, false, 0, Some(&[0xe8, 0x07, 2, 29])),
            "DATE'2024-02-29'"
        );
        assert_eq!(lit(types::DATE, false, 0, Some(&[])), "DATE'0000-00-00'");
        assert_eq!(
            lit(
                types::DATETIME,
                false,
                3,
                Some(&[0xe8, 0x07, 1, 2, 3, 4, 5, 0x20, 0xa1, 0x07, 0])
            ),
            "TIMESTAMP'2024-01-02 03:04:05.500'"
        );
        assert_eq!(
            lit(types::TIME, false, 0, Some(&[1, 1, 0, 0, 0, 2, 3, 4])),
            "TIME'-26:03:04'"
        );
        assert_eq!(lit(0x10, false, 0, Some(&[5])), "b'00000101'");
        assert_eq!(
            lit(types::VAR_STRING, false, 0, Some(b"NULL")),
            "_utf8mb4 X'4E554C4C'"
        );
        assert_eq!(lit(types::BLOB, false, 0, Some(b"")), "_utf8mb4 X''");
        assert_eq!(lit(types::VAR_STRING, false, 0, None), "NULL");
        let col = SourceColumn {
            ty: types::DOUBLE,
            unsigned: false,
            decimals: 0,
            charset: String::new(),
        };
        assert!(write_literal(&mut String::new(), &col, Some(&f64::NAN.to_le_bytes())).is_err());
        assert!(write_literal(&mut String::new(), &col, Some(&[1, 2])).is_err());
    }
}
