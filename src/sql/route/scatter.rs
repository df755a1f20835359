//! From a SELECT's select list, ORDER BY and LIMIT to the [`MergeSpec`] of
//! its scattered replies, or the reason it cannot be merged. Both paths
//! describe the statement with [`Item`]s and [`OrderTarget`]s and decide here.

use crate::shard::merge::{Agg, ColumnRef, MergeSpec, OrderKey};

use super::super::digits::push_u64;
use super::super::shape::same_column;

/// What a select-list item is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ItemKind {
    /// `*` or `q.*` (qualifier parts).
    Star(Vec<String>),
    /// A column reference: qualifier parts, then the column.
    Column(Vec<String>, String),
    /// `COUNT/SUM/MIN/MAX(...)`, and the column it reads when that is a
    /// plain column (its name).
    Agg(Agg, Option<String>),
    /// A constant (literals, `?`, operators over them).
    Const,
    /// Any other expression, as sqlparser prints it.
    Expr,
}

/// One select-list item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Item {
    pub kind: ItemKind,
    /// `AS alias`, unquoted.
    pub alias: Option<String>,
    /// The expression as sqlparser prints it (sqlparser path only), to match
    /// an ORDER BY expression.
    pub text: Option<String>,
}

/// What an ORDER BY key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum OrderTarget {
    /// An unsigned integer literal: a 1-based position.
    Position(String),
    /// A column or alias: qualifier parts, then the name.
    Column(Vec<String>, String),
    /// `?`.
    Param,
    /// Another expression, as sqlparser prints it.
    Expr(String),
}

/// `a.b.c`.
fn dotted(qual: &[String], name: &str) -> String {
    let mut s = String::new();
    for q in qual {
        s.push_str(q);
        s.push('.');
    }
    s.push_str(name);
    s
}

/// Qualifiers are compatible if either is empty or one ends the other.
fn qual_compatible(a: &[String], b: &[String]) -> bool {
    a.ends_with(b) || b.ends_with(a)
}

/// One `aggregates` entry per item when there is an aggregate (no GROUP BY).
///
/// # Errors
/// The reason, when an item is neither an aggregate nor a constant.
pub(super) fn aggregates(items: &[Item]) -> Result<Option<Vec<Agg>>, String> {
    if !items.iter().any(|i| matches!(i.kind, ItemKind::Agg(..))) {
        return Ok(None);
    }
    items
        .iter()
        .map(|i| match &i.kind {
            ItemKind::Agg(a, _) => Ok(*a),
            ItemKind::Const => Ok(Agg::First),
            ItemKind::Star(q) => Err(format!(
                "{} next to an aggregate without GROUP BY",
                dotted(q, "*")
            )),
            ItemKind::Column(q, c) => Err(format!(
                "column {} next to an aggregate without GROUP BY",
                dotted(q, c)
            )),
            ItemKind::Expr => Err(format!(
                "{} next to an aggregate without GROUP BY (only constants can be)",
                i.text.as_deref().unwrap_or("an expression")
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The column each MIN/MAX item reads (to learn its collation); empty
/// when none reads a plain column.
pub(super) fn agg_columns(items: &[Item]) -> Vec<Option<String>> {
    let cols: Vec<Option<String>> = items
        .iter()
        .map(|i| match &i.kind {
            ItemKind::Agg(Agg::Min | Agg::Max, c) => c.clone(),
            _ => None,
        })
        .collect();
    if cols.iter().all(Option::is_none) {
        Vec::new()
    } else {
        cols
    }
}

/// The collation each select-list item names last (`expr COLLATE name`),
/// for ordering it; empty when none does or a `*` makes positions unknown.
pub(super) fn item_collations(items: &[Item]) -> Vec<Option<String>> {
    if items.iter().any(|i| matches!(i.kind, ItemKind::Star(_))) {
        return Vec::new();
    }
    let named: Vec<Option<String>> = items
        .iter()
        .map(|i| {
            let words: Vec<&str> = i.text.as_deref()?.split_ascii_whitespace().collect();
            match words[..] {
                [.., c, name] if c.eq_ignore_ascii_case("COLLATE") => {
                    Some(name.trim_matches(['`', '\'', '"']).to_string())
                }
                _ => None,
            }
        })
        .collect();
    if named.iter().all(Option::is_none) {
        Vec::new()
    } else {
        named
    }
}

/// The result column item `i` is: its position if no `*` comes before it,
/// else its name.
fn column_of(items: &[Item], i: usize) -> Option<ColumnRef> {
    let star_before = items
        .get(..i)
        .is_some_and(|b| b.iter().any(|x| matches!(x.kind, ItemKind::Star(_))));
    if !star_before {
        return Some(ColumnRef::Position(i));
    }
    let item = items.get(i)?;
    match (&item.alias, &item.kind) {
        (Some(a), _) => Some(ColumnRef::Name(a.clone())),
        (None, ItemKind::Column(_, c)) => Some(ColumnRef::Name(c.clone())),
        _ => None,
    }
}

/// Resolves one ORDER BY key against the select list.
///
/// # Errors
/// The reason when it is not a select-list column, alias or position.
pub(super) fn order_key(
    items: &[Item],
    target: &OrderTarget,
    desc: bool,
) -> Result<OrderKey, String> {
    let has_star = items.iter().any(|i| matches!(i.kind, ItemKind::Star(_)));
    let not_listed = |what: String| {
        format!("ORDER BY {what}, which is not a column, alias or position of the select list")
    };
    let column = match target {
        OrderTarget::Param => return Err("ORDER BY a parameter".to_string()),
        OrderTarget::Position(digits) => {
            let n: usize = digits
                .parse()
                .map_err(|_| format!("ORDER BY position {digits}"))?;
            if n == 0 || (!has_star && n > items.len()) {
                return Err(format!(
                    "ORDER BY position {digits}, beyond the select list"
                ));
            }
            ColumnRef::Position(n - 1)
        }
        OrderTarget::Column(qual, name) => {
            let by_alias = if qual.is_empty() {
                items
                    .iter()
                    .position(|i| i.alias.as_deref().is_some_and(|a| same_column(a, name)))
            } else {
                None
            };
            let by_column = || {
                items.iter().position(|i| match &i.kind {
                    ItemKind::Column(q, c) => same_column(c, name) && qual_compatible(q, qual),
                    _ => false,
                })
            };
            let star = || {
                items.iter().any(|i| match &i.kind {
                    ItemKind::Star(q) => q.is_empty() || qual.is_empty() || q == qual,
                    _ => false,
                })
            };
            match by_alias.or_else(by_column) {
                Some(i) => column_of(items, i).ok_or_else(|| not_listed(dotted(qual, name)))?,
                None if star() => ColumnRef::Name(name.clone()),
                None => return Err(not_listed(dotted(qual, name))),
            }
        }
        OrderTarget::Expr(text) => {
            let i = items
                .iter()
                .position(|i| i.text.as_deref() == Some(text.as_str()))
                .ok_or_else(|| not_listed(text.clone()))?;
            column_of(items, i).ok_or_else(|| not_listed(text.clone()))?
        }
    };
    Ok(OrderKey { column, desc })
}

/// One number of a LIMIT clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitArg {
    /// An integer literal.
    Value(u64),
    /// A prepared statement's `?` (its index).
    Param(usize),
}

/// A LIMIT clause: count, offset (`None`: not written), and the byte range
/// from the first to the last of its numbers (what `LIMIT m+n`, or a
/// prepared statement's `?, ?`, replaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub count: LimitArg,
    pub offset: Option<LimitArg>,
    pub start: usize,
    pub end: usize,
}

impl Limit {
    /// Both numbers written as literals: `(count, offset)`.
    pub fn literal(&self) -> Option<(u64, u64)> {
        match (self.count, self.offset) {
            (LimitArg::Value(c), None) => Some((c, 0)),
            (LimitArg::Value(c), Some(LimitArg::Value(o))) => Some((c, o)),
            _ => None,
        }
    }

    /// A prepared statement whose shards must get other LIMIT numbers than
    /// the client's when it is scattered: a `?` in it, or an offset.
    pub fn rebound(&self) -> bool {
        !matches!(self.literal(), Some((_, 0)))
    }

    /// `(count, offset)` with each `?` read by `param` (`None` when one is
    /// not a non-negative integer).
    pub fn resolve(&self, param: &dyn Fn(usize) -> Option<u64>) -> Option<(u64, u64)> {
        let arg = |a: LimitArg| match a {
            LimitArg::Value(v) => Some(v),
            LimitArg::Param(i) => param(i),
        };
        Some((arg(self.count)?, self.offset.map_or(Some(0), arg)?))
    }
}

/// An unsigned integer literal of a LIMIT.
///
/// # Errors
/// The reason when it is not one.
pub(super) fn limit_number(digits: &str) -> Result<u64, String> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("LIMIT {digits} (only integer literals)"));
    }
    digits
        .parse()
        .map_err(|_| format!("LIMIT {digits} (out of range)"))
}

/// Puts the LIMIT into `spec`; with an offset, the text each shard gets.
///
/// # Errors
/// The reason when offset + count overflows.
pub(super) fn apply_limit(
    sql: &str,
    spec: &mut MergeSpec,
    limit: Option<Limit>,
) -> Result<Option<String>, String> {
    let Some(l) = limit else { return Ok(None) };
    // With a `?`, the numbers are known at each execute (the caller
    // completes the spec from [`Limit::resolve`]).
    let Some((count, offset)) = l.literal() else {
        return Ok(None);
    };
    spec.limit = Some(count);
    spec.offset = offset;
    if offset == 0 {
        return Ok(None);
    }
    let total = offset
        .checked_add(count)
        .ok_or_else(|| "LIMIT offset + count beyond 2^64".to_string())?;
    let (Some(before), Some(after)) = (sql.get(..l.start), sql.get(l.end..)) else {
        return Err("LIMIT position".to_string());
    };
    let mut out = String::with_capacity(sql.len() + 4);
    out.push_str(before);
    push_u64(&mut out, total);
    out.push_str(after);
    Ok(Some(out))
}
