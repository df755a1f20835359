//! The general path: the [`Analysis`] from sqlparser's AST (MySQL dialect,
//! unescaping off), for every statement the fast path declines.
//!
//! Tables are found by walking query blocks (each block's FROM, then the
//! queries nested anywhere in it), so a table's key is bound only by its own
//! block's WHERE. A final check lists any table sqlparser's relation visitor
//! sees that the walk did not (as in a subquery, unbound): nothing named is
//! ever left out.

use std::ops::ControlFlow;

use sqlparser::ast::{
    visit_relations, AlterTableOperation, AssignmentTarget, BinaryOperator, CreateTableLikeKind,
    Distinct, DuplicateTreatment, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments,
    GroupByExpr, Ident, LimitClause, ObjectName, ObjectNamePart, ObjectType, OffsetRows, OrderBy,
    OrderByKind, OrderBySort, Query, RenameTableNameKind, Select, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, Statement, TableFactor, TableObject, TableWithJoins,
    UnaryOperator, Value, Visit, Visitor,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::{Parser, ParserOptions};
use sqlparser::tokenizer::Span;

use super::super::lexer::{Kind, Modes};
use super::super::parsed::{idents, unquote, LineIndex};
use super::bound::{offer, sets_key, BlockTable};
use super::prep::{prepare, Prep};
use super::scatter::{self, Item, ItemKind, Limit, LimitArg, OrderTarget};
use super::value::{literal, token_at, tokens_in, Sign};
use super::{Analysis, KeyArg, KeyBound, KeyValue, RouteError, ShardKeyFn, StmtKind, TableUse};
use crate::shard::merge::{Agg, MergeSpec};

/// First keywords of statements whose routing depends on their content: a
/// parse error there is an error, elsewhere the statement is `Other`.
const ROUTED: &[&str] = &[
    "SELECT", "WITH", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP", "TRUNCATE", "RENAME",
    "INSERT", "REPLACE", "TABLE", "VALUES",
];

/// Aggregate functions of MariaDB (and MySQL).
const AGGREGATES: &[&str] = &[
    "COUNT",
    "SUM",
    "MIN",
    "MAX",
    "AVG",
    "GROUP_CONCAT",
    "STD",
    "STDDEV",
    "STDDEV_POP",
    "STDDEV_SAMP",
    "VARIANCE",
    "VAR_POP",
    "VAR_SAMP",
    "BIT_AND",
    "BIT_OR",
    "BIT_XOR",
    "JSON_ARRAYAGG",
    "JSON_OBJECTAGG",
    "ANY_VALUE",
];

/// Analyzes `sql` with sqlparser.
///
/// # Errors
/// As [`super::analyze`].
pub(super) fn analyze(
    sql: &str,
    modes: Modes,
    shard_key: ShardKeyFn<'_>,
) -> Result<Analysis, RouteError> {
    let prep = prepare(sql, modes)?;
    let Some(first) = prep.first else {
        return Err(RouteError::syntax("empty statement"));
    };
    let routed = first.is(b'(')
        || (first.kind == Kind::Word
            && sql
                .get(first.start..first.end)
                .is_some_and(|w| ROUTED.iter().any(|k| w.eq_ignore_ascii_case(k))));
    let text = prep.text(sql);
    let dialect = MySqlDialect {};
    let parsed = Parser::new(&dialect)
        .with_options(ParserOptions::new().with_unescape(false))
        .try_with_sql(text)
        .and_then(|mut p| p.parse_statements());
    let mut stmts = match parsed {
        Ok(s) => s,
        Err(e) if routed => {
            return match super::ddl::tables(sql, modes) {
                Some(tables) => Ok(Analysis {
                    kind: StmtKind::Ddl,
                    ..other(tables)
                }),
                None => Err(RouteError::syntax(e.to_string())),
            }
        }
        Err(_) => return Ok(other(Vec::new())),
    };
    if stmts.len() != 1 {
        return Err(RouteError::syntax("not exactly one statement"));
    }
    let Some(stmt) = stmts.pop() else {
        return Err(RouteError::syntax("not exactly one statement"));
    };
    let mut w = Walker {
        sql,
        prep: &prep,
        index: LineIndex::new(text, 0),
        modes,
        shard_key,
        tables: Vec::new(),
        accounted: Vec::new(),
    };
    let mut a = w.statement(&stmt);
    w.unaccounted(&stmt);
    w.tables.sort_by_key(|(pos, _)| *pos);
    a.tables = w.tables.into_iter().map(|(_, t)| t).collect();
    Ok(a)
}

fn other(tables: Vec<TableUse>) -> Analysis {
    Analysis {
        kind: StmtKind::Other,
        tables,
        sets_shard_key: false,
        scatter: Ok(MergeSpec::default()),
        shard_sql: None,
        limit: None,
    }
}

/// The parts of a column reference, unquoted.
fn column_parts(e: &Expr) -> Option<Vec<String>> {
    match e {
        Expr::Identifier(i) => Some(vec![unquote(i)]),
        Expr::CompoundIdentifier(v) => Some(v.iter().map(unquote).collect()),
        _ => None,
    }
}

/// The AND-ed terms of a condition (parentheses looked through).
fn conjuncts<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            conjuncts(left, out);
            conjuncts(right, out);
        }
        Expr::Nested(inner) => conjuncts(inner, out),
        _ => out.push(e),
    }
}

/// The name of an aggregate function call, upper-case.
fn aggregate_name(f: &Function) -> Option<&'static str> {
    let [ObjectNamePart::Identifier(i)] = f.name.0.as_slice() else {
        return None;
    };
    if i.quote_style.is_some() {
        return None;
    }
    AGGREGATES
        .iter()
        .copied()
        .find(|a| i.value.eq_ignore_ascii_case(a))
}

/// Aggregates and window functions in an expression, outside its subqueries.
#[derive(Default)]
struct Funcs {
    depth: usize,
    aggregate: Option<&'static str>,
    window: bool,
}

impl Visitor for Funcs {
    type Break = ();

    fn pre_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.depth = self.depth.saturating_sub(1);
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if let (0, Expr::Function(f)) = (self.depth, e) {
            if f.over.is_some() {
                self.window = true;
            } else if let Some(a) = aggregate_name(f) {
                self.aggregate.get_or_insert(a);
            }
        }
        ControlFlow::Continue(())
    }
}

fn funcs<V: Visit>(node: &V) -> Funcs {
    let mut f = Funcs::default();
    let _ = node.visit(&mut f);
    f
}

/// A constant: literals, `?`, and operators over them.
fn is_const(e: &Expr) -> bool {
    match e {
        Expr::Value(_) => true,
        Expr::Nested(x) | Expr::UnaryOp { expr: x, .. } => is_const(x),
        Expr::Prefixed { value, .. } => is_const(value),
        Expr::BinaryOp { left, right, .. } => is_const(left) && is_const(right),
        _ => false,
    }
}

/// One aggregate select-list item.
fn aggregate(f: &Function, name: &str) -> Result<Agg, String> {
    let distinct = matches!(
        &f.args,
        FunctionArguments::List(l) if l.duplicate_treatment == Some(DuplicateTreatment::Distinct)
    );
    if f.filter.is_some() || !f.within_group.is_empty() || f.null_treatment.is_some() {
        return Err(format!("{name}() with FILTER/WITHIN GROUP"));
    }
    match (name, distinct) {
        ("COUNT", false) => Ok(Agg::Count),
        ("SUM", false) => Ok(Agg::Sum),
        ("MIN", _) => Ok(Agg::Min),
        ("MAX", _) => Ok(Agg::Max),
        ("COUNT" | "SUM", true) => Err(format!(
            "{name}(DISTINCT ...) (values on different shards may repeat)"
        )),
        _ => Err(format!(
            "{name}() (only COUNT, SUM, MIN and MAX combine across shards)"
        )),
    }
}

/// One select-list item.
fn item(e: &Expr, alias: Option<&Ident>) -> Result<Item, String> {
    let kind = match e {
        Expr::Function(f) if f.over.is_none() && aggregate_name(f).is_some() => {
            let column = match &f.args {
                FunctionArguments::List(l) if l.args.len() == 1 => match l.args.first() {
                    Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(a))) => {
                        column_parts(a).and_then(|mut p| p.pop())
                    }
                    _ => None,
                },
                _ => None,
            };
            ItemKind::Agg(aggregate(f, aggregate_name(f).unwrap_or_default())?, column)
        }
        _ => {
            let fs = funcs(e);
            if fs.window {
                return Err("window functions".into());
            }
            if let Some(a) = fs.aggregate {
                return Err(format!("{a}() inside an expression ({e})"));
            }
            match column_parts(e) {
                Some(mut parts) => {
                    let name = parts.pop().unwrap_or_default();
                    ItemKind::Column(parts, name)
                }
                None if is_const(e) => ItemKind::Const,
                None => ItemKind::Expr,
            }
        }
    };
    // Only expressions and constants can be matched by an ORDER BY
    // expression (or named in a reason).
    let text = matches!(kind, ItemKind::Expr | ItemKind::Const).then(|| e.to_string());
    Ok(Item {
        kind,
        alias: alias.map(unquote),
        text,
    })
}

/// Finds the queries nested in a node, outermost only, and walks each.
struct Nested<'w, 'a> {
    w: &'w mut Walker<'a>,
    ctes: &'w mut Vec<String>,
    depth: usize,
}

impl Visitor for Nested<'_, '_> {
    type Break = ();

    fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
        if self.depth == 0 {
            self.w.query(q, true, self.ctes);
        }
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.depth = self.depth.saturating_sub(1);
        ControlFlow::Continue(())
    }
}

struct Walker<'a> {
    /// The original text.
    sql: &'a str,
    prep: &'a Prep,
    /// Over the parser text.
    index: LineIndex<'a>,
    modes: Modes,
    shard_key: ShardKeyFn<'a>,
    /// Tables found, with their offset in the parser text (to sort them).
    tables: Vec<(usize, TableUse)>,
    /// Every relation name the walk has seen (tables and CTE references).
    accounted: Vec<(Option<String>, String)>,
}

impl<'a> Walker<'a> {
    /// Original byte offsets of a span.
    fn range(&self, span: Span) -> Option<(usize, usize)> {
        let s = self.index.byte(span.start)?;
        let e = self.index.byte(span.end)?;
        Some((self.prep.original(s), self.prep.original(e)))
    }

    /// `(schema, table, position)` of a table name.
    fn split(&self, name: &ObjectName) -> Option<(Option<String>, String, usize)> {
        let parts = idents(name)?;
        let (table, rest) = parts.split_last()?;
        let pos = parts
            .first()
            .and_then(|i| self.index.byte(i.span.start))
            .unwrap_or(usize::MAX);
        Some((rest.last().map(|s| unquote(s)), unquote(table), pos))
    }

    /// A table that is named but has no key bound (DDL, INSERT targets).
    fn add_name(&mut self, name: &ObjectName, in_subquery: bool) {
        if let Some((schema, table, pos)) = self.split(name) {
            self.accounted.push((schema.clone(), table.clone()));
            self.tables.push((
                pos,
                TableUse {
                    schema,
                    table,
                    key: KeyBound::Unbound,
                    in_subquery,
                },
            ));
        }
    }

    fn statement(&mut self, stmt: &Statement) -> Analysis {
        let mut a = other(Vec::new());
        match stmt {
            Statement::Query(q) => {
                a.kind = StmtKind::Select;
                self.query(q, false, &mut Vec::new());
                match self.scatter_query(q) {
                    Ok((spec, shard_sql, limit)) => {
                        a.scatter = Ok(spec);
                        a.shard_sql = shard_sql;
                        a.limit = limit;
                    }
                    Err(reason) => a.scatter = Err(reason),
                }
            }
            Statement::Update(u) => {
                a.kind = StmtKind::Update;
                let mut block = Vec::new();
                let mut ctes = Vec::new();
                self.factors(&u.table, &ctes, &mut block);
                a.sets_shard_key = u.assignments.iter().any(|asg| match &asg.target {
                    AssignmentTarget::ColumnName(n) => self.sets(&block, n),
                    AssignmentTarget::Tuple(v) => v.iter().any(|n| self.sets(&block, n)),
                });
                if let Some(
                    sqlparser::ast::UpdateTableFromKind::BeforeSet(f)
                    | sqlparser::ast::UpdateTableFromKind::AfterSet(f),
                ) = &u.from
                {
                    for twj in f {
                        self.factors(twj, &ctes, &mut block);
                    }
                }
                self.bind(u.selection.as_ref(), &mut block);
                self.finish(block, false);
                self.nested(u, &mut ctes);
                if u.limit.is_some() {
                    a.scatter = Err("UPDATE with LIMIT (each shard would apply the limit)".into());
                }
            }
            Statement::Delete(d) => {
                a.kind = StmtKind::Delete;
                let mut block = Vec::new();
                let mut ctes = Vec::new();
                let (sqlparser::ast::FromTable::WithFromKeyword(named)
                | sqlparser::ast::FromTable::WithoutKeyword(named)) = &d.from;
                let from = match &d.using {
                    Some(u) => {
                        // `DELETE FROM a, b USING ...`: the targets name
                        // tables of USING.
                        for twj in named {
                            self.factors(twj, &ctes, &mut Vec::new());
                        }
                        u
                    }
                    None => named,
                };
                for twj in from {
                    self.factors(twj, &ctes, &mut block);
                }
                self.bind(d.selection.as_ref(), &mut block);
                self.finish(block, false);
                self.nested(d, &mut ctes);
                if d.limit.is_some() {
                    a.scatter = Err("DELETE with LIMIT (each shard would apply the limit)".into());
                }
            }
            Statement::CreateTable(c) => {
                a.kind = StmtKind::Ddl;
                self.add_name(&c.name, false);
                match &c.like {
                    Some(CreateTableLikeKind::Plain(l) | CreateTableLikeKind::Parenthesized(l)) => {
                        self.add_name(&l.name, false)
                    }
                    None => {}
                }
                if let Some(n) = &c.clone {
                    self.add_name(n, false);
                }
                if let Some(q) = &c.query {
                    self.query(q, true, &mut Vec::new());
                }
            }
            Statement::AlterTable(t) => {
                a.kind = StmtKind::Ddl;
                self.add_name(&t.name, false);
                for op in &t.operations {
                    if let AlterTableOperation::RenameTable {
                        table_name: RenameTableNameKind::As(n) | RenameTableNameKind::To(n),
                    } = op
                    {
                        self.add_name(n, false);
                    }
                }
            }
            Statement::Drop {
                object_type: ObjectType::Table,
                names,
                ..
            } => {
                a.kind = StmtKind::Ddl;
                for n in names {
                    self.add_name(n, false);
                }
            }
            Statement::Drop {
                object_type: ObjectType::Index,
                table: Some(t),
                ..
            } => {
                a.kind = StmtKind::Ddl;
                self.add_name(t, false);
            }
            Statement::Truncate(t) => {
                a.kind = StmtKind::Ddl;
                for n in &t.table_names {
                    self.add_name(&n.name, false);
                }
            }
            Statement::CreateIndex(c) => {
                a.kind = StmtKind::Ddl;
                self.add_name(&c.table_name, false);
            }
            Statement::RenameTable(v) => {
                a.kind = StmtKind::Ddl;
                for r in v {
                    self.add_name(&r.old_name, false);
                    self.add_name(&r.new_name, false);
                }
            }
            Statement::Insert(i) => {
                if let TableObject::TableName(n) = &i.table {
                    self.add_name(n, false);
                }
                if let Some(q) = &i.source {
                    self.query(q, true, &mut Vec::new());
                }
            }
            _ => {}
        }
        a
    }

    /// Relations sqlparser sees that the walk did not list: listed as in a
    /// subquery, unbound.
    fn unaccounted(&mut self, stmt: &Statement) {
        let mut seen = Vec::new();
        let _ = visit_relations(stmt, |n| {
            if let Some(x) = self.split(n) {
                seen.push(x);
            }
            ControlFlow::<()>::Continue(())
        });
        for (schema, table, pos) in seen {
            match self
                .accounted
                .iter()
                .position(|(s, t)| *s == schema && *t == table)
            {
                Some(i) => {
                    self.accounted.swap_remove(i);
                }
                None => self.tables.push((
                    pos,
                    TableUse {
                        schema,
                        table,
                        key: KeyBound::Unbound,
                        in_subquery: true,
                    },
                )),
            }
        }
    }

    fn sets(&self, block: &[BlockTable], target: &ObjectName) -> bool {
        idents(target).is_some_and(|parts| {
            let parts: Vec<String> = parts.into_iter().map(unquote).collect();
            sets_key(block, &parts)
        })
    }

    /// Walks the queries nested anywhere in `node`.
    fn nested<V: Visit>(&mut self, node: &V, ctes: &mut Vec<String>) {
        if !self.prep.nested_queries {
            return;
        }
        let mut n = Nested {
            w: self,
            ctes,
            depth: 0,
        };
        let _ = node.visit(&mut n);
    }

    fn query(&mut self, q: &Query, sub: bool, ctes: &mut Vec<String>) {
        let base = ctes.len();
        if let Some(w) = &q.with {
            for cte in &w.cte_tables {
                let name = unquote(&cte.alias.name);
                if w.recursive {
                    ctes.push(name);
                    self.query(&cte.query, true, ctes);
                } else {
                    self.query(&cte.query, true, ctes);
                    ctes.push(name);
                }
            }
        }
        self.set_expr(&q.body, sub, ctes);
        if let Some(o) = &q.order_by {
            self.nested(o, ctes);
        }
        if let Some(l) = &q.limit_clause {
            self.nested(l, ctes);
        }
        if let Some(f) = &q.fetch {
            self.nested(f, ctes);
        }
        ctes.truncate(base);
    }

    fn set_expr(&mut self, s: &SetExpr, sub: bool, ctes: &mut Vec<String>) {
        match s {
            SetExpr::Select(sel) => self.select(sel, sub, ctes),
            SetExpr::Query(q) => self.query(q, sub, ctes),
            SetExpr::SetOperation { left, right, .. } => {
                self.set_expr(left, sub, ctes);
                self.set_expr(right, sub, ctes);
            }
            SetExpr::Table(t) => {
                if let Some(table) = &t.table_name {
                    self.tables.push((
                        usize::MAX,
                        TableUse {
                            schema: t.schema_name.clone(),
                            table: table.clone(),
                            key: KeyBound::Unbound,
                            in_subquery: sub,
                        },
                    ));
                }
            }
            other => self.nested(other, ctes),
        }
    }

    fn select(&mut self, s: &Select, sub: bool, ctes: &mut Vec<String>) {
        let mut block = Vec::new();
        for twj in &s.from {
            self.factors(twj, ctes, &mut block);
        }
        self.bind(s.selection.as_ref(), &mut block);
        self.finish(block, sub);
        self.nested(s, ctes);
    }

    /// The named tables of a FROM item (derived tables are nested queries).
    fn factors(&mut self, twj: &TableWithJoins, ctes: &[String], block: &mut Vec<BlockTable>) {
        self.factor(&twj.relation, ctes, block);
        for j in &twj.joins {
            self.factor(&j.relation, ctes, block);
        }
    }

    fn factor(&mut self, f: &TableFactor, ctes: &[String], block: &mut Vec<BlockTable>) {
        match f {
            TableFactor::Table { name, alias, .. } => {
                let Some((schema, table, pos)) = self.split(name) else {
                    return;
                };
                self.accounted.push((schema.clone(), table.clone()));
                if schema.is_none() && ctes.contains(&table) {
                    return;
                }
                let alias = alias.as_ref().map(|a| unquote(&a.name));
                block.push(BlockTable::new(schema, table, alias, pos, self.shard_key));
            }
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => self.factors(table_with_joins, ctes, block),
            _ => {}
        }
    }

    fn finish(&mut self, block: Vec<BlockTable>, sub: bool) {
        for t in block {
            let pos = t.pos;
            self.tables.push((pos, t.into_use(sub)));
        }
    }

    /// Binds the keys of `block` from the AND-ed terms of `selection`.
    fn bind(&self, selection: Option<&Expr>, block: &mut [BlockTable]) {
        let Some(sel) = selection else { return };
        // `||` / `&&`: sqlparser's precedence is not MariaDB's.
        if self.prep.logic_ops || block.iter().all(|t| t.key.is_none()) {
            return;
        }
        let mut terms = Vec::new();
        conjuncts(sel, &mut terms);
        for term in terms {
            match term {
                Expr::BinaryOp {
                    left,
                    op: BinaryOperator::Eq,
                    right,
                } => {
                    let pair = match (column_parts(left), column_parts(right)) {
                        (Some(c), _) => Some((c, &**right)),
                        (None, Some(c)) => Some((c, &**left)),
                        (None, None) => None,
                    };
                    if let Some((col, v)) = pair {
                        if let Some(v) = self.key_arg(v) {
                            offer(block, &col, &[v]);
                        }
                    }
                }
                Expr::InList {
                    expr,
                    list,
                    negated: false,
                } => {
                    if let Some(col) = column_parts(expr) {
                        let values: Option<Vec<KeyArg>> =
                            list.iter().map(|e| self.key_arg(e)).collect();
                        if let Some(values) = values {
                            offer(block, &col, &values);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// A key literal, read from the original text through [`literal`].
    fn key_arg(&self, e: &Expr) -> Option<KeyArg> {
        let (span, sign) = match e {
            Expr::Value(v) => match &v.value {
                Value::Null => return Some(KeyArg::Value(KeyValue::Null)),
                Value::Number(..)
                | Value::SingleQuotedString(_)
                | Value::DoubleQuotedString(_)
                | Value::NationalStringLiteral(_)
                | Value::Placeholder(_) => (v.span, Sign::None),
                _ => return None,
            },
            Expr::UnaryOp { op, expr } => match (op, &**expr) {
                (UnaryOperator::Minus | UnaryOperator::Plus, Expr::Value(v))
                    if matches!(v.value, Value::Number(..)) =>
                {
                    let sign = if *op == UnaryOperator::Minus {
                        Sign::Minus
                    } else {
                        Sign::Plus
                    };
                    (v.span, sign)
                }
                _ => return None,
            },
            Expr::Prefixed { prefix, value } => match &**value {
                Expr::Value(v)
                    if matches!(
                        v.value,
                        Value::SingleQuotedString(_) | Value::DoubleQuotedString(_)
                    ) =>
                {
                    (Span::new(prefix.span.start, v.span.end), Sign::None)
                }
                _ => return None,
            },
            _ => return None,
        };
        let (start, end) = self.range(span)?;
        // sqlparser joins adjacent literals ('a' 'b') and spans the first.
        if token_at(self.sql, end, self.modes).is_some_and(|t| t.kind == Kind::Str) {
            return None;
        }
        let toks = tokens_in(self.sql, start, end, self.modes);
        let params = &self.prep.params;
        literal(self.sql, &toks, sign, self.modes, &|t| {
            params.binary_search(&t.start).ok()
        })
    }

    /// The merge of the top-level query, and the text to send shards.
    fn scatter_query(
        &self,
        q: &Query,
    ) -> Result<(MergeSpec, Option<String>, Option<Limit>), String> {
        if q.fetch.is_some() {
            return Err("FETCH FIRST".into());
        }
        if q.for_clause.is_some()
            || q.settings.is_some()
            || q.format_clause.is_some()
            || !q.pipe_operators.is_empty()
        {
            return Err("this query form".into());
        }
        let bare = q.order_by.is_none() && q.limit_clause.is_none();
        match &*q.body {
            SetExpr::Select(s) => {
                self.scatter_select(s, q.order_by.as_ref(), q.limit_clause.as_ref())
            }
            SetExpr::Query(inner) if bare => self.scatter_query(inner),
            SetExpr::Query(_) => Err("ORDER BY or LIMIT outside a parenthesized SELECT".into()),
            SetExpr::SetOperation {
                op, set_quantifier, ..
            } => Err(format!("{op} {set_quantifier}").trim_end().to_string()),
            SetExpr::Values(_) | SetExpr::Table(_) if bare => {
                Ok((MergeSpec::default(), None, None))
            }
            _ => Err("this query form".into()),
        }
    }

    fn scatter_select(
        &self,
        s: &Select,
        order_by: Option<&OrderBy>,
        limit: Option<&LimitClause>,
    ) -> Result<(MergeSpec, Option<String>, Option<Limit>), String> {
        match &s.distinct {
            None | Some(Distinct::All) => {}
            Some(_) => return Err("DISTINCT".into()),
        }
        if s.select_modifiers
            .as_ref()
            .is_some_and(|m| m.sql_calc_found_rows)
        {
            return Err("SQL_CALC_FOUND_ROWS".into());
        }
        if s.into.is_some() {
            return Err("SELECT ... INTO".into());
        }
        match &s.group_by {
            GroupByExpr::Expressions(v, m) if v.is_empty() && m.is_empty() => {}
            _ => return Err("GROUP BY".into()),
        }
        if s.having.is_some() {
            return Err("HAVING".into());
        }
        if !s.named_window.is_empty() {
            return Err("window functions".into());
        }
        if s.top.is_some()
            || s.exclude.is_some()
            || !s.lateral_views.is_empty()
            || s.prewhere.is_some()
            || !s.connect_by.is_empty()
            || !s.cluster_by.is_empty()
            || !s.distribute_by.is_empty()
            || !s.sort_by.is_empty()
            || s.qualify.is_some()
            || s.value_table_mode.is_some()
        {
            return Err("this SELECT form".into());
        }
        let mut items = Vec::with_capacity(s.projection.len());
        for p in &s.projection {
            items.push(match p {
                SelectItem::Wildcard(_) => Item {
                    kind: ItemKind::Star(Vec::new()),
                    alias: None,
                    text: None,
                },
                SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(n),
                    _,
                ) => {
                    let parts = idents(n).ok_or("this select list")?;
                    Item {
                        kind: ItemKind::Star(parts.into_iter().map(unquote).collect()),
                        alias: None,
                        text: None,
                    }
                }
                SelectItem::UnnamedExpr(e) => item(e, None)?,
                SelectItem::ExprWithAlias { expr, alias } => item(expr, Some(alias))?,
                _ => return Err("this select list".into()),
            });
        }
        let aggregates = scatter::aggregates(&items)?;
        let mut spec = MergeSpec {
            item_collations: scatter::item_collations(&items),
            agg_columns: match aggregates {
                Some(_) => scatter::agg_columns(&items),
                None => Vec::new(),
            },
            aggregates,
            ..MergeSpec::default()
        };
        if let Some(o) = order_by {
            let OrderByKind::Expressions(keys) = &o.kind else {
                return Err("ORDER BY ALL".into());
            };
            if o.interpolate.is_some() {
                return Err("this ORDER BY form".into());
            }
            if spec.aggregates.is_none() {
                for k in keys {
                    let fs = funcs(&k.expr);
                    if fs.window {
                        return Err("window functions".into());
                    }
                    if let Some(a) = fs.aggregate {
                        return Err(format!("{a}() in ORDER BY"));
                    }
                    if k.options.nulls_first.is_some() || k.with_fill.is_some() {
                        return Err("this ORDER BY form".into());
                    }
                    let desc = match &k.options.sort {
                        None | Some(OrderBySort::Asc) => false,
                        Some(OrderBySort::Desc) => true,
                        Some(_) => return Err("this ORDER BY form".into()),
                    };
                    spec.order_by
                        .push(scatter::order_key(&items, &order_target(&k.expr), desc)?);
                }
            }
        }
        let limit = match limit {
            None => None,
            Some(LimitClause::LimitOffset {
                limit: Some(l),
                offset,
                limit_by,
            }) if limit_by.is_empty() => {
                let (count, start, end) = self.limit_value(l)?;
                match offset {
                    None => Some(Limit {
                        count,
                        offset: None,
                        start,
                        end,
                    }),
                    Some(o) if o.rows == OffsetRows::None => {
                        let (offset, _, end) = self.limit_value(&o.value)?;
                        Some(Limit {
                            count,
                            offset: Some(offset),
                            start,
                            end,
                        })
                    }
                    Some(_) => return Err("this LIMIT form".into()),
                }
            }
            Some(LimitClause::OffsetCommaLimit { offset, limit }) => {
                let (offset, start, _) = self.limit_value(offset)?;
                let (count, _, end) = self.limit_value(limit)?;
                Some(Limit {
                    count,
                    offset: Some(offset),
                    start,
                    end,
                })
            }
            Some(_) => return Err("this LIMIT form".into()),
        };
        let shard_sql = scatter::apply_limit(self.sql, &mut spec, limit)?;
        Ok((spec, shard_sql, limit))
    }

    /// A LIMIT number and its original byte range.
    fn limit_value(&self, e: &Expr) -> Result<(LimitArg, usize, usize), String> {
        match e {
            Expr::Value(v) => match &v.value {
                Value::Number(s, _) => {
                    let n = scatter::limit_number(s)?;
                    let (start, end) = self.range(v.span).ok_or("LIMIT position")?;
                    Ok((LimitArg::Value(n), start, end))
                }
                Value::Placeholder(_) => {
                    let (start, end) = self.range(v.span).ok_or("LIMIT position")?;
                    let i = self
                        .prep
                        .params
                        .binary_search(&start)
                        .map_err(|_| "LIMIT with a parameter idgate cannot place")?;
                    Ok((LimitArg::Param(i), start, end))
                }
                _ => Err(format!("LIMIT {e} (only integer literals)")),
            },
            _ => Err(format!("LIMIT {e} (only integer literals)")),
        }
    }
}

/// What an ORDER BY expression names.
fn order_target(e: &Expr) -> OrderTarget {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(s, _) => OrderTarget::Position(s.clone()),
            Value::Placeholder(_) => OrderTarget::Param,
            _ => OrderTarget::Expr(e.to_string()),
        },
        _ => match column_parts(e) {
            Some(mut parts) => {
                let name = parts.pop().unwrap_or_default();
                OrderTarget::Column(parts, name)
            }
            None => OrderTarget::Expr(e.to_string()),
        },
    }
}
