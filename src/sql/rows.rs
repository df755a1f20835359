//! Rows of an INSERT into a sharded table: where each row's text is and what
//! decides its shard, so the session can send each row to its shard and
//! split a multi-row INSERT into one INSERT per shard, each built from the
//! original row texts.

use super::edit::{Edit, EditKind};
use super::lexer::{Kind, Lexer, Modes, Token};
use super::route::{key_literal, KeyArg};
use super::shape::{same_column, Body, ValueClass};

/// What decides a row's shard when the shard key is the id column (a table
/// sharded by another column uses [`key_args`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKey {
    /// A generated id: the global slot it takes.
    Generated(usize),
    /// An explicit integer id.
    Explicit(u64),
    /// An expression or another literal: idgate cannot tell the shard.
    Unknown,
}

/// One row of a routed INSERT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSpan {
    /// Offset of the row's `(` (for `INSERT ... SET`: the statement's start).
    pub open: usize,
    /// Offset of the row's `)` (for `INSERT ... SET`: the statement's end).
    pub close: usize,
    /// What decides its shard.
    pub key: RowKey,
}

/// The rows of one planned INSERT, `None` when a row's `(` cannot be found
/// (the caller then refuses to split the statement).
pub(crate) fn spans(
    sql: &str,
    range: std::ops::Range<usize>,
    modes: Modes,
    body: &Body,
    edits: &[Edit],
) -> Option<Vec<RowSpan>> {
    let mut out = locate(sql, range, modes, body)?;
    set_keys(&mut out, body, edits);
    Some(out)
}

/// Sets each row's [`RowKey`] (its id) from the planned `edits`.
pub(crate) fn set_keys(spans: &mut [RowSpan], body: &Body, edits: &[Edit]) {
    let slot_in = |from: usize, to: usize| {
        edits.iter().find_map(|e| match e.kind {
            EditKind::Id { slot, .. } if e.start >= from && e.start <= to => Some(slot),
            _ => None,
        })
    };
    let key_of = |slot: Option<usize>, class: Option<ValueClass>| match (slot, class) {
        (Some(s), _) => RowKey::Generated(s),
        (None, Some(ValueClass::Int(v))) => RowKey::Explicit(v),
        _ => RowKey::Unknown,
    };
    let ids: &mut dyn Iterator<Item = Option<ValueClass>> = match body {
        Body::Set { id, .. } => &mut std::iter::once(id.map(|v| v.class)),
        Body::Values(rows) => &mut rows.iter().map(|r| r.id.map(|v| v.class)),
    };
    for (span, class) in spans.iter_mut().zip(ids) {
        span.key = key_of(slot_in(span.open, span.close), class);
    }
}

/// Where each row is (keys [`RowKey::Unknown`] until [`set_keys`]),
/// `None` when a row's `(` cannot be found.
pub(crate) fn locate(
    sql: &str,
    range: std::ops::Range<usize>,
    modes: Modes,
    body: &Body,
) -> Option<Vec<RowSpan>> {
    match body {
        Body::Set { .. } => Some(vec![RowSpan {
            open: range.start,
            close: range.end,
            key: RowKey::Unknown,
        }]),
        Body::Values(rows) => {
            let mut lx = Lexer::new(sql, range.start, modes);
            // The first `(` at depth 0 after the VALUES/VALUE keyword.
            let mut depth = 0usize;
            loop {
                let t = lx.next_token()?;
                if t.start >= range.end {
                    return None;
                }
                match t.kind {
                    Kind::Punct(b'(') => depth += 1,
                    Kind::Punct(b')') => depth = depth.saturating_sub(1),
                    Kind::Word if depth == 0 => {
                        let w = sql.get(t.start..t.end).unwrap_or("");
                        if w.eq_ignore_ascii_case("VALUES") || w.eq_ignore_ascii_case("VALUE") {
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                let open = loop {
                    let t = lx.next_token()?;
                    if t.start >= r.close {
                        return None;
                    }
                    if t.is(b'(') {
                        break t.start;
                    }
                };
                lx.set_pos(r.close + 1, false);
                out.push(RowSpan {
                    open,
                    close: r.close,
                    key: RowKey::Unknown,
                });
            }
            Some(out)
        }
    }
}

/// Where an INSERT gives its shard key column (not the id column).
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeyColumn<'a> {
    /// `VALUES` rows: the value at this position of each row.
    Position(usize),
    /// `INSERT ... SET`: the assignment to this column.
    Named(&'a str),
}

/// The value each row gives the table's shard key column, read from the
/// original text: a literal or a `?` (numbered from the start of `sql`, as
/// the client numbers its parameters). `spans` are the statement's rows
/// ([`locate`]d). `Err((row, reason))` (row 1-based) when a row gives no value
/// idgate can evaluate.
pub(crate) fn key_args(
    sql: &str,
    modes: Modes,
    spans: &[RowSpan],
    body: &Body,
    column: KeyColumn<'_>,
) -> Result<Vec<KeyArg>, (usize, &'static str)> {
    // Only prepared statements have `?`: where each is, found once.
    let params = std::cell::OnceCell::new();
    let param = |t: &Token| {
        let starts: &Vec<usize> = params.get_or_init(|| {
            let mut lx = Lexer::new(sql, 0, modes);
            std::iter::from_fn(|| lx.next_token())
                .filter(|x| x.kind == Kind::Param)
                .map(|x| x.start)
                .collect()
        });
        starts.binary_search(&t.start).ok()
    };
    let evaluate = |row: usize, toks: Option<Vec<Token>>| match toks {
        None => Err((
            row,
            "gives it no value (its DEFAULT is not known to idgate)",
        )),
        Some(toks) => key_literal(sql, &toks, modes, &param).ok_or((
            row,
            "gives it a value that is not a literal (idgate cannot evaluate expressions)",
        )),
    };
    let mut out = Vec::with_capacity(spans.len());
    for (i, span) in spans.iter().enumerate() {
        let toks = match (column, body) {
            (KeyColumn::Position(k), Body::Values(_)) => {
                nth_value(sql, modes, span.open + 1, span.close, k)
            }
            (KeyColumn::Named(name), Body::Set { end, .. }) => {
                assigned(sql, modes, span.open..*end, "SET", name)
            }
            _ => None,
        };
        out.push(evaluate(i + 1, toks)?);
    }
    Ok(out)
}

/// The tokens of the `k`-th (0-based) comma-separated value between `from`
/// and `to` (one row's contents).
fn nth_value(sql: &str, modes: Modes, from: usize, to: usize, k: usize) -> Option<Vec<Token>> {
    let mut lx = Lexer::new(sql, from, modes);
    let (mut depth, mut index) = (0usize, 0usize);
    let mut out = Vec::new();
    while let Some(t) = lx.next_token().filter(|t| t.start < to) {
        match t.kind {
            Kind::Punct(b',') if depth == 0 => {
                if index == k {
                    return Some(out);
                }
                index += 1;
                continue;
            }
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if index == k {
            out.push(t);
        }
    }
    (index == k && !out.is_empty()).then_some(out)
}

/// The tokens of the value assigned to column `name` in the assignment
/// list after the first `keyword` (`SET`, or `UPDATE` of `ON DUPLICATE KEY
/// UPDATE`) at depth 0 in `range` (the list ends at `range.end`).
pub(crate) fn assigned(
    sql: &str,
    modes: Modes,
    range: std::ops::Range<usize>,
    keyword: &str,
    name: &str,
) -> Option<Vec<Token>> {
    let end = range.end;
    let mut lx = Lexer::new(sql, range.start, modes);
    let mut depth = 0usize;
    loop {
        let t = lx.next_token().filter(|t| t.start < end)?;
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            Kind::Word if depth == 0 && t.is_word(sql, keyword) => break,
            _ => {}
        }
    }
    // `col = value, ...`: a column name is the last part of `a.b.col`.
    loop {
        let mut t = lx.next_token().filter(|t| t.start < end)?;
        let target = loop {
            let part = super::fast::ident(sql, &t);
            t = lx.next_token().filter(|t| t.start < end)?;
            if !t.is(b'.') {
                break part;
            }
            t = lx.next_token().filter(|t| t.start < end)?;
        };
        if t.is(b':') {
            t = lx.next_token().filter(|t| t.start < end)?;
        }
        if !t.is(b'=') {
            return None;
        }
        let mut value = Vec::new();
        let mut depth = 0usize;
        let mut more = false;
        while let Some(t) = lx.next_token().filter(|t| t.start < end) {
            match t.kind {
                Kind::Punct(b',') if depth == 0 => {
                    more = true;
                    break;
                }
                Kind::Punct(b'(') => depth += 1,
                Kind::Punct(b')') => depth = depth.saturating_sub(1),
                _ => {}
            }
            value.push(t);
        }
        if target.is_some_and(|c| same_column(&c, name)) {
            return (!value.is_empty()).then_some(value);
        }
        if !more {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RowKey;
    use crate::rules::RuleSet;
    use crate::sql::route::{KeyArg, KeyValue};
    use crate::sql::{plan_query_with, Engine, Plan, PlanCtx, QueryRewrite};
    use std::path::Path;

    const RULES: &str = r#"
[[generator]]
name = "g"
kind = "sequence"
[[table]]
name = "shop.t"
column = "id"
generator = "g"
shard_key = "id"
sharding = "mod"
"#;

    fn plan(sql: &str, engine: Engine) -> QueryRewrite {
        let rules =
            RuleSet::from_toml(Path::new("t.toml"), RULES, &["s0", "s1"], &|_| Ok(())).unwrap();
        let cols = |_: &str, _: &str| Some(["id", "a"].iter().map(|s| s.to_string()).collect());
        let ctx = PlanCtx {
            schema: Some("shop"),
            no_auto_value_on_zero: false,
            no_backslash_escapes: false,
            ansi_quotes: false,
            columns: &cols,
            mentions: None,
        };
        match plan_query_with(sql, &rules, &ctx, engine).unwrap() {
            Plan::Rewrite(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn split(sql: &str, parts: &[&[usize]]) -> Vec<String> {
        let mut out = Vec::new();
        for engine in [Engine::FastOnly, Engine::SqlParserOnly] {
            let rw = plan(sql, engine);
            let ids: Vec<u64> = (0..rw.total_ids() as u64).map(|i| 101 + i).collect();
            let texts: Vec<String> = parts
                .iter()
                .map(|rows| {
                    let mut s = String::new();
                    rw.render_rows(0, rows, &ids, crate::sql::Report::Wrap, &mut s)
                        .unwrap();
                    s
                })
                .collect();
            if engine == Engine::FastOnly {
                out = texts;
            } else {
                assert_eq!(out, texts, "parsers differ for {sql}");
            }
        }
        out
    }

    #[test]
    fn keys_of_rows() {
        let rw = plan(
            "INSERT INTO t (id, a) VALUES (NULL, 1), (7, 2), (0, 3), (id + 1, 4)",
            Engine::Auto,
        );
        let keys: Vec<RowKey> = rw.statements()[0].rows.iter().map(|r| r.key).collect();
        assert_eq!(
            keys,
            [
                RowKey::Generated(0),
                RowKey::Explicit(7),
                RowKey::Generated(1),
                RowKey::Unknown
            ]
        );
        let rw = plan("INSERT INTO t SET a = 1", Engine::Auto);
        assert_eq!(rw.statements()[0].rows[0].key, RowKey::Generated(0));
        let rw = plan("INSERT INTO t SET a = 1, id = 9", Engine::Auto);
        assert_eq!(rw.statements()[0].rows[0].key, RowKey::Explicit(9));
    }

    #[test]
    fn split_keeps_row_texts_and_the_rest() {
        let sql = "INSERT /* c */ INTO t (a) VALUES ('x,(y'),\n ( 'z' ) , (3) ON DUPLICATE KEY UPDATE a = VALUES(a)";
        assert_eq!(
            split(sql, &[&[0, 2], &[1]]),
            [
                "INSERT /* c */ INTO t (a, `id`) VALUES ('x,(y', LAST_INSERT_ID(101)), (3, 103) ON DUPLICATE KEY UPDATE a = VALUES(a)",
                "INSERT /* c */ INTO t (a, `id`) VALUES ( 'z' , 102) ON DUPLICATE KEY UPDATE a = VALUES(a)",
            ]
        );
        // Without a column list: the id takes its place in the row.
        assert_eq!(
            split("INSERT INTO t VALUES (NULL, 'a'), (5, 'b')", &[&[1], &[0]]),
            [
                "INSERT INTO t VALUES (5, 'b')",
                "INSERT INTO t VALUES (LAST_INSERT_ID(101), 'a')",
            ]
        );
    }

    /// `shop.o` is sharded by `cust`, not by its id column.
    const BY_CUST: &str = r#"
[[generator]]
name = "g"
kind = "sequence"
[[table]]
name = "shop.o"
column = "id"
generator = "g"
shard_key = "cust"
sharding = "hash"
"#;

    fn ctx_for<'a>(cols: crate::sql::ColumnsFn<'a>) -> PlanCtx<'a> {
        PlanCtx {
            schema: Some("shop"),
            no_auto_value_on_zero: false,
            no_backslash_escapes: false,
            ansi_quotes: false,
            columns: cols,
            mentions: None,
        }
    }

    fn by_cust() -> RuleSet {
        RuleSet::from_toml(Path::new("t.toml"), BY_CUST, &["s0", "s1"], &|_| Ok(())).unwrap()
    }

    fn o_columns(_: &str, t: &str) -> Option<std::sync::Arc<[String]>> {
        (t == "o").then(|| ["id", "a", "cust"].iter().map(|s| s.to_string()).collect())
    }

    /// The shard keys of a one-statement query, by both parsers (which must agree).
    fn keys(sql: &str) -> Result<Vec<KeyArg>, String> {
        let rules = by_cust();
        let ctx = ctx_for(&o_columns);
        let mut out = None;
        for engine in [Engine::FastOnly, Engine::SqlParserOnly] {
            let got = match plan_query_with(sql, &rules, &ctx, engine) {
                Ok(Plan::Rewrite(r)) => Ok(r.statements()[0].shard_keys.clone()),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e.to_string()),
            };
            if let Some(prev) = &out {
                assert_eq!(prev, &got, "parsers differ for {sql}");
            }
            out = Some(got);
        }
        out.unwrap()
    }

    fn int(v: i128) -> KeyArg {
        KeyArg::Value(KeyValue::Int(v))
    }
    fn text(v: &str) -> KeyArg {
        KeyArg::Value(KeyValue::Str(v.as_bytes().to_vec()))
    }

    #[test]
    fn rows_of_a_table_sharded_by_another_column_carry_that_value() {
        assert_eq!(
            keys("INSERT INTO o (a, cust) VALUES ('x,(', 7), (f(1, 2), -3), (NULL, 'k\\'x')"),
            Ok(vec![int(7), int(-3), text("k'x")])
        );
        // No column list: the table's column order (id, a, cust).
        assert_eq!(
            keys("INSERT INTO o VALUES (NULL, 'a', _utf8mb4'u1'), (5, 'b', NULL)"),
            Ok(vec![text("u1"), KeyArg::Value(KeyValue::Null)])
        );
        assert_eq!(
            keys("INSERT INTO o SET a = 1, o.cust = 42, id = 3"),
            Ok(vec![int(42)])
        );
        assert_eq!(
            keys("INSERT INTO o (cust) VALUES (1) ON DUPLICATE KEY UPDATE cust = VALUES(cust), a = 2"),
            Ok(vec![int(1)])
        );
        // The id-sharded rules keep no shard keys: rows go by their ids.
        assert!(
            plan("INSERT INTO t (a) VALUES (1)", Engine::Auto).statements()[0]
                .shard_keys
                .is_empty()
        );
    }

    #[test]
    fn rows_without_a_literal_shard_key_are_refused_with_the_row() {
        let e = keys("INSERT INTO o (a, cust) VALUES (1, 2), (3, 2 + 2)").unwrap_err();
        assert!(e.starts_with("idgate: row 2 of the INSERT into sharded table shop.o gives it a value that is not a literal"), "{e}");
        assert!(e.contains("shard key column cust"), "{e}");
        let e = keys("INSERT INTO o (a) VALUES (1)").unwrap_err();
        assert!(
            e.contains(
                "row 1 of the INSERT into sharded table shop.o leaves it out of its column list"
            ),
            "{e}"
        );
        let e = keys("INSERT INTO o SET a = 1").unwrap_err();
        assert!(e.contains("gives it no value"), "{e}");
        let e = keys("INSERT INTO o (a, cust) VALUES (1, DEFAULT)").unwrap_err();
        assert!(e.contains("row 1") && e.contains("not a literal"), "{e}");
        let e =
            keys("INSERT INTO o (cust) VALUES (1) ON DUPLICATE KEY UPDATE a = 1, cust = cust + 1")
                .unwrap_err();
        assert!(
            e.contains("ON DUPLICATE KEY UPDATE of shard key column `cust`"),
            "{e}"
        );
        // A table without the column.
        let rules = by_cust();
        let cols = |_: &str, _: &str| Some(["id", "a"].iter().map(|s| s.to_string()).collect());
        let e = plan_query_with(
            "INSERT INTO o VALUES (1, 2)",
            &rules,
            &ctx_for(&cols),
            Engine::Auto,
        )
        .unwrap_err();
        assert_eq!(e.code(), 1054, "{e}");
        assert!(e.to_string().contains("'cust' in table shop.o"), "{e}");
    }

    #[test]
    fn prepared_rows_name_the_clients_parameter() {
        let rules = by_cust();
        let ctx = ctx_for(&o_columns);
        let plan = |sql: &str| match crate::sql::plan_prepare(sql, &rules, &ctx).unwrap() {
            crate::sql::PreparePlan::Rewrite(r) => r,
            other => panic!("{other:?}"),
        };
        let p = plan("INSERT INTO o (a, id, cust) VALUES (?, ?, ?), (?, NULL, 'z')");
        assert_eq!(p.shard_keys, vec![KeyArg::Param(2), text("z")]);
        // The client still sees its own parameters.
        assert_eq!(p.client_params, 4);
        let p = plan("INSERT INTO o SET cust = ?, a = ?");
        assert_eq!(p.shard_keys, vec![KeyArg::Param(0)]);
    }
}
