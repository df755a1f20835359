//! INSERT IGNORE and ON DUPLICATE KEY UPDATE: how a statement is written so
//! that idgate can report its id exactly as MariaDB reports an
//! AUTO_INCREMENT id, without reading anything afterwards (a read of the
//! table would clear the statement's warnings).
//!
//! MariaDB (10.11, checked on the test bed) reports, in the OK packet:
//! the first *generated* id of a row that was stored; else, if a row was
//! updated (an ON DUPLICATE KEY UPDATE that changed it), the id column of
//! the statement's last row as it ends up (the existing row's id); else 0.
//! `LAST_INSERT_ID()` becomes the first stored generated id, and is left
//! alone when no generated row was stored.
//!
//! A statement of this kind is *tracked* ([`Report::Track`]): the backend's
//! own `LAST_INSERT_ID` is used as a scratch register that the OK packet
//! carries back.
//! - The first generated id saves the session's value (and which statement
//!   saved it) and starts the register:
//!   `LAST_INSERT_ID(IF((@idgate_lid := LAST_INSERT_ID()) = (@idgate_at := <id>), <id>, <id>))`.
//! - With ON DUPLICATE KEY UPDATE and several rows, the register holds the
//!   id of the first generated row not yet known to be a duplicate. Every
//!   later generated id is `IF(LAST_INSERT_ID() = 0, LAST_INSERT_ID(<id>), <id>)`,
//!   and idgate appends to the update list
//!   `` `id` = IF(VALUES(`id`) >= <first id> AND LAST_INSERT_ID() = VALUES(`id`), IF(LAST_INSERT_ID(IF(VALUES(`id`) = <last row's id>, `id`, 0)), `id`, `id`), `id`) ``:
//!   a duplicate that is the candidate sets the register to 0 (the next
//!   generated row becomes the candidate), or, for the last row, to its
//!   existing row's id as updated. A stored candidate is never touched
//!   again; duplicates with explicit ids (all below the first generated id:
//!   they are observed before ids are taken) never touch it, except an
//!   explicit last row when the register is 0 (`OR VALUES(id) = <last> AND
//!   LAST_INSERT_ID() = 0`: its existing row's id, as MariaDB reports). The
//!   assignment writes the id column back unchanged, so affected rows,
//!   `Duplicates` and warnings are MariaDB's own.
//! - With one row, the append is
//!   `` `id` = IF(VALUES(`id`) >= <first id>, IF(LAST_INSERT_ID(`id`), `id`, `id`), `id`) ``.
//!
//! Side effects are always in an IF's condition: MariaDB folds `x IS NULL`
//! of a NOT NULL `x` to false without evaluating `x`.
//!
//! The OK packet's last_insert_id then is one of this statement's ids (the
//! first stored one: the register already holds what `LAST_INSERT_ID()`
//! must return) or an existing row's id (no generated row stored: idgate
//! reports it when a row was updated, else 0, and restores the saved value
//! with `DO LAST_INSERT_ID(@idgate_lid)`; `DO` keeps the warnings).
//!
//! A multi-row INSERT IGNORE has no per-row hook: it gets
//! `` RETURNING `id` `` ([`Report::Returning`]), and idgate turns the rows
//! (the stored ones) back into MariaDB's OK packet: affected rows = rows
//! returned, `Records: n  Duplicates: n - stored  Warnings: w`, the
//! terminator's warnings and status.

use super::lexer::{Kind, Lexer, Modes};
use super::shape::{Body, ValueClass};

/// The session variable the first generated id saves `LAST_INSERT_ID()` in.
pub const SAVED: &str = "@idgate_lid";

/// The session variable that names the statement that saved it (its first
/// generated id).
pub const SAVER: &str = "@idgate_at";

/// What the shards support (MariaDB: tracking; 10.5 and later: RETURNING).
/// MySQL warns about `VALUES()` and assignments in expressions, so there
/// these statements keep [`Report::Plain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Upserts {
    /// [`Report::Track`] may be used.
    pub track: bool,
    /// [`Report::Returning`] may be used.
    pub returning: bool,
}

impl Upserts {
    /// What a server with this handshake version string supports
    /// (`5.5.5-10.11.19-MariaDB...`, `8.0.36`).
    pub fn for_version(version: &str) -> Upserts {
        if !version.contains("MariaDB") {
            return Upserts::default();
        }
        let v = version.strip_prefix("5.5.5-").unwrap_or(version);
        let mut parts = v.split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        Upserts {
            track: true,
            returning: (major, minor) >= (10, 5),
        }
    }
}

/// How a statement's generated ids are written and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The first generated id is `LAST_INSERT_ID(<id>)`: the shard reports
    /// it (every row goes in: plain INSERT/REPLACE).
    Wrap,
    /// Every id plain; idgate reports the first generated id when the OK
    /// packet shows rows went in (statements that use `LAST_INSERT_ID`
    /// themselves, or upserts that cannot be tracked).
    Plain,
    /// IGNORE / ON DUPLICATE KEY UPDATE, tracked (module doc).
    Track,
    /// A multi-row INSERT IGNORE, tracked and with `` RETURNING `id` ``.
    Returning,
}

/// The last row's id column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastRow {
    /// A slot (global index): generated (prepared: maybe, at execute).
    Slot(usize),
    /// An explicit integer id.
    Explicit(u64),
    /// Anything else.
    Other,
}

/// Where an INSERT IGNORE / ON DUPLICATE KEY UPDATE is written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upsert {
    /// `INSERT IGNORE`.
    pub ignore: bool,
    /// Just past `ON DUPLICATE KEY UPDATE`: where its assignments start.
    pub odku_start: Option<usize>,
    /// Just past the last `ON DUPLICATE KEY UPDATE` assignment: where idgate
    /// appends its own.
    pub odku_end: Option<usize>,
    /// The statement has a RETURNING clause of its own.
    pub returning: bool,
    /// A row alias (`VALUES (...) AS new`, MySQL 8 syntax, an error on
    /// MariaDB) before the update list.
    pub alias: bool,
    /// A `LAST_INSERT_ID(expr)` in the rows (not only in the update list).
    pub rows_set_last_insert_id: bool,
    /// Just past the statement's last token (where `RETURNING` is appended,
    /// before trailing comments).
    pub end: usize,
    /// Rows inserted (VALUES rows; 1 for `SET`).
    pub rows: usize,
    /// The last row's id.
    pub last: LastRow,
}

impl Upsert {
    /// An update on duplicates or ignored rows: the OK packet alone does not
    /// tell which id to report.
    pub fn conditional(&self) -> bool {
        self.ignore || self.odku_end.is_some()
    }

    /// Later generated ids take part in the candidate register (module doc).
    pub(crate) fn chained(&self, rows: usize) -> bool {
        self.odku_end.is_some() && rows > 1
    }
}

/// Scans the statement `range` for the clauses after its rows: `body` is
/// what the parser found, `slot_of_last` the slot of the last row's id if
/// it has one.
pub(crate) fn analyze(
    sql: &str,
    range: std::ops::Range<usize>,
    modes: Modes,
    body: &Body,
    ignore: bool,
    slot_of_last: Option<usize>,
) -> Upsert {
    let (body_end, rows, last_value) = match body {
        Body::Values(rows) => (
            rows.last().map_or(range.start, |r| r.close + 1),
            rows.len(),
            rows.last().and_then(|r| r.id),
        ),
        Body::Set { id, end } => (*end, 1, *id),
    };
    let last = match (slot_of_last, last_value.map(|v| v.class)) {
        (Some(s), _) => LastRow::Slot(s),
        (None, Some(ValueClass::Int(v))) => LastRow::Explicit(v),
        _ => LastRow::Other,
    };
    let rows_set_last_insert_id = sets_last_insert_id(sql, range.start, body_end, modes);
    let mut lx = Lexer::new(sql, body_end, modes);
    let mut depth = 0usize;
    let mut end = body_end;
    let mut odku_start = None;
    let mut returning_at = None;
    let mut before_returning = body_end;
    let mut alias = false;
    let mut recent: [Option<super::lexer::Token>; 3] = [None; 3];
    while let Some(t) = lx.next_token() {
        if t.start >= range.end || t.kind == Kind::Unterminated {
            break;
        }
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && returning_at.is_none() {
            alias |= odku_start.is_none() && t.is_word(sql, "AS");
            if t.is_word(sql, "RETURNING") {
                returning_at = Some(t.start);
                before_returning = end;
            } else if odku_start.is_none()
                && t.is_word(sql, "UPDATE")
                && matches!(recent, [Some(a), Some(b), Some(c)]
                    if a.is_word(sql, "ON") && b.is_word(sql, "DUPLICATE") && c.is_word(sql, "KEY"))
            {
                odku_start = Some(t.end);
            }
        }
        recent = [recent[1], recent[2], Some(t)];
        end = t.end;
    }
    let odku_end = odku_start.map(|_| match returning_at {
        Some(_) => before_returning,
        None => end,
    });
    Upsert {
        ignore,
        odku_start,
        odku_end,
        returning: returning_at.is_some(),
        alias,
        rows_set_last_insert_id,
        end,
        rows,
        last,
    }
}

/// The values assigned to the id column `column` in the update list
/// `sql[from..to]` (`id = <value>`, `t.id = <value>`), as byte ranges,
/// except `VALUES(id)` (the inserted value, observed as such).
pub(crate) fn id_assignments(
    sql: &str,
    from: usize,
    to: usize,
    modes: Modes,
    column: &str,
) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut lx = Lexer::new(sql, from, modes);
    // Tokens of the current assignment at depth 0: the name's last part,
    // then whether `=` was seen and where the value starts.
    let mut depth = 0usize;
    let mut target: Option<super::lexer::Token> = None;
    let mut value: Option<(usize, usize, usize)> = None; // (start, end, tokens)
    let mut words: Vec<super::lexer::Token> = Vec::new();
    let finish = |target: Option<super::lexer::Token>,
                  value: Option<(usize, usize, usize)>,
                  words: &[super::lexer::Token],
                  out: &mut Vec<std::ops::Range<usize>>| {
        let (Some(t), Some((a, b, n))) = (target, value) else {
            return;
        };
        if !super::fast::ident(sql, &t).is_some_and(|c| super::shape::same_column(&c, column)) {
            return;
        }
        // `VALUES(id)` / `VALUE(id)`: the row's own value;
        // `LAST_INSERT_ID(id)`: the id the row has (the idiom that reports it).
        let is_values = n == 4
            && words.first().is_some_and(|w| {
                w.is_word(sql, "VALUES")
                    || w.is_word(sql, "VALUE")
                    || w.is_word(sql, "LAST_INSERT_ID")
            })
            && words
                .get(2)
                .and_then(|w| super::fast::ident(sql, w))
                .is_some_and(|c| super::shape::same_column(&c, column));
        if !is_values {
            out.push(a..b);
        }
    };
    while let Some(t) = lx.next_token() {
        if t.start >= to || t.kind == Kind::Unterminated {
            break;
        }
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && t.is(b',') {
            finish(target, value, &words, &mut out);
            target = None;
            value = None;
            words.clear();
            continue;
        }
        match value.as_mut() {
            Some(v) => {
                v.1 = t.end;
                v.2 += 1;
                words.push(t);
            }
            None if depth == 0 && t.is(b'=') => value = Some((usize::MAX, 0, 0)),
            None if !t.is(b'.') => target = Some(t),
            None => {}
        }
        if let Some(v) = value.as_mut() {
            if v.0 == usize::MAX && !t.is(b'=') {
                v.0 = t.start;
            }
        }
    }
    finish(
        target,
        value.filter(|v| v.0 != usize::MAX),
        &words,
        &mut out,
    );
    out
}

/// Whether `sql[from..to]` has a `LAST_INSERT_ID(expr)`.
fn sets_last_insert_id(sql: &str, from: usize, to: usize, modes: Modes) -> bool {
    let mut lx = Lexer::new(sql, from, modes);
    let mut recent: [Option<super::lexer::Token>; 2] = [None; 2];
    while let Some(t) = lx.next_token() {
        if t.start >= to || t.kind == Kind::Unterminated {
            break;
        }
        if let [Some(a), Some(b)] = recent {
            if a.is_word(sql, "LAST_INSERT_ID") && b.is(b'(') && !t.is(b')') {
                return true;
            }
        }
        recent = [recent[1], Some(t)];
    }
    false
}

/// How one generated id of a tracked statement is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdForm {
    /// `<id>`.
    Plain,
    /// `LAST_INSERT_ID(<id>)`.
    Wrap,
    /// Saves the session's value, then `LAST_INSERT_ID(<id>)` (the first
    /// generated id of a tracked statement).
    Save,
    /// `IF(LAST_INSERT_ID() = 0, LAST_INSERT_ID(<id>), <id>)`.
    Chain,
}

/// Writes `v` (an id literal, or `?`) in `form`.
pub(crate) fn push_id(out: &mut String, form: IdForm, v: &str) {
    match form {
        IdForm::Plain => out.push_str(v),
        IdForm::Wrap => {
            out.push_str("LAST_INSERT_ID(");
            out.push_str(v);
            out.push(')');
        }
        IdForm::Save => {
            // The assignments are IF's condition: evaluated whatever its
            // value (an `IS NULL` test of one would be folded away, the
            // variable never set).
            out.push_str("LAST_INSERT_ID(IF((");
            out.push_str(SAVED);
            out.push_str(" := LAST_INSERT_ID()) = (");
            out.push_str(SAVER);
            out.push_str(" := ");
            out.push_str(v);
            out.push_str("), ");
            out.push_str(v);
            out.push_str(", ");
            out.push_str(v);
            out.push_str("))");
        }
        IdForm::Chain => {
            out.push_str("IF(LAST_INSERT_ID() = 0, LAST_INSERT_ID(");
            out.push_str(v);
            out.push_str("), ");
            out.push_str(v);
            out.push(')');
        }
    }
}

/// The assignment appended to `ON DUPLICATE KEY UPDATE` for a statement of
/// `rows` rows. `first` is its first generated id (a literal, or `?`: `NULL`
/// when none is generated, and the assignment does nothing), `last` the
/// last row's id (a literal, `?` or `NULL`). It only acts on a duplicate
/// whose proposed id is a generated one (explicit ids are below `first`:
/// they are observed before ids are taken), and always writes the id column
/// back unchanged.
pub(crate) fn push_assignment(
    out: &mut String,
    column: &str,
    rows: usize,
    first: &str,
    last: &str,
) {
    let values = format!("VALUES({column})");
    out.push_str(", ");
    out.push_str(column);
    out.push_str(" = IF(");
    out.push_str(&values);
    out.push_str(" >= ");
    out.push_str(first);
    // `LAST_INSERT_ID(x)` as an IF's condition: always evaluated, and the
    // column written back whatever its value.
    if rows <= 1 {
        out.push_str(", IF(LAST_INSERT_ID(");
        out.push_str(column);
        out.push(')');
    } else {
        out.push_str(" AND LAST_INSERT_ID() = ");
        out.push_str(&values);
        // An explicit last row that is a duplicate, no generated row
        // stored before it (register 0): its existing row's id too.
        out.push_str(" OR ");
        out.push_str(&values);
        out.push_str(" = ");
        out.push_str(last);
        out.push_str(" AND LAST_INSERT_ID() = 0");
        out.push_str(", IF(LAST_INSERT_ID(IF(");
        out.push_str(&values);
        out.push_str(" = ");
        out.push_str(last);
        out.push_str(", ");
        out.push_str(column);
        out.push_str(", 0))");
    }
    for _ in 0..2 {
        out.push_str(", ");
        out.push_str(column);
    }
    out.push_str("), ");
    out.push_str(column);
    out.push(')');
}

/// ` RETURNING <column>`.
pub(crate) fn push_returning(out: &mut String, column: &str) {
    out.push_str(" RETURNING ");
    out.push_str(column);
}

/// `DO LAST_INSERT_ID(@idgate_lid)`: gives the session back the value the
/// statement saved (a COM_QUERY payload). After a statement that failed,
/// `failed` is its first generated id: the value is given back only if the
/// statement got as far as saving it (`@idgate_at` names the statement
/// that saved last); one that failed earlier left the session's value
/// alone, and the variables may be an older statement's.
pub fn restore_command(failed: Option<u64>) -> Vec<u8> {
    let mut q = String::from("\x03DO LAST_INSERT_ID(");
    match failed {
        None => q.push_str(SAVED),
        Some(first) => {
            q.push_str("IF(");
            q.push_str(SAVER);
            q.push_str(" = ");
            super::digits::push_u64(&mut q, first);
            q.push_str(", ");
            q.push_str(SAVED);
            q.push_str(", LAST_INSERT_ID())");
        }
    }
    q.push(')');
    q.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let m = Upserts::for_version("5.5.5-10.11.19-MariaDB-0+deb12u1");
        assert!(m.track && m.returning);
        let old = Upserts::for_version("5.5.5-10.4.33-MariaDB");
        assert!(old.track && !old.returning);
        assert_eq!(Upserts::for_version("8.0.36"), Upserts::default());
    }

    #[test]
    fn restore() {
        assert_eq!(restore_command(None), b"\x03DO LAST_INSERT_ID(@idgate_lid)");
        assert_eq!(
            restore_command(Some(5)),
            b"\x03DO LAST_INSERT_ID(IF(@idgate_at = 5, @idgate_lid, LAST_INSERT_ID()))"
        );
    }

    #[test]
    fn forms() {
        let mut s = String::new();
        push_id(&mut s, IdForm::Save, "7");
        assert_eq!(
            s,
            "LAST_INSERT_ID(IF((@idgate_lid := LAST_INSERT_ID()) = (@idgate_at := 7), 7, 7))"
        );
        s.clear();
        push_id(&mut s, IdForm::Chain, "?");
        assert_eq!(s, "IF(LAST_INSERT_ID() = 0, LAST_INSERT_ID(?), ?)");
        s.clear();
        push_assignment(&mut s, "`id`", 1, "9", "9");
        assert_eq!(
            s,
            ", `id` = IF(VALUES(`id`) >= 9, IF(LAST_INSERT_ID(`id`), `id`, `id`), `id`)"
        );
        s.clear();
        push_assignment(&mut s, "`id`", 2, "8", "9");
        assert_eq!(
            s,
            ", `id` = IF(VALUES(`id`) >= 8 AND LAST_INSERT_ID() = VALUES(`id`) OR VALUES(`id`) = 9 AND LAST_INSERT_ID() = 0, IF(LAST_INSERT_ID(IF(VALUES(`id`) = 9, `id`, 0)), `id`, `id`), `id`)"
        );
    }
}
