//! Routing statements on sharded and broadcast tables.
//!
//! - INSERT/REPLACE into a rule table is placed by `write::split` (each
//!   row to the shard its shard key maps to, split per shard, every copy of
//!   a broadcast table); here only the other statements on routed tables.
//! - SELECT/UPDATE/DELETE: with the shard key bound by `=`/`IN`, only the
//!   matching shards; otherwise every shard of the table. A SELECT on several
//!   shards is scattered and merged as its rows come (`scatter.rs`,
//!   `stream.rs`); a cursor on one pulls through the merge (`cursor.rs`).
//! - DDL on a sharded or broadcast table runs on every shard of it.
//! - A write to several shards runs as one XA transaction outside a
//!   transaction (`xa.rs`) and is refused inside one (`txn.rs`).
//!
//! Statements that name no sharded or broadcast table go to the default
//! shard, as without sharding.

pub mod cursor;
pub mod diag;
pub mod scatter;
pub mod stream;

use crate::collation::Charset;
use crate::frontend::errors::refuse;
use crate::frontend::oks::{combined_ok, one_copy};
use crate::frontend::session::stmt::LimitRewrite;
use crate::frontend::session::{CmdError, Session};
use crate::frontend::shardkey::{self, key_value, KeyCtx, KeyType, Purpose};
use crate::protocol::codes::ErrorCode;
use crate::protocol::consts::{cap, cmd};
use crate::protocol::response::Expect;
use crate::rules::{RuleSet, TableEntry};
use crate::shard::placement::{KeyValue, Placement};
use crate::sql::lexer::Modes;
use crate::sql::route::{self as analysis, Analysis, KeyArg, KeyBound, LimitArg, StmtKind};
use crate::sql::statement::{first_keyword, keyword_start};
use std::sync::Arc;

/// Incorrect arguments (a LIMIT parameter that is not a count).
const ER_WRONG_ARGUMENTS: ErrorCode = ErrorCode {
    code: 1210,
    state: "HY000",
};

/// Where a statement goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::frontend) enum Target {
    /// One shard: the statement is relayed as it is.
    One(usize),
    /// Several shards (ascending).
    Many(Vec<usize>),
}

impl Target {
    fn from_set(mut shards: Vec<usize>) -> Target {
        shards.sort_unstable();
        shards.dedup();
        match shards.as_slice() {
            [one] => Target::One(*one),
            _ => Target::Many(shards),
        }
    }

    pub(in crate::frontend) fn shards(&self) -> &[usize] {
        match self {
            Target::One(s) => std::slice::from_ref(s),
            Target::Many(v) => v,
        }
    }
}

/// An analysis failure, as the client sees it.
fn route_error(e: analysis::RouteError) -> CmdError {
    CmdError::Refused(
        ErrorCode {
            code: e.code(),
            state: e.sqlstate(),
        },
        e.to_string(),
    )
}

/// The shard(s) a table's rows with key values `key` are on.
fn shards_of(
    entry: &TableEntry,
    placement: &Placement,
    key: &KeyBound,
    params: &dyn Fn(usize) -> Option<KeyValue>,
    (ty, charset): (Option<KeyType>, Charset),
) -> Result<Vec<usize>, CmdError> {
    if placement.is_broadcast() {
        return Ok(placement.shards().to_vec());
    }
    let values = match key {
        KeyBound::Values(v) if !v.is_empty() => v,
        _ => return Ok(placement.shards().to_vec()),
    };
    let mut out = Vec::with_capacity(values.len());
    for v in values {
        let value = match v {
            KeyArg::Value(v) => v.clone(),
            KeyArg::Param(i) => match params(*i) {
                Some(v) => v,
                None => return Ok(placement.shards().to_vec()),
            },
        };
        let value = match shardkey::canonical(&value, placement, ty, charset, Purpose::Lookup) {
            Ok(Some(v)) => v,
            // Rows on several shards may match (a number for a string key).
            Ok(None) => return Ok(placement.shards().to_vec()),
            Err(e) => {
                return Err(refuse(format!(
                    "table {}: shard key `{}`: {e}",
                    entry.rule().name,
                    entry.shard_key().unwrap_or_default()
                )))
            }
        };
        match placement.shard_of(&value) {
            Ok(s) => out.push(s),
            // `key = NULL` matches no row: any one shard answers that.
            Err(_) if value == KeyValue::Null => out.push(placement.read_shard()),
            Err(e) => {
                return Err(refuse(format!(
                    "table {}: shard key `{}`: {e}",
                    entry.rule().name,
                    entry.shard_key().unwrap_or_default()
                )))
            }
        }
    }
    Ok(out)
}

/// What routing decided for a SELECT/UPDATE/DELETE.
pub(in crate::frontend) struct Routed {
    pub target: Target,
    pub analysis: Analysis,
    /// A write whose target shards hold copies of the same rows (broadcast
    /// tables): the client is told what one copy did, not the sum.
    pub copies: bool,
}

/// Decides where a statement with `analysis` goes. `params(i)` is the
/// value bound to the statement's `?` number `i` (prepared statements).
pub(in crate::frontend) fn decide(
    rules: &RuleSet,
    schema: Option<&str>,
    analysis: Analysis,
    params: &dyn Fn(usize) -> Option<KeyValue>,
    keys: &KeyCtx,
) -> Result<Option<Routed>, CmdError> {
    // (rule name, shards, in a subquery) per sharded or broadcast table.
    let mut sharded: Vec<(&str, Vec<usize>, bool)> = Vec::new();
    // Every table written is a broadcast table.
    let mut copies = true;
    let mut broadcast_only: Option<Vec<usize>> = None;
    // Index in `analysis.tables` of the first table on the default shard.
    let mut default_table = None;
    // Index of the first sharded table (whose MIN/MAX columns the merge reads).
    let mut first_sharded = None;
    let is_write = matches!(analysis.kind, StmtKind::Update | StmtKind::Delete);
    let is_ddl = analysis.kind == StmtKind::Ddl;
    for (i, t) in analysis.tables.iter().enumerate() {
        let s = t.schema.as_deref().or(schema);
        match rules
            .entry(s, &t.table)
            .and_then(|e| Some((e, e.placement()?)))
        {
            Some((e, p)) if p.is_broadcast() => {
                let on = if is_write || is_ddl {
                    p.shards().to_vec()
                } else {
                    vec![p.read_shard()]
                };
                if is_write || is_ddl {
                    sharded.push((&e.rule().name, on, t.in_subquery));
                } else {
                    broadcast_only.get_or_insert(on);
                }
            }
            Some((e, p)) => {
                copies = false;
                first_sharded.get_or_insert(i);
                let key = if is_ddl { &KeyBound::Unbound } else { &t.key };
                let ty = keys.types.get(i).copied().flatten();
                let on = shards_of(e, p, key, params, (ty, keys.charset))?;
                sharded.push((&e.rule().name, on, t.in_subquery));
            }
            None => {
                // A view over a sharded table shows one shard's rows.
                if let (false, Some((view, table))) =
                    (is_ddl, rules.views().over_sharded(s, &t.table))
                {
                    return Err(refuse(format!(
                        "view {view} reads sharded table {table}, and each shard's copy of the view sees that shard's rows only; query {table} itself"
                    )));
                }
                default_table.get_or_insert(i);
            }
        }
    }
    if sharded.is_empty() {
        // Only broadcast tables (reads) or none: one shard answers. With
        // other tables in the statement, they live on the default shard,
        // and so does every broadcast table.
        return Ok(match (broadcast_only, default_table.is_none()) {
            (Some(on), true) => Some(Routed {
                target: Target::from_set(on),
                analysis,
                copies: false,
            }),
            _ => None,
        });
    }
    if is_ddl {
        let all: Vec<usize> = sharded.iter().flat_map(|(_, s, _)| s.clone()).collect();
        return Ok(Some(Routed {
            target: Target::from_set(all),
            analysis,
            copies: false,
        }));
    }
    let target = Target::from_set(sharded[0].1.clone());
    let single = matches!(target, Target::One(_));
    for (name, on, _) in &sharded[1..] {
        if Target::from_set(on.clone()) != target || !single {
            return Err(refuse(format!(
                "this statement joins sharded tables {} and {name} across shards; it can only run when all of them route to the same single shard (bind their shard keys)",
                sharded[0].0
            )));
        }
    }
    if let Some((name, _, _)) = sharded.iter().find(|(_, _, sub)| *sub) {
        if !single {
            return Err(refuse(format!(
                "a subquery over sharded table {name} cannot be answered across shards; bind its shard key so that the statement routes to one shard"
            )));
        }
    }
    if let (Some(i), false) = (default_table, target == Target::One(0)) {
        return Err(refuse(format!(
            "this statement uses table {} (on the default shard) with sharded table {} on other shards; it can only run where both are",
            analysis.tables[i].table, sharded[0].0
        )));
    }
    if analysis.sets_shard_key {
        return Err(refuse(format!(
            "an UPDATE may not change the shard key of table {} (the row would have to move to another shard: delete and insert it instead)",
            sharded[0].0
        )));
    }
    let mut analysis = analysis;
    if let (Some(i), Ok(spec)) = (first_sharded, analysis.scatter.as_mut()) {
        if !spec.agg_columns.is_empty() {
            let t = &analysis.tables[i];
            spec.table = Some((t.schema.clone(), t.table.clone()));
        }
    }
    Ok(Some(Routed {
        target,
        analysis,
        copies: copies && is_write,
    }))
}

/// MariaDB's `SET STATEMENT var = value FOR stmt`, in a query that names
/// a sharded or broadcast table: `stmt` is not routed (it would run on the
/// first shard only), so it is refused, naming the table.
fn set_statement_not_routed(
    rules: &RuleSet,
    schema: Option<&str>,
    sql: &str,
    m: crate::sql::lexer::Modes,
) -> Result<(), CmdError> {
    let Some(body) = crate::sql::statement::keyword::set_statement_body(sql.as_bytes()) else {
        return Ok(());
    };
    let key_of = shard_key_of(rules, schema);
    let table = analysis::analyze(&String::from_utf8_lossy(&body), m, &key_of)
        .ok()
        .and_then(|a| {
            a.tables.into_iter().find(|t| {
                rules
                    .entry(t.schema.as_deref().or(schema), &t.table)
                    .is_some_and(|e| e.placement().is_some())
            })
        })
        .map_or_else(|| "a sharded or broadcast table".to_string(), |t| t.table);
    Err(refuse(format!(
        "a statement under SET STATEMENT ... FOR that uses sharded table {table} is not supported (it would run on one shard only); set the variables with SET SESSION around it"
    )))
}

/// `CREATE [OR REPLACE]/ALTER/DROP DATABASE|SCHEMA`.
fn is_database_ddl(first: &[u8; 8], sql: &[u8]) -> bool {
    if !matches!(first, b"CREATE\0\0" | b"ALTER\0\0\0" | b"DROP\0\0\0\0") {
        return false;
    }
    let sql = &*crate::sql::statement::keyword::code(sql);
    let Ok(text) = std::str::from_utf8(&sql[keyword_start(sql)..]) else {
        return false;
    };
    let mut words = text.split_ascii_whitespace().skip(1);
    let mut second = words.next().unwrap_or("");
    if first == b"CREATE\0\0" && second.eq_ignore_ascii_case("OR") {
        if !words
            .next()
            .is_some_and(|w| w.eq_ignore_ascii_case("REPLACE"))
        {
            return false;
        }
        second = words.next().unwrap_or("");
    }
    second.eq_ignore_ascii_case("DATABASE") || second.eq_ignore_ascii_case("SCHEMA")
}

/// Statements that only read a table's definition, answered by any shard
/// that has the table.
fn reads_metadata(first: &[u8; 8]) -> bool {
    matches!(
        first,
        b"SHOW\0\0\0\0" | b"DESCRIBE" | b"DESC\0\0\0\0" | b"EXPLAIN\0" | b"HELP\0\0\0\0"
    )
}

/// How a SELECT that runs on several shards is merged, or why it cannot be.
fn scatter_spec(a: &Analysis) -> Result<crate::shard::merge::MergeSpec, CmdError> {
    a.scatter.clone().map_err(|reason| {
        refuse(format!(
            "this SELECT would have to run on several shards, and {reason}; bind the shard key so that it routes to one shard"
        ))
    })
}

/// Whether `sql` names a sharded or broadcast table anywhere, or a view
/// over a sharded table (refused in [`decide`]) (cheap: one pass of the
/// tokenizer, no parse).
pub(in crate::frontend) fn mentions_routed(rules: &RuleSet, sql: &str, modes: Modes) -> bool {
    let views = rules.views();
    crate::sql::mentions_table(sql, modes, &|name| {
        rules.has_sharded_table_name(name) || views.has_sharded_name(name)
    })
}

/// The shard key of `schema.table`, for the analysis.
pub(in crate::frontend) fn shard_key_of<'r>(
    rules: &'r RuleSet,
    schema: Option<&str>,
) -> impl Fn(Option<&str>, &str) -> Option<Arc<str>> + 'r {
    let schema = schema.map(str::to_string);
    move |s: Option<&str>, t: &str| {
        // Shared, not allocated per statement.
        rules
            .entry(s.or(schema.as_deref()), t)?
            .shard_key_arc()
            .cloned()
    }
}

/// What [`Session::query_routed`] did with a COM_QUERY.
pub(in crate::frontend) enum QueryRoute {
    /// It names no sharded or broadcast table: the caller handles it.
    NotRouted,
    /// Answered.
    Done,
    /// Several statements (`CLIENT_MULTI_STATEMENTS`) naming a routed
    /// table: each is to run as if sent alone, by the engine.
    Several(Vec<std::ops::Range<usize>>),
}

impl Session {
    /// COM_QUERY on a server with sharded tables, for statements other than
    /// INSERTs into rule tables (those are planned by `inject`): `Ok(QueryRoute::NotRouted)`
    /// when the statement names no sharded or broadcast table.
    pub(in crate::frontend) async fn query_routed(
        &mut self,
        payload: &[u8],
    ) -> Result<QueryRoute, CmdError> {
        let Some(rules) = self.rules.clone() else {
            return Ok(QueryRoute::NotRouted);
        };
        let Ok(sql) = std::str::from_utf8(&payload[1..]) else {
            return Ok(QueryRoute::NotRouted);
        };
        let first = first_keyword(sql.as_bytes());
        if is_database_ddl(&first, sql.as_bytes()) {
            // One logical database: its schema exists on every shard.
            let all = Target::Many((0..self.backends.len()).collect());
            self.ddl_routed(payload, &all).await?;
            return Ok(QueryRoute::Done);
        }
        let insert = matches!(&first, b"INSERT\0\0" | b"REPLACE\0");
        let m = self.sql_modes().await?.lexer();
        if !mentions_routed(&rules, sql, m) {
            return Ok(QueryRoute::NotRouted);
        }
        set_statement_not_routed(&rules, self.schema.as_deref(), sql, m)?;
        // Several statements: each runs as if sent alone (the engine's
        // `multi.rs`).
        if self.login.capabilities & cap::MULTI_STATEMENTS != 0 {
            if let Some(parts) = crate::sql::statement::split_statements(sql, m) {
                return Ok(QueryRoute::Several(parts));
            }
        }
        if insert {
            // INSERTs into rule tables are planned by `inject`; here only
            // the ones that read a sharded table (INSERT ... SELECT), which
            // would see one shard's rows.
            if !crate::sql::mentions_table(sql, m, &|w| w.eq_ignore_ascii_case("SELECT")) {
                return Ok(QueryRoute::NotRouted);
            }
            let schema = self.schema.clone();
            let key_of = shard_key_of(&rules, schema.as_deref());
            let a = analysis::analyze(sql, m, &key_of).map_err(route_error)?;
            let reads = a.tables.iter().find(|t| {
                t.in_subquery
                    && rules
                        .entry(t.schema.as_deref().or(schema.as_deref()), &t.table)
                        .is_some_and(|e| e.placement().is_some())
            });
            if let Some(t) = reads {
                return Err(refuse(format!(
                    "an INSERT ... SELECT that reads sharded or broadcast table {} is not supported (it would read one shard's rows only)",
                    t.table
                )));
            }
            return Ok(QueryRoute::NotRouted);
        }
        if crate::sql::statement_count(sql, m) > 1 {
            return Err(refuse(
                "a query of several statements that uses sharded tables is not supported; send its statements one by one".into(),
            ));
        }
        let schema = self.schema.clone();
        let key_of = shard_key_of(&rules, schema.as_deref());
        let a = analysis::analyze(sql, m, &key_of).map_err(route_error)?;
        if reads_metadata(&first) {
            // DESCRIBE t, SHOW CREATE TABLE t, EXPLAIN ...: every shard of
            // the table has the same definition; the first one answers.
            let shard = a.tables.iter().find_map(|t| {
                let e = rules.entry(t.schema.as_deref().or(schema.as_deref()), &t.table)?;
                e.placement().map(|p| p.shards()[0])
            });
            return match shard {
                Some(s) => self
                    .forward(s, payload, Expect::Results)
                    .await
                    .map(|_| QueryRoute::Done),
                None => Ok(QueryRoute::NotRouted),
            };
        }
        let keys = self.key_ctx(&rules, schema.as_deref(), &a).await?;
        let Some(routed) = decide(&rules, schema.as_deref(), a, &|_| None, &keys)? else {
            return Ok(QueryRoute::NotRouted);
        };
        match routed.analysis.kind {
            StmtKind::Select => self.select_routed(payload, routed).await?,
            StmtKind::Update if &first == b"UPDATE\0\0" => {
                // An UPDATE of a rule table's id column: the highest id it
                // stores is read back and observed (`capture.rs`).
                let found = crate::sql::update::analyze(
                    sql,
                    0,
                    sql.len(),
                    m,
                    &rules,
                    schema.as_deref(),
                )
                .map_err(CmdError::Sql)?;
                match found {
                    None => {
                        self.write_routed(payload, &routed.target, routed.copies)
                            .await?
                    }
                    Some(u) => {
                        let mut text = String::with_capacity(payload.len() + 96);
                        text.push(char::from(crate::protocol::consts::cmd::QUERY));
                        text.push_str(sql.get(..u.append_at).unwrap_or(sql));
                        crate::sql::update::push_capture(&mut text, u.entry.quoted_column());
                        text.push_str(sql.get(u.append_at..).unwrap_or(""));
                        let c = crate::frontend::session::readback::Captured {
                            generator: u.entry.generator(),
                            captures: &[],
                            highest: true,
                            report_last: None,
                            shards: match &routed.target {
                                Target::One(s) => vec![*s],
                                Target::Many(v) => v.clone(),
                            },
                        };
                        let release = self.start_captures();
                        let result = self
                            .write_routed(text.as_bytes(), &routed.target, routed.copies)
                            .await;
                        if result.is_err() {
                            self.release_held(release).await?;
                            return result.map(|_| QueryRoute::Done);
                        }
                        self.finish_captures(std::slice::from_ref(&c), release)
                            .await?;
                    }
                }
            }
            StmtKind::Update | StmtKind::Delete => {
                self.write_routed(payload, &routed.target, routed.copies)
                    .await?
            }
            StmtKind::Ddl => self.ddl_routed(payload, &routed.target).await?,
            StmtKind::Other => match routed.target {
                Target::One(s) => {
                    self.forward(s, payload, Expect::Results).await?;
                }
                Target::Many(_) => {
                    return Err(refuse(
                        "this statement uses sharded tables in a way idgate cannot route (only SELECT, INSERT, UPDATE, DELETE, DDL and metadata statements are)".into(),
                    ))
                }
            },
        }
        Ok(QueryRoute::Done)
    }

    async fn select_routed(&mut self, payload: &[u8], routed: Routed) -> Result<(), CmdError> {
        match &routed.target {
            Target::One(s) => {
                self.sync_last_id(*s, &payload[1..]).await?;
                self.forward(*s, payload, Expect::Results).await.map(|_| ())
            }
            Target::Many(shards) => {
                let spec = scatter_spec(&routed.analysis)?;
                let rewritten;
                let payload = match &routed.analysis.shard_sql {
                    Some(sql) => {
                        rewritten =
                            [&[crate::protocol::consts::cmd::QUERY][..], sql.as_bytes()].concat();
                        &rewritten[..]
                    }
                    None => payload,
                };
                let parts = shards.iter().map(|&s| (s, payload.to_vec())).collect();
                self.scatter(parts, &spec, crate::shard::merge::Protocol::Text)
                    .await
            }
        }
    }

    /// UPDATE/DELETE (text): one shard, or all of `target` atomically.
    async fn write_routed(
        &mut self,
        payload: &[u8],
        target: &Target,
        copies: bool,
    ) -> Result<(), CmdError> {
        self.check_write(target.shards())?;
        match target {
            Target::One(s) => {
                self.sync_last_id(*s, &payload[1..]).await?;
                self.forward(*s, payload, Expect::Results).await?;
                self.note_last_id_change(*s, &payload[1..]);
                Ok(())
            }
            Target::Many(shards) => {
                let parts: Vec<(usize, Vec<u8>)> =
                    shards.iter().map(|&s| (s, payload.to_vec())).collect();
                let oks = self.run_write(parts, false).await?;
                let ok = combined_ok(one_copy(&oks, copies), 0, 0, &|_| 0);
                self.reply_packet(&ok).await
            }
        }
    }

    /// DDL on a sharded or broadcast table: on every shard of it, one after
    /// the other; the first failure stops it and is reported with the
    /// shard's name (DDL is not transactional: the shards before it keep the
    /// change, as the message says).
    async fn ddl_routed(&mut self, payload: &[u8], target: &Target) -> Result<(), CmdError> {
        self.shared.columns.clear();
        let shards = target.shards().to_vec();
        let mut last = None;
        for (n, &s) in shards.iter().enumerate() {
            let b = self.backend(s).await.map_err(CmdError::Backend)?;
            match b.run(payload, Expect::Results).await {
                Ok(packets) => last = Some(packets),
                Err(e @ crate::backend::BackendError::Server { .. }) => {
                    let done: Vec<String> = shards[..n]
                        .iter()
                        .filter_map(|&i| self.shared.config.shards.get(i))
                        .map(|s| s.name.clone())
                        .collect();
                    let mut err = crate::frontend::session::shard_error(e);
                    if let (CmdError::Reply(p), false) = (&mut err, done.is_empty()) {
                        p.extend_from_slice(
                            format!(" (the statement already ran on shard {})", done.join(", "))
                                .as_bytes(),
                        );
                    }
                    return Err(err);
                }
                Err(e) => return Err(CmdError::Backend(e)),
            }
        }
        match last.and_then(|p| p.last().cloned()) {
            Some(ok) => self.reply_packet(&ok).await,
            None => self.send_ok(self.next_seq, self.status()).await,
        }
    }
}

impl Session {
    /// COM_STMT_PREPARE of a statement that is not an INSERT into a rule
    /// table: its routing analysis when it names a sharded or broadcast
    /// table, and the shard to prepare it on first.
    pub(in crate::frontend) async fn prepare_route(
        &mut self,
        payload: &[u8],
    ) -> Result<(Option<Arc<Analysis>>, usize), CmdError> {
        let Some(rules) = self.rules.clone() else {
            return Ok((None, 0));
        };
        let Ok(sql) = std::str::from_utf8(&payload[1..]) else {
            return Ok((None, 0));
        };
        let m = self.sql_modes().await?.lexer();
        if !mentions_routed(&rules, sql, m) {
            return Ok((None, 0));
        }
        set_statement_not_routed(&rules, self.schema.as_deref(), sql, m)?;
        let schema = self.schema.clone();
        let key_of = shard_key_of(&rules, schema.as_deref());
        let a = analysis::analyze(sql, m, &key_of).map_err(route_error)?;
        if !matches!(
            a.kind,
            StmtKind::Select | StmtKind::Update | StmtKind::Delete
        ) {
            return Ok((None, 0));
        }
        // Where the table is (its first shard); errors that depend on the
        // values bound are reported at execute.
        let first = match decide(
            &rules,
            schema.as_deref(),
            a.clone(),
            &|_| None,
            &KeyCtx::default(),
        ) {
            Ok(Some(r)) => r.target.shards()[0],
            _ => 0,
        };
        Ok((Some(Arc::new(a)), first))
    }

    /// For a prepared SELECT (`a`, of `sql`) on a sharded table whose LIMIT
    /// has a `?` or an offset: where its LIMIT becomes `?, ?`, the text the
    /// shards prepare, and the number of `?` the client wrote.
    pub(in crate::frontend) async fn limit_rewrite(
        &mut self,
        a: &Analysis,
        sql: &[u8],
    ) -> Result<Option<(LimitRewrite, String, usize)>, CmdError> {
        let (Some(l), StmtKind::Select, Some(rules)) = (a.limit, a.kind, self.rules.clone()) else {
            return Ok(None);
        };
        if !l.rebound() {
            return Ok(None);
        }
        let key_of = shard_key_of(&rules, self.schema.as_deref());
        if !a
            .tables
            .iter()
            .any(|t| key_of(t.schema.as_deref(), &t.table).is_some())
        {
            return Ok(None);
        }
        let Ok(sql) = std::str::from_utf8(sql) else {
            return Ok(None);
        };
        let (Some(before), Some(after)) = (sql.get(..l.start), sql.get(l.end..)) else {
            return Ok(None);
        };
        let m = self.sql_modes().await?.lexer();
        let mut lx = crate::sql::lexer::Lexer::new(sql, 0, m);
        let (mut at, mut total) = (0usize, 0usize);
        while let Some(t) = lx.next_token() {
            if t.kind == crate::sql::lexer::Kind::Param {
                total += 1;
                if t.start < l.start {
                    at += 1;
                }
            }
        }
        let taken = usize::from(matches!(l.count, LimitArg::Param(_)))
            + usize::from(matches!(l.offset, Some(LimitArg::Param(_))));
        let text = format!("{before}?, ?{after}");
        Ok(Some((
            LimitRewrite {
                limit: l,
                at,
                taken,
            },
            text,
            total,
        )))
    }

    /// The execute of a statement with a [`LimitRewrite`] on `shard`: the
    /// client's parameters (`e`, `types`, `long`) with `offset, count` in
    /// place of its LIMIT numbers.
    #[allow(clippy::too_many_arguments)]
    async fn limit_execute(
        &mut self,
        id: u32,
        shard: usize,
        e: &crate::protocol::stmt::Execute<'_>,
        types: &[crate::protocol::stmt::ParamType],
        long: &[bool],
        lr: LimitRewrite,
        (offset, count): (u64, u64),
    ) -> Result<Option<Vec<u8>>, CmdError> {
        use crate::protocol::stmt::{types as t, ParamType};
        let Some(bid) = self.backend_stmt(id, shard).await? else {
            self.unknown_stmt(id, "mysqld_stmt_execute").await?;
            return Ok(None);
        };
        const N: ParamType = [t::LONGLONG, t::UNSIGNED_FLAG];
        let (o, c) = (offset.to_le_bytes(), count.to_le_bytes());
        let n = e.values.len();
        let mut list: Vec<(ParamType, Option<&[u8]>)> = Vec::with_capacity(n + 2);
        let mut mask: Vec<bool> = Vec::new();
        let client = |i: usize, list: &mut Vec<_>, mask: &mut Vec<bool>| {
            list.push((
                types.get(i).copied().unwrap_or(N),
                e.values.get(i).copied().flatten(),
            ));
            if !long.is_empty() {
                mask.push(long.get(i).copied().unwrap_or(false));
            }
        };
        for i in 0..lr.at.min(n) {
            client(i, &mut list, &mut mask);
        }
        list.push((N, Some(&o[..])));
        list.push((N, Some(&c[..])));
        if !long.is_empty() {
            mask.extend([false, false]);
        }
        for i in (lr.at + lr.taken).min(n)..n {
            client(i, &mut list, &mut mask);
        }
        let mut out = vec![cmd::STMT_EXECUTE];
        crate::protocol::stmt::encode_execute_long(
            bid,
            e.flags,
            e.iterations,
            &list,
            &mask,
            &mut out,
        );
        if let Some(s) = self.stmts.get_mut(id) {
            s.types_sent[shard] = true;
        }
        self.send_long_data(id, shard, bid).await?;
        Ok(Some(out))
    }

    /// COM_STMT_EXECUTE of a SELECT/UPDATE/DELETE on a routed table.
    pub(in crate::frontend) async fn execute_routed(
        &mut self,
        id: u32,
        payload: &[u8],
        route: Arc<Analysis>,
    ) -> Result<(), CmdError> {
        let Some(rules) = self.rules.clone() else {
            return Ok(());
        };
        let body = &payload[1..];
        let Some(s) = self.stmts.get_mut(id) else {
            return self.unknown_stmt(id, "mysqld_stmt_execute").await;
        };
        // The client's parameters (no plan: the shard's statement has the
        // same ones, but for a LIMIT rewrite).
        let n = match s.limit {
            // The shard's pair in place of the client's LIMIT parameters.
            Some(l) => (s.params as usize + l.taken).saturating_sub(2),
            None => s.params as usize,
        };
        match crate::protocol::stmt::bound_types(body, n) {
            Ok(Some(t)) => s.types = Some(t),
            Ok(None) => {}
            Err(_) => return self.malformed("COM_STMT_EXECUTE").await,
        }
        let types = s.types.clone().unwrap_or_default();
        let long = s.long_params.clone();
        let limit = s.limit;
        let Ok(e) = crate::protocol::stmt::decode_execute_long(body, n, Some(&types), &long) else {
            return self.malformed("COM_STMT_EXECUTE").await;
        };
        // The client's LIMIT numbers, when the shards get them from idgate.
        let limits = match limit {
            Some(lr) => {
                let param = |i: usize| match (long.get(i), e.values.get(i), types.get(i)) {
                    (Some(true), _, _) => None,
                    (_, Some(Some(v)), Some(t)) => {
                        crate::protocol::stmt::int_value(*t, v).and_then(|x| u64::try_from(x).ok())
                    }
                    _ => None,
                };
                match lr.limit.resolve(&param) {
                    Some((count, offset)) => Some((lr, count, offset)),
                    None => {
                        return Err(CmdError::Refused(
                            ER_WRONG_ARGUMENTS,
                            "Incorrect arguments to LIMIT: a LIMIT parameter must be bound to a non-negative integer".into(),
                        ))
                    }
                }
            }
            None => None,
        };
        // A value sent as long data is not known here: not a key.
        let values: Vec<Option<KeyValue>> = e
            .values
            .iter()
            .zip(&types)
            .enumerate()
            .map(|(i, (v, t))| match long.get(i) {
                Some(true) => None,
                _ => key_value(*t, *v),
            })
            .collect();
        let schema = self.schema.clone();
        let keys = self.key_ctx(&rules, schema.as_deref(), &route).await?;
        let Some(routed) = decide(
            &rules,
            schema.as_deref(),
            (*route).clone(),
            &|i| values.get(i).cloned().flatten(),
            &keys,
        )?
        else {
            let out = match limits {
                Some((lr, count, offset)) => {
                    self.limit_execute(id, 0, &e, &types, &long, lr, (offset, count))
                        .await?
                }
                None => self.execute_payload(id, 0, payload).await?,
            };
            let Some(out) = out else {
                return Ok(());
            };
            return self.forward(0, &out, Expect::Results).await.map(|_| ());
        };
        let write = matches!(routed.analysis.kind, StmtKind::Update | StmtKind::Delete);
        if write {
            self.check_write(routed.target.shards())?;
        }
        let many = routed.target.shards().len() > 1;
        let mut parts = Vec::new();
        for &shard in routed.target.shards() {
            let out = match limits {
                // Scattered: each shard its first offset + count rows.
                Some((lr, count, offset)) if many => {
                    let Some(total) = offset.checked_add(count) else {
                        return Err(CmdError::Refused(
                            ER_WRONG_ARGUMENTS,
                            "Incorrect arguments to LIMIT: offset + count beyond 2^64".into(),
                        ));
                    };
                    self.limit_execute(id, shard, &e, &types, &long, lr, (0, total))
                        .await?
                }
                Some((lr, count, offset)) => {
                    self.limit_execute(id, shard, &e, &types, &long, lr, (offset, count))
                        .await?
                }
                None => self.execute_payload(id, shard, payload).await?,
            };
            let Some(out) = out else {
                return Ok(());
            };
            parts.push((shard, out));
        }
        let cursor = e.flags != 0;
        match (routed.target, write) {
            (Target::One(shard), _) => {
                if let Some(s) = self.stmts.get_mut(id) {
                    s.exec_shard = shard;
                }
                let out = parts.pop().map(|(_, p)| p).unwrap_or_default();
                self.forward(shard, &out, Expect::Results).await.map(|_| ())
            }
            (Target::Many(_), true) => {
                let oks = self.run_write(parts, false).await?;
                let ok = combined_ok(one_copy(&oks, routed.copies), 0, 0, &|_| 0);
                self.reply_packet(&ok).await
            }
            (Target::Many(_), false) => {
                let spec = match (&routed.analysis.scatter, limits) {
                    (Ok(spec), Some((_, count, offset))) => {
                        let mut spec = spec.clone();
                        spec.limit = Some(count);
                        spec.offset = offset;
                        spec
                    }
                    // Without a rewrite, only a LIMIT the shards may apply
                    // as written (`LimitRewrite`).
                    (Ok(spec), None)
                        if routed.analysis.shard_sql.is_none()
                            && !routed.analysis.limit.is_some_and(|l| l.rebound()) =>
                    {
                        spec.clone()
                    }
                    (Ok(_), None) => {
                        return Err(refuse(
                            "this prepared SELECT's LIMIT cannot be applied across shards; bind the shard key".into(),
                        ))
                    }
                    (Err(_), _) => scatter_spec(&routed.analysis)?,
                };
                if cursor {
                    return Box::pin(self.open_merged_cursor(id, parts, &spec)).await;
                }
                self.scatter(parts, &spec, crate::shard::merge::Protocol::Binary)
                    .await
            }
        }
    }
}
