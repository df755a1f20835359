//! Sequence functions on idgate's generators: `NEXTVAL(idgate.g)`, `NEXT
//! VALUE FOR idgate.g`, `LASTVAL(idgate.g)`, `PREVIOUS VALUE FOR idgate.g`,
//! `SETVAL(idgate.g, n [, is_used [, round]])`, recognised in a statement's
//! text; `frontend::sequence` answers them. Pure.
//!
//! The `idgate` schema names generators: only calls qualified with it (any
//! case, backquoted or not) are idgate's; `NEXTVAL(shop.s)` is a MariaDB
//! sequence on the shard and passes through untouched.
//!
//! Cost: [`may_have`] is the check every statement pays, a case-insensitive
//! search for `idgate` as a qualifier (`idgate.`, `` `idgate`. ``) driven by
//! `memchr2` on its rarer letter `g`, then one for `val`/`value`. Only a
//! statement that has both is tokenized ([`find`], at most [`MAX_TOKENS`]).
//!
//! Placement rules ([`find`] refuses what idgate cannot evaluate as
//! MariaDB would): idgate takes every value before the statement is sent
//! and writes it into the text as a literal, once per call. MariaDB
//! evaluates `NEXTVAL` once per call *per row*, so a call that taking once
//! would answer differently is refused (error 1235): `NEXTVAL`/`SETVAL` in
//! a SELECT with a `FROM` (other than `FROM DUAL`), in `INSERT ... SELECT`,
//! in UPDATE and DELETE, and any call in another kind of statement (DDL
//! defaults, `WITH`, ...). `LASTVAL` is the same for every row and is
//! allowed in SELECT/UPDATE/DELETE with `FROM`/`WHERE`.

use crate::sql::lexer::{is_ident_byte, Kind as Tok, Lexer, Modes, Token};

/// What a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `NEXTVAL(idgate.g)` / `NEXT VALUE FOR idgate.g`: a fresh id.
    Next,
    /// `LASTVAL(idgate.g)` / `PREVIOUS VALUE FOR idgate.g`: the last id
    /// `Next` gave this session, NULL before any.
    Last,
    /// `SETVAL(idgate.g, n [, is_used [, 0]])`: no id at or below `floor`
    /// is issued afterwards (`IDGATE SET FLOOR g floor`); the call's value
    /// is `value` (`n`), as MariaDB's SETVAL returns the value it set.
    Set {
        /// The `n` written.
        value: u64,
        /// `n` when `is_used` (the default), else `n - 1`.
        floor: u64,
    },
}

/// One call, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Byte offset of its first byte in the statement.
    pub start: usize,
    /// Byte offset just past it (the closing `)`, or the generator's name).
    pub end: usize,
    /// What it does.
    pub op: Op,
    /// The generator's name as written, unquoted.
    pub generator: String,
    /// A whole select-list item without an alias (`SELECT NEXTVAL(idgate.g),
    /// NOW()`): its value is written ``v AS `<call text>` ``, so the column
    /// keeps the name MariaDB gives it.
    pub named: bool,
}

/// The calls of a statement (in text order) and its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sequences {
    /// Every call, in text order (the order they are evaluated in).
    pub calls: Vec<Call>,
    /// The whole text is one `SELECT call [AS alias], call ... [FROM DUAL]`:
    /// idgate answers it without a shard, with MariaDB's column types.
    /// `Some(names)`: the column names (each alias, or the call's text).
    pub select_only: Option<Vec<String>>,
}

/// Why a statement's calls are refused (error 1235, or 1210 for SETVAL's
/// arguments).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    /// A call where idgate cannot evaluate it as MariaDB does.
    #[error("idgate: {0}")]
    Placement(String),
    /// SETVAL's arguments.
    #[error("idgate: {0}")]
    Arguments(String),
}

/// Whether `sql` may contain a call on an idgate generator: it mentions
/// `idgate` and `val` (`NEXTVAL`, `LASTVAL`, `SETVAL`, `VALUE FOR`). The
/// cheap check every statement pays.
#[inline]
pub fn may_have(sql: &[u8]) -> bool {
    has_idgate(sql) && super::keyword::contains_ignore_case(sql, b"val")
}

/// `idgate` as a qualifier: the word (not inside a longer name such as
/// `idgate_log`), then an optional closing quote, spaces, and `.`.
fn has_idgate(sql: &[u8]) -> bool {
    // `g` is rarer in SQL text than `i`: scan for it, then look around.
    memchr::memchr2_iter(b'g', b'G', sql).any(|i| {
        i >= 2
            && sql
                .get(i - 2..i + 4)
                .is_some_and(|w| w.eq_ignore_ascii_case(b"idgate"))
            && !(i > 2 && sql.get(i - 3).is_some_and(|&b| is_ident_byte(b)))
            && {
                let mut k = i + 4;
                if matches!(sql.get(k), Some(b'`' | b'"')) {
                    k += 1;
                }
                while sql.get(k).is_some_and(u8::is_ascii_whitespace) {
                    k += 1;
                }
                sql.get(k) == Some(&b'.')
            }
    })
}

/// Most tokens [`find`] holds for one text: a statement with calls that
/// is longer is refused rather than tokenized into memory (24 bytes a
/// token): 4 Mi tokens, 96 MiB at most. A 100,000-row INSERT with a call
/// in each row is about 1 Mi.
pub const MAX_TOKENS: usize = 4 << 20;

/// The calls on idgate generators in `sql`: `Ok(None)` when there are none
/// (the statement is not idgate's business).
///
/// Errors: a call placed where it would be evaluated per row, or in a
/// statement kind idgate does not evaluate them in; SETVAL arguments it
/// cannot take (see the module doc).
pub fn find(sql: &str, modes: Modes) -> Result<Option<Sequences>, SequenceError> {
    let mut lexer = Lexer::new(sql, 0, modes);
    let mut toks = Vec::new();
    while let Some(t) = lexer.next_token() {
        if t.kind == Tok::Unterminated {
            break;
        }
        if toks.len() == MAX_TOKENS {
            return Err(SequenceError::Placement(format!(
                "a statement of more than {MAX_TOKENS} tokens that may call a sequence function on an idgate generator (it names `idgate.`): split it"
            )));
        }
        toks.push(t);
    }
    let mut calls = Vec::new();
    // Per statement of a multi-statement text: where it starts (a token
    // index) and which calls are in it.
    let mut i = 0;
    let mut stmt_start = 0;
    let mut stmts: Vec<(usize, usize, usize, usize)> = Vec::new(); // (tok from, tok to, call from, call to)
    let mut first_call = 0;
    while i < toks.len() {
        if toks[i].is(b';') {
            stmts.push((stmt_start, i, first_call, calls.len()));
            stmt_start = i + 1;
            first_call = calls.len();
            i += 1;
            continue;
        }
        match call_at(sql, &toks, i)? {
            Some((call, next)) => {
                calls.push(call);
                i = next;
            }
            None => i += 1,
        }
    }
    stmts.push((stmt_start, toks.len(), first_call, calls.len()));
    if calls.is_empty() {
        return Ok(None);
    }
    for &(from, to, c0, c1) in &stmts {
        if c0 < c1 {
            check_placement(sql, &toks[from..to], &calls[c0..c1])?;
            mark_named(sql, &toks[from..to], &mut calls[c0..c1]);
        }
    }
    let select_only = match stmts.as_slice() {
        [(from, to, _, _)] => select_only(sql, &toks[*from..*to], &calls),
        // `SELECT ...;` with nothing after the `;`.
        [(from, to, _, _), (_, _, c0, c1)] if c0 == c1 && *to + 1 == toks.len() => {
            select_only(sql, &toks[*from..*to], &calls)
        }
        _ => None,
    };
    Ok(Some(Sequences { calls, select_only }))
}

/// Marks the calls of a SELECT (`toks`: one statement) that are whole
/// select-list items without an alias: at paren depth 0, after `SELECT` or
/// `,`, before `,`, `FROM` or the end.
fn mark_named(sql: &str, toks: &[Token], calls: &mut [Call]) {
    if !toks.first().is_some_and(|t| word(sql, t, "select")) {
        return;
    }
    let mut depth = 0i32;
    let mut k = 0;
    let mut calls = calls.iter_mut().peekable();
    while let Some(t) = toks.get(k) {
        let Some(c) = calls.peek_mut() else {
            return;
        };
        if t.start == c.start {
            let before = k.checked_sub(1).and_then(|b| toks.get(b));
            let mut after = k;
            while toks.get(after).is_some_and(|a| a.end <= c.end) {
                after += 1;
            }
            let next = toks.get(after);
            // MariaDB takes aliases up to 256 characters.
            c.named = depth == 0
                && c.end - c.start <= 256
                && before.is_some_and(|b| b.is(b',') || word(sql, b, "select"))
                && next.is_none_or(|n| n.is(b',') || word(sql, n, "from"));
            calls.next();
            k = after;
            continue;
        }
        if t.is(b'(') {
            depth += 1;
        } else if t.is(b')') {
            depth -= 1;
        }
        k += 1;
    }
}

/// `sql` with each call replaced by its value (`None`: `NULL`), spliced
/// into the original text (everything else byte for byte); a
/// [`Call::named`] one keeps its text as the column name.
pub fn substitute(sql: &str, calls: &[Call], values: &[Option<u64>]) -> String {
    let mut out = String::with_capacity(sql.len() + 8 * calls.len());
    let mut at = 0;
    for (c, v) in calls.iter().zip(values) {
        out.push_str(&sql[at..c.start]);
        // Spaces around it: `1-NEXTVAL(...)` must not become `1-5` glued to
        // a neighbour such as `--`.
        match v {
            Some(v) => {
                out.push(' ');
                out.push_str(&v.to_string());
                out.push(' ');
            }
            None => out.push_str(" NULL "),
        }
        if c.named {
            out.push_str("AS `");
            out.push_str(&sql[c.start..c.end].replace('`', "``"));
            out.push_str("` ");
        }
        at = c.end;
    }
    out.push_str(&sql[at..]);
    out
}

fn word(sql: &str, t: &Token, kw: &str) -> bool {
    t.is_word(sql, kw)
}

/// An identifier's text, unquoted (`` `a``b` `` is ``a`b``).
fn ident(sql: &str, t: &Token) -> Option<String> {
    let text = sql.get(t.start..t.end)?;
    match t.kind {
        Tok::Word if !text.as_bytes().first()?.is_ascii_digit() => Some(text.to_string()),
        Tok::QuotedIdent => {
            let q = text.chars().next()?;
            let inner = text.get(1..text.len().checked_sub(1)?)?;
            Some(inner.replace(&format!("{q}{q}"), &q.to_string()))
        }
        _ => None,
    }
}

/// `idgate . name` at token `i`: the generator's name and the index after.
fn qualified(sql: &str, toks: &[Token], i: usize) -> Option<(String, usize)> {
    let schema = ident(sql, toks.get(i)?)?;
    if !schema.eq_ignore_ascii_case("idgate") || !toks.get(i + 1)?.is(b'.') {
        return None;
    }
    Some((ident(sql, toks.get(i + 2)?)?, i + 3))
}

/// The call starting at token `i`, if one does: it and the token after it.
fn call_at(sql: &str, toks: &[Token], i: usize) -> Result<Option<(Call, usize)>, SequenceError> {
    let t = &toks[i];
    if t.kind != Tok::Word || (i > 0 && toks[i - 1].is(b'.')) {
        return Ok(None);
    }
    let at = |k: usize| toks.get(k);
    let op_by_word = if word(sql, t, "nextval") {
        Some(Op::Next)
    } else if word(sql, t, "lastval") {
        Some(Op::Last)
    } else if word(sql, t, "setval") {
        Some(Op::Set { value: 0, floor: 0 })
    } else {
        None
    };
    if let Some(op) = op_by_word {
        if !at(i + 1).is_some_and(|p| p.is(b'(')) {
            return Ok(None);
        }
        let Some((generator, k)) = qualified(sql, toks, i + 2) else {
            return Ok(None);
        };
        let (op, k) = match op {
            Op::Set { .. } => match setval_args(sql, toks, k, &generator)? {
                Some(r) => r,
                None => return Ok(None),
            },
            op => (op, k),
        };
        let Some(close) = at(k).filter(|p| p.is(b')')) else {
            return Ok(None);
        };
        let call = Call {
            start: t.start,
            end: close.end,
            op,
            generator,
            named: false,
        };
        return Ok(Some((call, k + 1)));
    }
    let op = if word(sql, t, "next") {
        Op::Next
    } else if word(sql, t, "previous") {
        Op::Last
    } else {
        return Ok(None);
    };
    if !(at(i + 1).is_some_and(|w| word(sql, w, "value"))
        && at(i + 2).is_some_and(|w| word(sql, w, "for")))
    {
        return Ok(None);
    }
    let Some((generator, k)) = qualified(sql, toks, i + 3) else {
        return Ok(None);
    };
    let call = Call {
        start: t.start,
        end: toks[k - 1].end,
        op,
        generator,
        named: false,
    };
    Ok(Some((call, k)))
}

/// SETVAL's arguments after the generator: `, n [, is_used [, round]]`.
/// `None`: not a form idgate recognises as a call (left to the shard).
fn setval_args(
    sql: &str,
    toks: &[Token],
    mut k: usize,
    generator: &str,
) -> Result<Option<(Op, usize)>, SequenceError> {
    let bad = |why: &str| {
        SequenceError::Arguments(format!(
            "SETVAL(idgate.{generator}, ...): {why}; write SETVAL(idgate.{generator}, n) or SETVAL(idgate.{generator}, n, TRUE|FALSE): n a non-negative integer, the highest id not to issue (IDGATE SET FLOOR)"
        ))
    };
    if !toks.get(k).is_some_and(|t| t.is(b',')) {
        return Ok(None);
    }
    k += 1;
    let Some(n) = toks.get(k) else {
        return Ok(None);
    };
    let value = match n.kind {
        Tok::Number => sql[n.start..n.end].parse::<u64>().map_err(|_| {
            bad(&format!(
                "{:?} is not an integer of 64 bits",
                &sql[n.start..n.end]
            ))
        })?,
        Tok::Punct(b'-') => return Err(bad("idgate's generators issue no negative ids")),
        _ => return Err(bad("the value must be an integer literal")),
    };
    k += 1;
    let mut used = true;
    if toks.get(k).is_some_and(|t| t.is(b',')) {
        let Some(u) = toks.get(k + 1) else {
            return Ok(None);
        };
        used = match &sql[u.start..u.end] {
            s if s.eq_ignore_ascii_case("true") || s == "1" => true,
            s if s.eq_ignore_ascii_case("false") || s == "0" => false,
            other => return Err(bad(&format!("is_used {other:?} must be TRUE or FALSE"))),
        };
        k += 2;
        if toks.get(k).is_some_and(|t| t.is(b',')) {
            let round = toks.get(k + 1).map(|r| &sql[r.start..r.end]);
            if round != Some("0") {
                return Err(bad(
                    "idgate's generators have no rounds (cycles): the round must be 0",
                ));
            }
            k += 2;
        }
    }
    let floor = if used { value } else { value.saturating_sub(1) };
    Ok(Some((Op::Set { value, floor }, k)))
}

/// Refuses calls MariaDB would evaluate per row, and calls in statement
/// kinds idgate does not evaluate them in (see the module doc).
fn check_placement(sql: &str, toks: &[Token], calls: &[Call]) -> Result<(), SequenceError> {
    let inside = |t: &Token| calls.iter().any(|c| t.start >= c.start && t.end <= c.end);
    let Some(first) = toks.first() else {
        return Ok(());
    };
    let kw = sql[first.start..first.end].to_ascii_uppercase();
    let per_row_calls = calls.iter().find(|c| c.op != Op::Last);
    let text = |c: &Call| sql[c.start..c.end].to_string();
    // A `FROM` that is not `FROM DUAL`, a `SELECT`/`TABLE` after the first
    // word (INSERT ... SELECT, a subquery), outside the calls themselves.
    let has_from = toks.iter().enumerate().any(|(i, t)| {
        !inside(t) && word(sql, t, "from") && !toks.get(i + 1).is_some_and(|n| word(sql, n, "dual"))
    });
    let has_select = toks
        .iter()
        .skip(1)
        .any(|t| !inside(t) && (word(sql, t, "select") || word(sql, t, "table")));
    let per_row = match kw.as_str() {
        "SELECT" => has_from,
        "INSERT" | "REPLACE" => has_select,
        "SET" | "DO" | "CALL" => has_from,
        "UPDATE" | "DELETE" => true,
        _ => {
            let first = calls.first().map(text).unwrap_or_default();
            return Err(SequenceError::Placement(format!(
                "{first} in a {kw} statement: idgate evaluates calls on its generators (the `idgate` schema) in SELECT, INSERT, REPLACE, SET, DO, CALL, and LASTVAL also in UPDATE and DELETE"
            )));
        }
    };
    if let (true, Some(c)) = (per_row, per_row_calls) {
        return Err(SequenceError::Placement(format!(
            "{} in a {kw} that reads rows: MariaDB evaluates it once per row, idgate takes one value per call before sending the statement; use it in INSERT ... VALUES, or in a SELECT without FROM",
            text(c)
        )));
    }
    Ok(())
}

/// The column names when `toks` (one statement) is `SELECT item, ...
/// [FROM DUAL]` and every item is a call, with an optional alias.
fn select_only(sql: &str, toks: &[Token], calls: &[Call]) -> Option<Vec<String>> {
    if !toks.first().is_some_and(|t| word(sql, t, "select")) {
        return None;
    }
    let mut names = Vec::new();
    let mut k = 1;
    let mut calls = calls.iter();
    loop {
        let c = calls.next()?;
        if toks.get(k)?.start != c.start {
            return None;
        }
        while toks.get(k).is_some_and(|t| t.end <= c.end) {
            k += 1;
        }
        let mut name = sql[c.start..c.end].to_string();
        let mut alias = |k: &mut usize| -> Option<()> {
            let t = toks.get(*k)?;
            name = ident(sql, t).or_else(|| {
                (t.kind == Tok::Str)
                    .then(|| sql.get(t.start + 1..t.end.checked_sub(1)?))
                    .flatten()
                    .map(str::to_string)
            })?;
            *k += 1;
            Some(())
        };
        match toks.get(k) {
            Some(t) if word(sql, t, "as") => {
                k += 1;
                alias(&mut k)?;
            }
            Some(t)
                if (t.kind == Tok::Word || t.kind == Tok::QuotedIdent || t.kind == Tok::Str)
                    && !word(sql, t, "from") =>
            {
                alias(&mut k)?;
            }
            _ => {}
        }
        names.push(name);
        match toks.get(k) {
            None => break,
            Some(t) if t.is(b',') => k += 1,
            Some(t) if word(sql, t, "from") => {
                if !toks.get(k + 1).is_some_and(|d| word(sql, d, "dual")) || toks.len() != k + 2 {
                    return None;
                }
                break;
            }
            _ => return None,
        }
    }
    calls.next().is_none().then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(sql: &str) -> Vec<(Op, String, String)> {
        find(sql, Modes::default())
            .unwrap()
            .map(|s| {
                s.calls
                    .into_iter()
                    .map(|c| (c.op, c.generator, sql[c.start..c.end].to_string()))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn the_cheap_check() {
        assert!(may_have(b"SELECT NEXTVAL(idgate.orders)"));
        assert!(may_have(b"select next value for `IDGATE`.o"));
        assert!(!may_have(b"SELECT NEXTVAL(shop.s)"));
        assert!(!may_have(b"INSERT INTO t (id) VALUES (1)"));
        assert!(!may_have(b"SELECT * FROM idgate_users"));
        assert!(!may_have(b"gate"));
        assert!(!may_have(b"INSERT INTO idgate_users VALUES (1)"));
        assert!(!may_have(b"INSERT INTO my_idgate.t VALUES (1)"));
        assert!(may_have(b"SELECT NEXTVAL(`idgate` . `o`)"));
        assert!(may_have(b"SELECT NEXTVAL(\"IDGATE\".o)"));
        assert!(may_have(b"INSERT INTO idgate.t VALUES (1)"));
    }

    #[test]
    fn every_spelling() {
        assert_eq!(
            calls("SELECT NEXTVAL(idgate.orders), nextval( `idgate` . `orders` ), NEXT VALUE FOR IDGATE.ORDERS"),
            vec![
                (Op::Next, "orders".into(), "NEXTVAL(idgate.orders)".into()),
                (Op::Next, "orders".into(), "nextval( `idgate` . `orders` )".into()),
                (Op::Next, "ORDERS".into(), "NEXT VALUE FOR IDGATE.ORDERS".into()),
            ]
        );
        assert_eq!(
            calls("select lastval(idgate.o), previous value for idgate.`a``b`"),
            vec![
                (Op::Last, "o".into(), "lastval(idgate.o)".into()),
                (
                    Op::Last,
                    "a`b".into(),
                    "previous value for idgate.`a``b`".into()
                ),
            ]
        );
        assert_eq!(
            calls("SELECT SETVAL(idgate.o, 1000), setval(idgate.o, 50, false), SETVAL(idgate.o, 7, TRUE, 0)"),
            vec![
                (Op::Set { value: 1000, floor: 1000 }, "o".into(), "SETVAL(idgate.o, 1000)".into()),
                (Op::Set { value: 50, floor: 49 }, "o".into(), "setval(idgate.o, 50, false)".into()),
                (Op::Set { value: 7, floor: 7 }, "o".into(), "SETVAL(idgate.o, 7, TRUE, 0)".into()),
            ]
        );
        let ansi = Modes {
            ansi_quotes: true,
            ..Modes::default()
        };
        let s = find("SELECT NEXTVAL(\"idgate\".\"orders\")", ansi)
            .unwrap()
            .unwrap();
        assert_eq!(s.calls[0].generator, "orders");
    }

    #[test]
    fn what_is_not_a_call() {
        for sql in [
            "SELECT NEXTVAL(shop.s)",
            "SELECT 'NEXTVAL(idgate.orders)'",
            "SELECT 1 /* NEXTVAL(idgate.orders) */",
            "SELECT t.nextval(idgate.o)",
            "SELECT NEXTVAL(idgate)",
            "SELECT NEXT VALUE FOR s",
            "SELECT idgate.nextval FROM idgate",
            "INSERT INTO idgate_users VALUES (1)",
        ] {
            assert_eq!(calls(sql), vec![], "{sql}");
        }
        // Inside an executable comment the call is code.
        assert_eq!(calls("SELECT /*! NEXTVAL(idgate.o) */").len(), 1);
    }

    #[test]
    fn select_only_and_its_names() {
        let names = |sql: &str| find(sql, Modes::default()).unwrap().unwrap().select_only;
        assert_eq!(
            names("SELECT NEXTVAL(idgate.orders)"),
            Some(vec!["NEXTVAL(idgate.orders)".into()])
        );
        assert_eq!(
            names("select nextval(idgate.a) as x, lastval(idgate.a) `y`, next value for idgate.a 'z' from dual;"),
            Some(vec!["x".into(), "y".into(), "z".into()])
        );
        assert_eq!(names("SELECT NEXTVAL(idgate.a) + 1"), None);
        assert_eq!(names("SELECT NEXTVAL(idgate.a), 2"), None);
        assert_eq!(names("SELECT NEXTVAL(idgate.a); SELECT 1"), None);
        assert_eq!(names("INSERT INTO t VALUES (NEXTVAL(idgate.a))"), None);
    }

    #[test]
    fn placement() {
        let refused = |sql: &str| {
            matches!(
                find(sql, Modes::default()),
                Err(SequenceError::Placement(_))
            )
        };
        for sql in [
            "SELECT NEXTVAL(idgate.o) FROM t",
            "SELECT (SELECT NEXTVAL(idgate.o) FROM t)",
            "INSERT INTO t (id) SELECT NEXTVAL(idgate.o) FROM u",
            "UPDATE t SET id = NEXTVAL(idgate.o)",
            "DELETE FROM t WHERE id = SETVAL(idgate.o, 5)",
            "CREATE TABLE t (id BIGINT DEFAULT NEXTVAL(idgate.o))",
            "SELECT 1; SELECT NEXTVAL(idgate.o) FROM t",
        ] {
            assert!(refused(sql), "{sql}");
        }
        for sql in [
            "SELECT NEXTVAL(idgate.o) FROM DUAL",
            "SELECT LASTVAL(idgate.o) FROM t WHERE id = LASTVAL(idgate.o)",
            "UPDATE t SET x = 1 WHERE id = PREVIOUS VALUE FOR idgate.o",
            "INSERT INTO t (id, x) VALUES (NEXTVAL(idgate.o), 1), (NEXTVAL(idgate.o), 2)",
            "SET @a = NEXTVAL(idgate.o)",
            "SELECT * FROM t; SELECT NEXTVAL(idgate.o)",
        ] {
            assert!(find(sql, Modes::default()).unwrap().is_some(), "{sql}");
        }
        assert!(matches!(
            find("SELECT SETVAL(idgate.o, -5)", Modes::default()),
            Err(SequenceError::Arguments(_))
        ));
        assert!(matches!(
            find("SELECT SETVAL(idgate.o, 5, TRUE, 2)", Modes::default()),
            Err(SequenceError::Arguments(_))
        ));
    }

    #[test]
    fn whole_select_items_keep_their_name() {
        let sub = |sql: &str| {
            let s = find(sql, Modes::default()).unwrap().unwrap();
            let v: Vec<Option<u64>> = s.calls.iter().map(|_| Some(5)).collect();
            substitute(sql, &s.calls, &v)
        };
        assert_eq!(
            sub("SELECT NEXTVAL(idgate.o), NOW(); SELECT 1"),
            "SELECT  5 AS `NEXTVAL(idgate.o)` , NOW(); SELECT 1"
        );
        assert_eq!(
            sub("SELECT 1, NEXTVAL(idgate.`o`)"),
            "SELECT 1,  5 AS `NEXTVAL(idgate.``o``)` "
        );
        assert_eq!(sub("SELECT NEXTVAL(idgate.o) + 1"), "SELECT  5  + 1");
        assert_eq!(sub("SELECT NEXTVAL(idgate.o) x, 2"), "SELECT  5  x, 2");
        assert_eq!(
            sub("SELECT ABS(NEXTVAL(idgate.o)), 2"),
            "SELECT ABS( 5 ), 2"
        );
        assert_eq!(
            sub("INSERT INTO t VALUES (NEXTVAL(idgate.o))"),
            "INSERT INTO t VALUES ( 5 )"
        );
    }

    #[test]
    fn substitution_keeps_the_rest() {
        let sql = "INSERT INTO t (id, x) VALUES (NEXTVAL(idgate.o), 'NEXTVAL(idgate.o)'), (LASTVAL(idgate.o),2)";
        let s = find(sql, Modes::default()).unwrap().unwrap();
        assert_eq!(
            substitute(sql, &s.calls, &[Some(17), None]),
            "INSERT INTO t (id, x) VALUES ( 17 , 'NEXTVAL(idgate.o)'), ( NULL ,2)"
        );
    }

    proptest::proptest! {
        /// Whatever the text, recognising never panics, and every call it
        /// finds is within the text and in order.
        #[test]
        fn never_panics(s in "(?i)(select|insert|nextval|setval|lastval|next|value|for|previous|idgate|\\.|`|\\(|\\)|,|;|'|\"|-|5|from|dual| |as|x)*") {
            if let Ok(Some(found)) = find(&s, Modes::default()) {
                let mut at = 0;
                for c in &found.calls {
                    proptest::prop_assert!(c.start >= at && c.end <= s.len() && c.start < c.end);
                    at = c.end;
                }
            }
        }
    }
}
