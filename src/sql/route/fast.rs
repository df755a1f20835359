//! The fast path: the [`Analysis`] straight from [`Lexer`] tokens for the
//! common shapes, without an AST. It *declines* (returns `None`, and
//! sqlparser gets the statement) on anything outside them:
//!
//! ```text
//! SELECT item, ... FROM [schema.]t [[AS] alias] [WHERE conj]
//!        [ORDER BY key, ...] [LIMIT n | LIMIT m, n | LIMIT n OFFSET m]
//!        [FOR UPDATE | LOCK IN SHARE MODE]
//!   item: * | q.* | column [[AS] alias] | COUNT(*) | COUNT/SUM/MIN/MAX(column) [[AS] alias]
//!   key:  column | position, [ASC | DESC]
//! UPDATE [LOW_PRIORITY] [IGNORE] [schema.]t [[AS] alias] SET column = expr, ... [WHERE conj]
//! DELETE [LOW_PRIORITY] [QUICK] [IGNORE] FROM [schema.]t [WHERE conj]
//!   conj: terms AND-ed at the top level (no OR/XOR there, no subquery, no
//!         CASE, no `|`/`&`/`:`); a term `key = v`, `v = key` or
//!         `key IN (v, ...)` binds the key
//! ```
//! Each is followed by an optional `;` and nothing else.

use std::borrow::Cow;

use sqlparser::keywords::ALL_KEYWORDS;

use super::super::fast::ident;
use super::super::lexer::{Kind, Lexer, Modes, Token};
use super::bound::{offer, sets_key, BlockTable};
use super::scatter::{self, Item, ItemKind, Limit, LimitArg, OrderTarget};
use super::value::{literal, Sign};
use super::{Analysis, KeyArg, ShardKeyFn, StmtKind};
use crate::shard::merge::{Agg, MergeSpec};

/// Unquoted words sqlparser reads as something other than a column.
const NOT_COLUMNS: &[&str] = &[
    "NULL",
    "TRUE",
    "FALSE",
    "UNKNOWN",
    "DEFAULT",
    "NOT",
    "INTERVAL",
    "EXISTS",
    "CASE",
    "BINARY",
    "CURRENT_TIMESTAMP",
    "CURRENT_TIME",
    "CURRENT_DATE",
    "CURRENT_USER",
    "CURRENT_ROLE",
    "CURRENT_CATALOG",
    "SESSION_USER",
    "SYSTEM_USER",
    "USER",
    "LOCALTIME",
    "LOCALTIMESTAMP",
    "PRIOR",
    "DISTINCT",
    "DISTINCTROW",
    "ALL",
    "HIGH_PRIORITY",
    "STRAIGHT_JOIN",
    "SQL_SMALL_RESULT",
    "SQL_BIG_RESULT",
    "SQL_BUFFER_RESULT",
    "SQL_CACHE",
    "SQL_NO_CACHE",
    "SQL_CALC_FOUND_ROWS",
];

/// Words that start a clause the fast path does not take; met at the top
/// level of a condition or SET value (where they end it), it declines.
const CLAUSES: &[&str] = &[
    "ORDER",
    "LIMIT",
    "FOR",
    "LOCK",
    "GROUP",
    "HAVING",
    "WINDOW",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "INTO",
    "PROCEDURE",
    "RETURNING",
    "FETCH",
    "OFFSET",
];

/// `w` upper-cased into `buf`; `""` if it does not fit (no keyword is
/// that long).
fn upper<'b>(w: &str, buf: &'b mut [u8; 40]) -> &'b str {
    let Some(dst) = buf.get_mut(..w.len()) else {
        return "";
    };
    dst.copy_from_slice(w.as_bytes());
    dst.make_ascii_uppercase();
    std::str::from_utf8(dst).unwrap_or("")
}

/// A sqlparser keyword (declined as an alias written without `AS`).
fn is_keyword(w: &str) -> bool {
    let mut buf = [0u8; 40];
    let u = upper(w, &mut buf);
    !u.is_empty() && ALL_KEYWORDS.binary_search(&u).is_ok()
}

/// Tries the fast path.
pub(super) fn analyze(sql: &str, modes: Modes, shard_key: ShardKeyFn<'_>) -> Option<Analysis> {
    let mut toks = Vec::with_capacity(32);
    let mut lx = Lexer::new(sql, 0, modes);
    while let Some(t) = lx.next_token() {
        if t.kind == Kind::Unterminated {
            return None;
        }
        toks.push(t);
    }
    if toks.last().is_some_and(|t| t.is(b';')) {
        toks.pop();
    }
    let mut p = P {
        sql,
        modes,
        toks: &toks,
        i: 1,
    };
    let first = toks.first()?;
    if p.word_is(first, "SELECT") {
        p.select(shard_key)
    } else if p.word_is(first, "UPDATE") {
        p.update(shard_key)
    } else if p.word_is(first, "DELETE") {
        p.delete(shard_key)
    } else {
        None
    }
}

struct P<'a> {
    sql: &'a str,
    modes: Modes,
    toks: &'a [Token],
    i: usize,
}

impl<'a> P<'a> {
    fn word_is(&self, t: &Token, kw: &str) -> bool {
        t.is_word(self.sql, kw)
    }

    fn peek(&self) -> Option<&'a Token> {
        self.toks.get(self.i)
    }

    fn peek_word(&self, kw: &str) -> bool {
        self.peek().is_some_and(|t| self.word_is(t, kw))
    }

    fn eat_word(&mut self, kw: &str) -> bool {
        let yes = self.peek_word(kw);
        if yes {
            self.i += 1;
        }
        yes
    }

    fn eat(&mut self, b: u8) -> bool {
        let yes = self.peek().is_some_and(|t| t.is(b));
        if yes {
            self.i += 1;
        }
        yes
    }

    fn next(&mut self) -> Option<&'a Token> {
        let t = self.toks.get(self.i)?;
        self.i += 1;
        Some(t)
    }

    fn text(&self, t: &Token) -> &'a str {
        self.sql.get(t.start..t.end).unwrap_or("")
    }

    /// An identifier usable as a name: quoted, or a word that does not
    /// start with a digit (`0x1F`, `1e5`) or read as something else.
    fn name(&mut self) -> Option<Cow<'a, str>> {
        let t = self.peek()?;
        if t.kind == Kind::Word {
            let w = self.text(t);
            if w.starts_with(|c: char| c.is_ascii_digit())
                || NOT_COLUMNS.contains(&upper(w, &mut [0; 40]))
            {
                return None;
            }
        }
        if t.kind == Kind::QuotedIdent && self.sql.as_bytes().get(t.start) == Some(&b'"') {
            // As sqlparser is given it: `"..."` becomes `` `...` ``, which
            // works only without quotes inside.
            let inner = self.sql.get(t.start + 1..t.end.saturating_sub(1))?;
            if inner.contains(['"', '`']) {
                return None;
            }
        }
        let n = ident(self.sql, t)?;
        self.i += 1;
        Some(n)
    }

    /// `a`, `a.b` or `a.b.c`; with `star`, also `a.*` / `a.b.*` (returned
    /// with an empty last part).
    fn colref(&mut self, star: bool) -> Option<Vec<Cow<'a, str>>> {
        let mut parts = vec![self.name()?];
        while parts.len() < 3 && self.peek().is_some_and(|t| t.is(b'.')) {
            self.i += 1;
            if star && self.eat(b'*') {
                parts.push(Cow::Borrowed(""));
                return Some(parts);
            }
            parts.push(self.name()?);
        }
        Some(parts)
    }

    /// `[AS] alias` after a select-list item or table; `stops` are the
    /// words that end it instead.
    fn alias(&mut self, stops: &[&str]) -> Option<Option<String>> {
        if self.eat_word("AS") {
            return Some(Some(self.name()?.into_owned()));
        }
        match self.peek() {
            Some(t) if t.kind == Kind::Word => {
                if stops.iter().any(|s| self.word_is(t, s)) {
                    return Some(None);
                }
                if is_keyword(self.text(t)) {
                    return None;
                }
                Some(Some(self.name()?.into_owned()))
            }
            Some(t) if t.kind == Kind::QuotedIdent => Some(Some(self.name()?.into_owned())),
            _ => Some(None),
        }
    }

    /// `[schema.]table`, returning (schema, table, position).
    fn table(&mut self) -> Option<(Option<String>, String, usize)> {
        let pos = self.peek()?.start;
        let first = self.name()?.into_owned();
        if self.eat(b'.') {
            let t = self.name()?.into_owned();
            Some((Some(first), t, pos))
        } else {
            Some((None, first, pos))
        }
    }

    /// The `?` index of a placeholder token.
    fn param_index(&self, t: &Token) -> Option<usize> {
        Some(
            self.toks
                .iter()
                .take_while(|x| x.start < t.start)
                .filter(|x| x.kind == Kind::Param)
                .count(),
        )
    }

    fn literal(&self, toks: &[Token]) -> Option<KeyArg> {
        literal(self.sql, toks, Sign::None, self.modes, &|t| {
            self.param_index(t)
        })
    }

    /// A WHERE condition up to one of `stops` (or the end): binds keys of
    /// `block` from its top-level AND-ed terms.
    fn conjunction(&mut self, block: &mut [BlockTable], stops: &[&str]) -> Option<()> {
        loop {
            let start = self.i;
            let mut depth = 0usize;
            let mut between = 0usize;
            while let Some(t) = self.peek() {
                match t.kind {
                    Kind::Punct(b'(') => depth += 1,
                    Kind::Punct(b')') => depth = depth.checked_sub(1)?,
                    Kind::Punct(b'|' | b'&' | b':' | b'{' | b';') => return None,
                    Kind::Word => {
                        let mut buf = [0; 40];
                        let w = upper(self.text(t), &mut buf);
                        if matches!(w, "SELECT" | "WITH" | "TABLE" | "CASE") {
                            return None;
                        }
                        if depth == 0 {
                            if stops.contains(&w) {
                                break;
                            }
                            if CLAUSES.contains(&w) || w == "OR" || w == "XOR" {
                                return None;
                            }
                            if w == "BETWEEN" {
                                between += 1;
                            }
                            if w == "AND" {
                                if between == 0 {
                                    break;
                                }
                                between -= 1;
                            }
                        }
                    }
                    _ => {}
                }
                self.i += 1;
            }
            if depth != 0 {
                return None;
            }
            let term = self.toks.get(start..self.i)?;
            match term.first() {
                None => return None,
                // sqlparser reads through parentheses: only an OR/XOR
                // inside binds nothing for both.
                Some(t) if t.is(b'(') => self.parenthesized_or(term)?,
                Some(_) => self.term(term, block)?,
            }
            if !self.eat_word("AND") {
                return Some(());
            }
        }
    }

    /// One AND-ed term: `key = v`, `v = key`, `key IN (v, ...)` bind the
    /// key. `None` (decline) for a malformed `=` or `IN` term.
    fn term(&self, term: &'a [Token], block: &mut [BlockTable]) -> Option<()> {
        let mut sub = P {
            sql: self.sql,
            modes: self.modes,
            toks: term,
            i: 0,
        };
        if let Some(parts) = sub.colref(false) {
            let rest = term.get(sub.i..).unwrap_or(&[]);
            match rest.split_first() {
                Some((eq, value)) if eq.is(b'=') => {
                    if value.is_empty() {
                        return None;
                    }
                    if let Some(v) = self.literal(value) {
                        offer(block, &parts, &[v]);
                    }
                    return Some(());
                }
                Some((w, list)) if self.word_is(w, "IN") => {
                    if let Some(values) = self.in_list(list)? {
                        offer(block, &parts, &values);
                    }
                    return Some(());
                }
                _ => {}
            }
        }
        let Some(eq) = term.iter().position(|t| t.is(b'=')) else {
            return Some(());
        };
        let (Some(value), Some(col)) = (term.get(..eq), term.get(eq + 1..)) else {
            return Some(());
        };
        let mut sub = P {
            sql: self.sql,
            modes: self.modes,
            toks: col,
            i: 0,
        };
        if let Some(parts) = sub.colref(false) {
            if sub.i == col.len() {
                if let Some(v) = self.literal(value) {
                    offer(block, &parts, &[v]);
                }
            }
        }
        Some(())
    }

    /// A term wholly in parentheses whose top level inside is an OR or
    /// XOR: binds nothing. `None` (decline) for any other parenthesized term.
    fn parenthesized_or(&self, term: &[Token]) -> Option<()> {
        let mut depth = 0usize;
        let mut or = false;
        for (i, t) in term.iter().enumerate() {
            match t.kind {
                Kind::Punct(b'(') => depth += 1,
                Kind::Punct(b')') => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 && i + 1 != term.len() {
                        return None;
                    }
                }
                Kind::Word if depth == 1 => {
                    or |= self.word_is(t, "OR") || self.word_is(t, "XOR");
                }
                _ => {}
            }
        }
        or.then_some(())
    }

    /// `(v, ...)` as the whole rest of a term: `Some(None)` unless every
    /// element is a literal; `None` (decline) if it is not a list.
    fn in_list(&self, list: &[Token]) -> Option<Option<Vec<KeyArg>>> {
        let (open, rest) = list.split_first()?;
        let (close, inner) = rest.split_last()?;
        if !open.is(b'(') || !close.is(b')') || inner.is_empty() {
            return None;
        }
        let mut values = Some(Vec::new());
        for v in inner.split(|t| t.is(b',')) {
            if v.is_empty() || v.iter().any(|t| t.is(b'(') || t.is(b')')) {
                return None;
            }
            match (self.literal(v), &mut values) {
                (Some(x), Some(vs)) => vs.push(x),
                _ => values = None,
            }
        }
        Some(values)
    }

    fn at_end(&self) -> bool {
        self.i >= self.toks.len()
    }

    fn select(&mut self, shard_key: ShardKeyFn<'_>) -> Option<Analysis> {
        let mut items = Vec::new();
        loop {
            items.push(self.item()?);
            if !self.eat(b',') {
                break;
            }
        }
        if !self.eat_word("FROM") {
            return None;
        }
        let (schema, table, pos) = self.table()?;
        let alias = self.alias(&["WHERE", "ORDER", "LIMIT", "FOR", "LOCK"])?;
        let mut block = [BlockTable::new(schema, table, alias, pos, shard_key)];
        if self.eat_word("WHERE") {
            self.conjunction(&mut block, &["ORDER", "LIMIT", "FOR", "LOCK"])?;
        }
        let mut spec = scatter::aggregates(&items).map(|aggregates| MergeSpec {
            agg_columns: match aggregates {
                Some(_) => scatter::agg_columns(&items),
                None => Vec::new(),
            },
            aggregates,
            ..MergeSpec::default()
        });
        if self.eat_word("ORDER") {
            if !self.eat_word("BY") {
                return None;
            }
            loop {
                let target = match self.peek() {
                    Some(t) if t.kind == Kind::Number => {
                        let digits = self.text(t);
                        if !digits.bytes().all(|b| b.is_ascii_digit()) {
                            return None;
                        }
                        self.i += 1;
                        OrderTarget::Position(digits.to_string())
                    }
                    _ => {
                        let mut parts = self.colref(false)?;
                        let name = parts.pop()?.into_owned();
                        OrderTarget::Column(parts.into_iter().map(Cow::into_owned).collect(), name)
                    }
                };
                let desc = if self.eat_word("DESC") {
                    true
                } else {
                    self.eat_word("ASC");
                    false
                };
                if let Ok(s) = &mut spec {
                    if s.aggregates.is_none() {
                        match scatter::order_key(&items, &target, desc) {
                            Ok(k) => s.order_by.push(k),
                            Err(e) => spec = Err(e),
                        }
                    }
                }
                if !self.eat(b',') {
                    break;
                }
            }
        }
        let mut limit = None;
        if self.eat_word("LIMIT") {
            let a = self.next()?;
            let first = self.limit_arg(a)?;
            let (count, offset, end) = if self.eat(b',') {
                let b = self.next()?;
                (self.limit_arg(b)?, Some(first), b.end)
            } else if self.eat_word("OFFSET") {
                let b = self.next()?;
                (first, Some(self.limit_arg(b)?), b.end)
            } else {
                (first, None, a.end)
            };
            limit = Some(Limit {
                count,
                offset,
                start: a.start,
                end,
            });
        }
        if self.eat_word("FOR") {
            if !self.eat_word("UPDATE") {
                return None;
            }
        } else if self.eat_word("LOCK") {
            for w in ["IN", "SHARE", "MODE"] {
                if !self.eat_word(w) {
                    return None;
                }
            }
        }
        if !self.at_end() {
            return None;
        }
        let mut shard_sql = None;
        if let Ok(s) = &mut spec {
            match scatter::apply_limit(self.sql, s, limit) {
                Ok(text) => shard_sql = text,
                Err(e) => spec = Err(e),
            }
        }
        let [t] = block;
        Some(Analysis {
            kind: StmtKind::Select,
            tables: vec![t.into_use(false)],
            sets_shard_key: false,
            // As the parser path: a LIMIT only where it may be scattered.
            limit: limit.filter(|_| spec.is_ok()),
            scatter: spec,
            shard_sql,
        })
    }

    /// A LIMIT number token.
    /// A LIMIT number: an integer literal or a `?`.
    fn limit_arg(&self, t: &Token) -> Option<LimitArg> {
        match t.kind {
            Kind::Number => scatter::limit_number(self.text(t))
                .ok()
                .map(LimitArg::Value),
            Kind::Param => self.param_index(t).map(LimitArg::Param),
            _ => None,
        }
    }

    /// One select-list item.
    fn item(&mut self) -> Option<Item> {
        if self.eat(b'*') {
            return Some(Item {
                kind: ItemKind::Star(Vec::new()),
                alias: None,
                text: None,
            });
        }
        let t = self.peek()?;
        let agg = [
            ("COUNT", Agg::Count),
            ("SUM", Agg::Sum),
            ("MIN", Agg::Min),
            ("MAX", Agg::Max),
        ]
        .into_iter()
        .find(|(k, _)| self.word_is(t, k))
        .map(|(_, a)| a);
        let open = self.toks.get(self.i + 1);
        let kind = match (agg, open) {
            (Some(a), Some(o)) if o.is(b'(') && o.start == t.end => {
                self.i += 2;
                let mut column = None;
                if !(a == Agg::Count && self.eat(b'*')) {
                    let parts = self.colref(false)?;
                    if parts.len() > 3 {
                        return None;
                    }
                    column = parts.last().map(|c| c.clone().into_owned());
                }
                if !self.eat(b')') {
                    return None;
                }
                ItemKind::Agg(a, column)
            }
            _ => {
                let mut parts = self.colref(true)?;
                let last = parts.pop()?;
                let qual: Vec<String> = parts.into_iter().map(Cow::into_owned).collect();
                if last.is_empty() {
                    return Some(Item {
                        kind: ItemKind::Star(qual),
                        alias: None,
                        text: None,
                    });
                }
                ItemKind::Column(qual, last.into_owned())
            }
        };
        let alias = self.alias(&["FROM"])?;
        Some(Item {
            kind,
            alias,
            text: None,
        })
    }

    fn update(&mut self, shard_key: ShardKeyFn<'_>) -> Option<Analysis> {
        self.eat_word("LOW_PRIORITY");
        self.eat_word("IGNORE");
        let (schema, table, pos) = self.table()?;
        let alias = self.alias(&["SET"])?;
        let mut block = [BlockTable::new(schema, table, alias, pos, shard_key)];
        if !self.eat_word("SET") {
            return None;
        }
        let mut sets = false;
        loop {
            let parts = self.colref(false)?;
            sets |= sets_key(&block, &parts);
            if !self.eat(b'=') {
                return None;
            }
            let start = self.i;
            let mut depth = 0usize;
            while let Some(t) = self.peek() {
                match t.kind {
                    Kind::Punct(b'(') => depth += 1,
                    Kind::Punct(b')') => depth = depth.checked_sub(1)?,
                    Kind::Punct(b',') if depth == 0 => break,
                    Kind::Punct(b';' | b'{') => return None,
                    Kind::Word => {
                        let w = self.text(t);
                        let is = |k: &str| w.eq_ignore_ascii_case(k);
                        if is("SELECT") || is("WITH") || is("TABLE") {
                            return None;
                        }
                        if depth == 0 && (is("WHERE") || is("ORDER") || is("LIMIT")) {
                            break;
                        }
                        if depth == 0 && CLAUSES.iter().any(|c| is(c)) {
                            return None;
                        }
                    }
                    _ => {}
                }
                self.i += 1;
            }
            if self.i == start || depth != 0 {
                return None;
            }
            if !self.eat(b',') {
                break;
            }
        }
        if self.eat_word("WHERE") {
            self.conjunction(&mut block, &[])?;
        }
        if !self.at_end() {
            return None;
        }
        let [t] = block;
        Some(one_table_write(StmtKind::Update, t, sets))
    }

    fn delete(&mut self, shard_key: ShardKeyFn<'_>) -> Option<Analysis> {
        self.eat_word("LOW_PRIORITY");
        self.eat_word("QUICK");
        self.eat_word("IGNORE");
        if !self.eat_word("FROM") {
            return None;
        }
        let (schema, table, pos) = self.table()?;
        let mut block = [BlockTable::new(schema, table, None, pos, shard_key)];
        if self.eat_word("WHERE") {
            self.conjunction(&mut block, &[])?;
        }
        if !self.at_end() {
            return None;
        }
        let [t] = block;
        Some(one_table_write(StmtKind::Delete, t, false))
    }
}

/// The analysis of an UPDATE/DELETE of one table (nothing to merge).
fn one_table_write(kind: StmtKind, t: BlockTable, sets_shard_key: bool) -> Analysis {
    Analysis {
        kind,
        tables: vec![t.into_use(false)],
        sets_shard_key,
        scatter: Ok(MergeSpec::default()),
        shard_sql: None,
        limit: None,
    }
}
