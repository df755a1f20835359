//! Filling ids: what a session does with the rules and the allocator.
//!
//! COM_QUERY: plan (cheap classification first; only rule-table INSERTs are
//! parsed), take ids from the generators, observe explicit ids, splice the
//! ids into the original text and relay the reply. How each statement's ids
//! are written and reported is its [`Report`]: the first generated id of a
//! plain INSERT is written `LAST_INSERT_ID(<id>)`, so the shard's OK packet
//! and `LAST_INSERT_ID()` report it exactly as AUTO_INCREMENT would; INSERT
//! IGNORE and ON DUPLICATE KEY UPDATE are tracked (`sql::upsert`, read back
//! by `upsert.rs`); statements that use LAST_INSERT_ID themselves get plain
//! ids and the id is reported here once the OK packet shows rows went in. A
//! statement with only explicit ids gets the last explicit id in its OK
//! packet, as MariaDB reports for an AUTO_INCREMENT column.
//!
//! COM_STMT_PREPARE: the shard prepares a rewritten statement with extra
//! parameters for the ids; the client is told the parameter count it wrote.
//! COM_STMT_EXECUTE: fresh ids at every execute, added to the parameter block.

use crate::backend::relay::Action;
use crate::frontend::errors::ER_AUTOINC_READ_FAILED;
use crate::frontend::session::readback::Captured;
use crate::frontend::session::{CmdError, Session};
use crate::frontend::write::target::InsertTargets;
use crate::frontend::write::upsert::{self, After, Returned, Step, Tracked};
use crate::protocol::codes::{self, ErrorCode};
use crate::protocol::consts::{cap, cmd};
use crate::protocol::reply;
use crate::protocol::reply::{ok_info, parse_records};
use crate::protocol::response::{Expect, Kind};
use crate::protocol::stmt::{self as wire_stmt, types, ParamType};
use crate::sql::statement::keyword;
use crate::sql::{
    self, BackendParam, BoundId, LastRow, Plan, PlanCtx, PreparePlan, PrepareRewrite, Report,
    SqlError, StmtInfo, Upserts,
};
use std::borrow::Cow;
use std::sync::Arc;

/// "Incorrect integer value" (an id parameter idgate cannot convert).
const ER_TRUNCATED_WRONG_VALUE: ErrorCode = ErrorCode {
    code: 1366,
    state: "22007",
};

impl Session {
    /// Plans `sql` with the session's context, fetching a table's column
    /// order when the planner asks for it.
    pub(in crate::frontend) async fn plan<T>(
        &mut self,
        sql: &str,
        planner: &(dyn Fn(&str, &crate::rules::RuleSet, &PlanCtx<'_>) -> Result<T, SqlError>
              + Sync),
        need: fn(&T) -> Option<(String, String)>,
    ) -> Result<Result<T, SqlError>, CmdError> {
        let Some(rules) = self.rules.clone() else {
            return Err(CmdError::End("no rules".into()));
        };
        let modes = self.sql_modes().await?;
        for _ in 0..3 {
            let plan = {
                let cache = &self.shared.columns;
                let columns = |s: &str, t: &str| cache.get(s, t);
                let ctx = PlanCtx {
                    schema: self.schema.as_deref(),
                    no_auto_value_on_zero: modes.no_auto_value_on_zero,
                    no_backslash_escapes: modes.no_backslash_escapes,
                    ansi_quotes: modes.ansi_quotes,
                    columns: &columns,
                    mentions: self.mentions_of(sql.as_bytes()),
                };
                planner(sql, &rules, &ctx)
            };
            match plan.as_ref().ok().and_then(need) {
                Some((schema, table)) => self.fetch_columns(&schema, &table).await?,
                None => return Ok(plan),
            }
        }
        Err(CmdError::Refused(
            codes::ER_UNKNOWN_ERROR,
            "idgate: the column order of the table kept changing while planning; try again".into(),
        ))
    }

    /// COM_QUERY when rules are configured.
    pub(in crate::frontend) async fn query_with_rules(
        &mut self,
        payload: &[u8],
    ) -> Result<bool, CmdError> {
        let text = statement_text(&payload[1..]);
        if sql::plan::passes_in_every_mode_with(&text, self.mentions_of(text.as_bytes())) {
            // Forwarded as it is, before the session's sql_mode is known.
            return Ok(false);
        }
        // `PREPARE s FROM @v` / `EXECUTE IMMEDIATE CONCAT(...)`: the text
        // the shard would run (`dynamic.rs`).
        if keyword::may_be_dynamic(text.as_bytes()) {
            // Boxed: rare (`engine/size_tests.rs`).
            Box::pin(self.check_dynamic_source(&text)).await?;
        }
        let (plan, read) = match self
            .plan(&text, &sql::plan::plan_query_reading, |(p, _)| {
                p.columns_needed()
            })
            .await?
        {
            Ok(p) => p,
            Err(e) => return Err(CmdError::Sql(e)),
        };
        let rw = match plan {
            Plan::Rewrite(rw) => rw,
            _ => {
                // An INSERT into a table without rules, read up to its
                // table: its LAST_INSERT_ID() effect is read on from there
                // (`session/generated.rs`), in the payload's own bytes.
                if self.mux.insert_pending && matches!(text, Cow::Borrowed(_)) {
                    self.mux.insert_read = read;
                }
                return Ok(false);
            }
        };
        if matches!(text, Cow::Owned(_)) {
            let rule = rw.statements().iter().find_map(|s| s.rule.as_ref());
            return Err(CmdError::Sql(not_utf8(
                rule.map(|r| (r.table.as_str(), &*r.column)),
            )));
        }
        // An INSERT into a sharded or broadcast table is routed alone: it is
        // refused in a query of several statements, before any id is taken.
        let routed_rule = rw
            .statements()
            .iter()
            .find_map(|st| st.rule.as_ref().filter(|r| r.routed.is_some()));
        if let (Some(r), true) = (routed_rule, rw.statements().len() > 1) {
            return Err(CmdError::Refused(
                crate::frontend::errors::ER_NOT_ROUTABLE,
                format!(
                    "idgate: a query of several statements that inserts into sharded table {} is not supported; send its statements one by one",
                    r.table
                ),
            ));
        }
        let routed = routed_rule.is_some();
        // Statement by statement, explicit ids before generated ones: a
        // generated id comes out above the explicit ids of its own statement
        // (and of earlier ones), as with AUTO_INCREMENT, and never equals one
        // of them. Slots are in statement order, as `demands()` lists them.
        let mut ids = Vec::with_capacity(rw.total_ids());
        for st in rw.statements() {
            let Some(rule) = &st.rule else { continue };
            self.observe(&rule.generator, &st.explicit).await?;
            if st.generated > 0 {
                self.take_ids(&rule.generator, st.generated, &mut ids)
                    .await?;
            }
        }
        debug_assert_eq!(ids.len(), rw.total_ids());
        // How each statement's ids are written and reported: plain INSERTs
        // get `LAST_INSERT_ID(<first id>)` and the shard reports it; IGNORE
        // and ON DUPLICATE KEY UPDATE are tracked (`sql::upsert`); those that
        // read LAST_INSERT_ID() themselves get plain ids, reported here.
        let upserts = if rw.statements().iter().any(|st| st.upsert.is_some()) {
            self.shared.upserts()
        } else {
            Upserts::default()
        };
        let alone = rw.statements().len() == 1;
        let reports: Vec<Report> = rw
            .statements()
            .iter()
            .map(|st| st.report(upserts, alone))
            .collect();
        // Ids written as expressions are read back before the reply goes
        // out (`capture.rs`).
        let captured: Vec<Captured<'_>> = rw
            .statements()
            .iter()
            .filter(|st| !st.captures.is_empty() || st.update_id.is_some())
            .filter_map(|st| {
                let rule = st.rule.as_ref().or(st.update_id.as_deref())?;
                let shards = match self.placement_at(rule.routed) {
                    Some(p) => p.shards().to_vec(),
                    None => vec![0],
                };
                Some(Captured {
                    generator: &rule.generator,
                    captures: &st.captures,
                    highest: st.update_id.is_some(),
                    report_last: st.last_captured.filter(|_| alone && st.generated == 0),
                    shards,
                })
            })
            .collect();
        let release = !captured.is_empty() && self.start_captures();
        let result = if routed {
            let report = reports.first().copied().unwrap_or(Report::Wrap);
            self.insert_routed(&rw, &ids, report).await
        } else {
            self.send_rewrite(0, &rw, &ids, &reports).await
        };
        if !captured.is_empty() {
            if result.is_err() {
                self.release_held(release).await?;
                return result.map(|_| true);
            }
            self.finish_captures(&captured, release).await?;
        }
        result.map(|_| true)
    }

    /// Renders `rw` with `ids` and relays it on `shard`, each statement's
    /// ids written and reported as `reports` says.
    pub(in crate::frontend) async fn send_rewrite(
        &mut self,
        shard: usize,
        rw: &crate::sql::QueryRewrite,
        ids: &[u64],
        reports: &[Report],
    ) -> Result<(), CmdError> {
        if self.shared.routing {
            self.check_write(&[shard])?;
            self.sync_last_id(shard, rw.sql().as_bytes()).await?;
        }
        let report_of = |i: usize| reports.get(i).copied().unwrap_or(Report::Wrap);
        // The COM_QUERY payload: the command byte, then the text rendered
        // in place (no second copy).
        let mut out = String::with_capacity(rw.sql().len() + 24 * ids.len() + 17);
        out.push(char::from(cmd::QUERY));
        rw.render_with(ids, None, &report_of, &mut out)
            .map_err(CmdError::Sql)?;
        let cmdbuf = out.into_bytes();
        let stmts = rw.statements();
        // A tracked statement is alone in its query (`StmtInfo::report`).
        if let (Some(st), r @ (Report::Track | Report::Returning)) = (stmts.first(), report_of(0)) {
            let ids = ids
                .get(st.first_slot..st.first_slot + st.generated)
                .unwrap_or(&[]);
            let after = self
                .relay_tracked(shard, &cmdbuf, false, tracked(st, ids), r)
                .await?;
            self.after_tracked(shard, after, ids).await?;
            if self.shared.routing && matches!(after, After::Keep | After::Set(_)) {
                self.last_id_home(shard);
            }
            return Ok(());
        }
        let found_rows = self.login.capabilities & cap::FOUND_ROWS != 0;
        let mut last_insert_id = None;
        // The connection's LAST_INSERT_ID() as the statement's own
        // `LAST_INSERT_ID(<id>)` left it, when known (`wrapped_id`).
        let mut wrapped = None;
        let mut hook = |kind: Kind, p: &[u8]| match kind {
            Kind::Ok { index } => {
                let st = stmts.get(index);
                let first = st
                    .filter(|st| st.generated > 0 && report_of(index) == Report::Wrap)
                    .and_then(|st| ids.get(st.first_slot).copied());
                wrapped = wrapped_id(p, first, wrapped);
                match report_of(index) {
                    Report::Plain => plain_ok(st, ids, p, found_rows, &mut last_insert_id),
                    Report::Wrap => match st {
                        Some(s) if s.generated > 0 => {
                            first.map_or(Action::Keep, |f| wrapped_ok(p, f))
                        }
                        other => explicit_only_ok(other, p),
                    },
                    _ => explicit_only_ok(st, p),
                }
            }
            _ => Action::Keep,
        };
        self.forward_with(shard, &cmdbuf, Expect::Results, &mut hook)
            .await?;
        if let Some(id) = last_insert_id {
            self.set_last_insert_id(shard, id).await?;
        } else if let (Some(id), false) = (wrapped, self.mux.want_lid) {
            // No round trip: the statement itself set it (one that names
            // LAST_INSERT_ID() may have set it again in a result set's
            // statement, which idgate does not look at).
            self.lid_given(shard, id);
        }
        if self.shared.routing {
            if ids.is_empty() {
                // Explicit ids only: no value generated, LAST_INSERT_ID()
                // moves only where the statement sets it by name.
                self.note_last_id_set(shard, rw.sql().as_bytes());
            } else {
                self.note_last_id_change(shard, rw.sql().as_bytes());
            }
        }
        Ok(())
    }

    /// Relays the reply to a tracked statement (`report`: Track or
    /// Returning), reporting the id MariaDB would (`upsert.rs`); returns
    /// what the shard's `LAST_INSERT_ID()` needs.
    pub(in crate::frontend) async fn relay_tracked(
        &mut self,
        shard: usize,
        command: &[u8],
        binary: bool,
        t: Tracked<'_>,
        report: Report,
    ) -> Result<After, CmdError> {
        let deprecate_eof = self
            .backend(shard)
            .await
            .map_err(CmdError::Backend)?
            .deprecate_eof();
        let mut returned =
            (report == Report::Returning).then(|| Returned::new(binary, deprecate_eof));
        // Until an OK (or the RETURNING result) says otherwise, the statement
        // failed.
        let mut after = After::Failed;
        let mut hook = |kind: Kind, p: &[u8]| {
            if let Some(r) = returned.as_mut() {
                return match r.feed(p) {
                    Step::Swallow => Action::Drop,
                    Step::Other => Action::Keep,
                    Step::End => {
                        let o = t.read_returned(&r.ids);
                        after = o.after();
                        match r.ok_packet(t.rows, o.report()) {
                            Some((_, ok)) => Action::Replace(ok),
                            None => Action::Keep,
                        }
                    }
                };
            }
            match kind {
                Kind::Ok { .. } => match reply::parse_ok(p) {
                    Ok(ok) => {
                        let o = t.read_ok(&ok, &ok_info(p));
                        after = o.after();
                        upsert::report_action(p, &ok, o.report())
                    }
                    Err(_) => Action::Keep,
                },
                _ => Action::Keep,
            }
        };
        self.forward_with(shard, command, Expect::Results, &mut hook)
            .await?;
        Ok(after)
    }

    /// Applies what a tracked statement (or part of one) with generated
    /// `ids` left for `LAST_INSERT_ID()` on `shard`. Whether the shard now
    /// holds the session's new value is the caller's to note (`lastid.rs`).
    pub(in crate::frontend) async fn after_tracked(
        &mut self,
        shard: usize,
        after: After,
        ids: &[u64],
    ) -> Result<(), CmdError> {
        let restore = match after {
            After::Keep => return Ok(()),
            After::Set(v) => return self.set_last_insert_id(shard, v).await,
            After::Restore => sql::upsert::restore_command(None),
            After::Failed => match ids.first() {
                Some(&first) => sql::upsert::restore_command(Some(first)),
                None => return Ok(()),
            },
        };
        let b = self.backend(shard).await.map_err(CmdError::Backend)?;
        b.send_detached(&restore).await.map_err(CmdError::Backend)?;
        Ok(())
    }

    /// Appends `count` ids of `generator` to `ids`.
    pub(in crate::frontend) async fn take_ids(
        &self,
        generator: &str,
        count: usize,
        ids: &mut Vec<u64>,
    ) -> Result<(), CmdError> {
        let Some(g) = self.shared.generator(generator) else {
            return Err(CmdError::Refused(
                ER_AUTOINC_READ_FAILED,
                format!("generator {generator} is not loaded"),
            ));
        };
        g.next(count as u64, ids)
            .await
            .map_err(|e| CmdError::Refused(ER_AUTOINC_READ_FAILED, e.to_string()))
    }

    /// Tells `generator` about explicit ids, so that no idgate process
    /// issues them. Before the statement is sent: when one cannot be made
    /// sure (another process did not acknowledge it, the store is down),
    /// the statement is refused and nothing is written.
    pub(in crate::frontend) async fn observe(
        &self,
        generator: &str,
        explicit: &[u64],
    ) -> Result<(), CmdError> {
        if explicit.is_empty() {
            return Ok(());
        }
        // A rule's generator not running yet (started from the rules cache
        // file while etcd was down): an explicit id it cannot observe
        // could be issued again later, so the statement is refused until it runs.
        let Some(g) = self.shared.generator(generator) else {
            return Err(CmdError::Refused(
                ER_AUTOINC_READ_FAILED,
                format!("generator {generator} is not loaded"),
            ));
        };
        for &id in explicit {
            g.observe(id)
                .await
                .map_err(|e| CmdError::Refused(ER_AUTOINC_READ_FAILED, e.to_string()))?;
        }
        Ok(())
    }

    /// Plans a COM_STMT_PREPARE: `Some` when the shard must prepare a
    /// rewritten statement instead of the client's.
    pub(in crate::frontend) async fn plan_prepare(
        &mut self,
        payload: &[u8],
    ) -> Result<Option<Arc<PrepareRewrite>>, CmdError> {
        let text = statement_text(&payload[1..]);
        // Tracking INSERT IGNORE / ON DUPLICATE KEY UPDATE needs the shard
        // to support it (the statement is prepared once, for every execute).
        let upserts = self.shared.upserts();
        let planner = move |s: &str, r: &crate::rules::RuleSet, c: &PlanCtx<'_>| {
            sql::plan_prepare_with(s, r, c, upserts)
        };
        let plan = self
            .plan(&text, &planner, |p| match p {
                PreparePlan::NeedColumns { schema, table } => Some((schema.clone(), table.clone())),
                _ => None,
            })
            .await?
            .map_err(CmdError::Sql)?;
        match plan {
            PreparePlan::Rewrite(pr) => {
                if matches!(text, Cow::Owned(_)) {
                    return Err(CmdError::Sql(not_utf8(Some((
                        pr.rule.table.as_str(),
                        &*pr.rule.column,
                    )))));
                }
                Ok(Some(Arc::from(pr)))
            }
            _ => Ok(None),
        }
    }

    /// COM_STMT_EXECUTE of a statement that fills ids: decodes the client's
    /// parameters, decides which rows get ids, takes them, and sends the
    /// shard an execute with the added parameters.
    pub(in crate::frontend) async fn execute_planned(
        &mut self,
        id: u32,
        payload: &[u8],
        plan: Arc<PrepareRewrite>,
    ) -> Result<(), CmdError> {
        let modes = self.sql_modes().await?;
        let body = &payload[1..];
        let n = plan.client_params;
        let Some(stmt) = self.stmts.get_mut(id) else {
            return self.unknown_stmt(id, "mysqld_stmt_execute").await;
        };
        match wire_stmt::bound_types(body, n) {
            Ok(Some(t)) => stmt.types = Some(t),
            Ok(None) => {}
            Err(_) => return self.malformed("COM_STMT_EXECUTE").await,
        }
        let client_types: Vec<ParamType> = stmt.types.clone().unwrap_or_default();
        let long = stmt.long_params.clone();
        let Ok(e) = wire_stmt::decode_execute_long(body, n, Some(&client_types), &long) else {
            return self.malformed("COM_STMT_EXECUTE").await;
        };
        let is_long = |i: usize| long.get(i) == Some(&true);
        // An id parameter whose stored value idgate cannot know (long data,
        // a date, a string that is not a number) is refused below.
        let (exec, unknown) = {
            let unknown = std::cell::Cell::new(None);
            let bound = |i: usize| match (e.values.get(i), client_types.get(i)) {
                (Some(None), _) if !is_long(i) => BoundId::Null,
                (Some(Some(v)), Some(t)) if !is_long(i) => match sql::convert::bound(*t, v) {
                    sql::convert::Converted::Int(x) => BoundId::Int(x),
                    // Never a generated id.
                    sql::convert::Converted::Negative(v) => BoundId::Negative(v),
                    sql::convert::Converted::Unknown => {
                        unknown.set(Some(i));
                        BoundId::Other
                    }
                },
                _ => {
                    unknown.set(Some(i));
                    BoundId::Other
                }
            };
            (
                plan.execute(&bound, modes.no_auto_value_on_zero),
                unknown.get(),
            )
        };
        if let Some(i) = unknown {
            return Err(CmdError::Refused(
                ER_TRUNCATED_WRONG_VALUE,
                format!(
                    "idgate: parameter {} is bound to the id column `{}` of table {} as a value idgate cannot convert to an integer exactly (long data, a date or time, or a string that is not a number); bind an integer, a number or NULL",
                    i + 1,
                    plan.rule.column,
                    plan.rule.table
                ),
            ));
        }
        // Explicit ids first, so the generated ones of this execute come out
        // above them and never equal one of them.
        self.observe(&plan.rule.generator, &exec.observed).await?;
        let mut ids = Vec::with_capacity(exec.demand);
        self.take_ids(&plan.rule.generator, exec.demand, &mut ids)
            .await?;
        let params = exec.backend_params(&plan, &ids).map_err(CmdError::Sql)?;
        let mut copies: Vec<usize> = Vec::new();
        let shard = match plan.rule.routed {
            Some(_) => {
                let keys: Vec<u64> = ids.iter().chain(&exec.observed).copied().collect();
                let param = |i: usize| match (e.values.get(i), client_types.get(i)) {
                    _ if is_long(i) => None,
                    (Some(v), Some(t)) => crate::frontend::shardkey::key_value(*t, *v),
                    _ => None,
                };
                // A tracked upsert on every copy of a broadcast table runs
                // as text too: the text path tracks each copy's reply.
                let tracked =
                    exec.demand > 0 && matches!(plan.report, Report::Track | Report::Returning);
                let rules = self.rules.clone();
                let entry = rules
                    .as_deref()
                    .zip(plan.rule.routed)
                    .and_then(|(r, i)| r.entries().get(i));
                let key_ctx = match entry {
                    Some(entry) => self.insert_key_ctx(&plan.rule.table, entry).await?,
                    None => (None, crate::collation::Charset::Utf8mb4),
                };
                let targets = match self.prepared_insert_shards(&plan, &keys, &param, key_ctx)? {
                    InsertTargets::Shards(t) if !(tracked && t.len() > 1) => t,
                    _ => {
                        let values: Vec<(ParamType, Option<&[u8]>)> = client_types
                            .iter()
                            .copied()
                            .zip(e.values.iter().copied())
                            .collect();
                        // Boxed: rows for several shards, rare (`engine/size_tests.rs`).
                        let split = self.execute_split(id, &plan, &values, &long, &ids);
                        return Box::pin(split).await;
                    }
                };
                self.check_write(&targets)?;
                let first = targets.first().copied().unwrap_or(0);
                if targets.len() > 1 {
                    // A broadcast table: the same execute on every copy.
                    copies = targets;
                }
                first
            }
            None => 0,
        };
        let Some(backend_id) = self.backend_stmt(id, shard).await? else {
            return self.unknown_stmt(id, "mysqld_stmt_execute").await;
        };
        if let Some(s) = self.stmts.get_mut(id) {
            s.exec_shard = shard;
        }
        // The shard statement may be new (prepared again on a new connection,
        // or for the first time on this shard): it needs the types.
        if let Some(s) = self.stmts.get_mut(id) {
            s.types_sent[shard] = true;
        }
        let id_bytes: Vec<[u8; 8]> = params
            .iter()
            .filter_map(|p| match p {
                BackendParam::Id(v) => Some(v.to_le_bytes()),
                _ => None,
            })
            .collect();
        const ID_TYPE: ParamType = [types::LONGLONG, types::UNSIGNED_FLAG];
        let mut next_id = id_bytes.iter();
        let mut list: Vec<(ParamType, Option<&[u8]>)> = Vec::with_capacity(params.len());
        for p in &params {
            list.push(match p {
                BackendParam::Client(i) => match (client_types.get(*i), e.values.get(*i)) {
                    (Some(t), Some(v)) => (*t, *v),
                    _ => return self.malformed("COM_STMT_EXECUTE").await,
                },
                BackendParam::Null => (ID_TYPE, None),
                BackendParam::Id(_) => (ID_TYPE, next_id.next().map(|b| &b[..])),
            });
        }
        let report = match plan.report {
            // Nothing generated at this execute: nothing tracked (the
            // appended assignment does nothing without a first id).
            _ if exec.demand == 0 => Report::Wrap,
            r => r,
        };
        // The client prepared a statement without a result set: with the
        // RETURNING idgate added, a cursor flag would open a cursor.
        let flags = match report {
            Report::Returning => 0,
            _ => e.flags,
        };
        // Values sent as long data stay out of the execute.
        let backend_long: Vec<bool> = if long.is_empty() {
            Vec::new()
        } else {
            params
                .iter()
                .map(|p| matches!(p, BackendParam::Client(i) if is_long(*i)))
                .collect()
        };
        let mut out = Vec::with_capacity(payload.len() + 16 * ids.len() + 16);
        out.push(cmd::STMT_EXECUTE);
        wire_stmt::encode_execute_long(
            backend_id,
            flags,
            e.iterations,
            &list,
            &backend_long,
            &mut out,
        );
        if plan.rule.routed.is_some() {
            // Held until the shard was known.
            self.send_long_data(id, shard, backend_id).await?;
        }
        if copies.len() > 1 {
            // Boxed: every copy of a broadcast table (`engine/size_tests.rs`).
            let on_copies =
                self.execute_on_copies(id, &copies, out, report, &ids, exec.last_explicit());
            return Box::pin(on_copies).await;
        }
        if matches!(report, Report::Track | Report::Returning) {
            // The id the last row got at this execute: explicit, or the
            // last generated one when its slot was generated.
            let generated_last = match plan.upsert.as_deref().map(|u| u.last) {
                Some(LastRow::Slot(_)) => ids.last().copied(),
                _ => None,
            };
            let t = Tracked {
                last_row: exec.last_row.or(generated_last),
                ..tracked_prepared(&plan, &ids)
            };
            let after = self.relay_tracked(shard, &out, true, t, report).await?;
            self.after_tracked(shard, after, &ids).await?;
            if self.shared.routing && matches!(after, After::Keep | After::Set(_)) {
                self.last_id_home(shard);
            }
            return Ok(());
        }
        let last_explicit = (exec.demand == 0).then(|| exec.last_explicit()).flatten();
        // Plain ids: the id is reported here when a row went in.
        let plain = report == Report::Plain;
        let first = ids.first().copied();
        let found_rows = self.login.capabilities & cap::FOUND_ROWS != 0;
        let upsert = plan.upsert.as_deref();
        let mut last_insert_id = None;
        let mut wrapped = None;
        let mut hook = |kind: Kind, p: &[u8]| match (kind, last_explicit) {
            (Kind::Ok { index: 0 }, _) if plain => {
                match inserted_from_ok(first, p, upsert, found_rows) {
                    Inserted::All(id) | Inserted::Some(id) => {
                        last_insert_id = Some(id);
                        match reply::with_last_insert_id(p, id) {
                            Ok(out) => Action::Replace(out),
                            Err(_) => Action::Keep,
                        }
                    }
                    Inserted::None => Action::Keep,
                }
            }
            (Kind::Ok { index: 0 }, _) if report == Report::Wrap && first.is_some() => {
                wrapped = wrapped_id(p, first, None);
                first.map_or(Action::Keep, |id| wrapped_ok(p, id))
            }
            (Kind::Ok { index: 0 }, Some(v)) => replace_last_insert_id(p, v),
            _ => Action::Keep,
        };
        self.forward_with(shard, &out, Expect::Results, &mut hook)
            .await?;
        if let Some(id) = last_insert_id {
            self.set_last_insert_id(shard, id).await?;
        } else if let (Some(id), false) = (wrapped, self.mux.want_lid) {
            // No round trip: the statement itself set it.
            self.lid_given(shard, id);
        }
        if self.shared.routing && !ids.is_empty() {
            self.last_id_home(shard);
        }
        Ok(())
    }

    /// An execute (`out`, encoded for the first of `shards`) of a prepared
    /// INSERT into a broadcast table: the same on every copy, atomically
    /// (`run_write`: XA outside a transaction), reported as one copy did it.
    async fn execute_on_copies(
        &mut self,
        id: u32,
        shards: &[usize],
        out: Vec<u8>,
        report: Report,
        ids: &[u64],
        last_explicit: Option<u64>,
    ) -> Result<(), CmdError> {
        debug_assert!(!matches!(report, Report::Track | Report::Returning));
        let mut parts = Vec::with_capacity(shards.len());
        for (k, &shard) in shards.iter().enumerate() {
            let mut payload = out.clone();
            if k > 0 {
                let Some(bid) = self.backend_stmt(id, shard).await? else {
                    return self.unknown_stmt(id, "mysqld_stmt_execute").await;
                };
                if let Some(s) = payload.get_mut(1..5) {
                    s.copy_from_slice(&bid.to_le_bytes());
                }
                self.send_long_data(id, shard, bid).await?;
            }
            parts.push((shard, payload));
        }
        let oks = self.run_write(parts, false).await?;
        let inserted = oks.first().is_some_and(|p| p.ok.affected_rows > 0);
        let last_insert_id = match ids.first() {
            Some(&first) if report != Report::Plain || inserted => first,
            _ => last_explicit.unwrap_or(0),
        };
        let ok = crate::frontend::oks::combined_ok(
            crate::frontend::oks::one_copy(&oks, true),
            last_insert_id,
            0,
            &|_| 0,
        );
        // Only when the generated id is what is reported.
        if let Some(&first) = ids.first().filter(|&&f| f == last_insert_id) {
            let home = shards[0];
            self.set_last_insert_id(home, first).await?;
            self.last_id_home(home);
        }
        self.reply_packet(&ok).await
    }
}

/// A statement's text for planning: borrowed when it is UTF-8; otherwise a
/// lossy copy, good enough to tell whether it touches a rule table (such a
/// statement is then refused, never forwarded without its ids).
fn statement_text(sql: &[u8]) -> Cow<'_, str> {
    // `from_utf8` first: its ASCII fast path is several times quicker than
    // `from_utf8_lossy`'s chunk walk, and almost every statement is valid.
    match std::str::from_utf8(sql) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(sql),
    }
}

/// The OK packet of a statement that wrote only explicit ids into a rule
/// table reports the last of them, as MariaDB does for an AUTO_INCREMENT
/// column; everything else is passed on as it is.
fn explicit_only_ok(info: Option<&StmtInfo>, p: &[u8]) -> Action {
    match info {
        Some(i) if i.rule.is_some() && i.generated == 0 => match i.last_explicit() {
            Some(v) => replace_last_insert_id(p, v),
            None => Action::Keep,
        },
        _ => Action::Keep,
    }
}

/// A tracked statement of a query, with its generated `ids`.
fn tracked<'a>(st: &StmtInfo, ids: &'a [u64]) -> Tracked<'a> {
    // The last row's generated id: the last one (slots go with the rows).
    let last_row = match st.upsert.as_deref().map(|u| u.last) {
        Some(LastRow::Slot(_)) => ids.last().copied(),
        _ => None,
    };
    Tracked {
        last_row: last_row.or(tracked_of(st.upsert.as_deref(), ids).last_row),
        ..tracked_of(st.upsert.as_deref(), ids)
    }
}

/// A tracked prepared statement's execute, with its generated `ids`
/// (the last row's id is the execute's: see `execute_planned`).
fn tracked_prepared<'a>(plan: &PrepareRewrite, ids: &'a [u64]) -> Tracked<'a> {
    tracked_of(plan.upsert.as_deref(), ids)
}

fn tracked_of<'a>(u: Option<&sql::Upsert>, ids: &'a [u64]) -> Tracked<'a> {
    Tracked {
        ids,
        rows: u.map_or(1, |u| u.rows),
        ignore: u.is_some_and(|u| u.ignore),
        odku: u.is_some_and(|u| u.odku_end.is_some()),
        last_row: match u.map(|u| u.last) {
            Some(LastRow::Explicit(v)) => Some(v),
            _ => None,
        },
    }
}

/// Which rows of a statement written with plain ids went in.
enum Inserted {
    /// None (the shard's own report stands: 0, or what `LAST_INSERT_ID(expr)` set).
    None,
    /// Every row: the first generated id is the one to report.
    All(u64),
    /// Some rows (IGNORE skipped or ON DUPLICATE KEY UPDATE updated others).
    /// Which ones is not known without reading the table, which would clear
    /// the statement's warnings: the first generated id is reported (MariaDB
    /// reports the first id that was stored).
    Some(u64),
}

/// Reads an OK packet: `Records: n  Duplicates: d` in its info for
/// multi-row statements, affected rows (1: inserted, 2: updated, 0: ignored
/// or unchanged) for one row.
fn inserted(st: &StmtInfo, ids: &[u64], p: &[u8], found_rows: bool) -> Inserted {
    inserted_from_ok(
        ids.get(st.first_slot).copied(),
        p,
        st.upsert.as_deref(),
        found_rows,
    )
}

/// [`inserted`] for a statement whose first generated id is `first`. One
/// row that found a duplicate and left it unchanged counts as affected with
/// CLIENT_FOUND_ROWS, like a row inserted: when the update list's own
/// `LAST_INSERT_ID(expr)` ran (the shard reports a value, and the rows set
/// none), it was the duplicate.
fn inserted_from_ok(
    first: Option<u64>,
    p: &[u8],
    upsert: Option<&sql::Upsert>,
    found_rows: bool,
) -> Inserted {
    let (Ok(ok), Some(first)) = (reply::parse_ok(p), first) else {
        return Inserted::None;
    };
    let unchanged_duplicate = found_rows
        && ok.last_insert_id != 0
        && upsert.is_some_and(|u| u.odku_end.is_some() && !u.rows_set_last_insert_id);
    match parse_records(&ok_info(p)) {
        Some((records, duplicates)) if duplicates >= records => Inserted::None,
        Some((_, 0)) => Inserted::All(first),
        Some(_) => Inserted::Some(first),
        None if ok.affected_rows == 1 && !unchanged_duplicate => Inserted::All(first),
        None => Inserted::None,
    }
}

/// The OK of a statement whose ids are reported by idgate
/// ([`Report::Plain`]): the first stored id goes into it (a generated id
/// wins over a `LAST_INSERT_ID(expr)` of the statement, as with
/// AUTO_INCREMENT) and is kept in `last` for the session.
fn plain_ok(
    st: Option<&crate::sql::StmtInfo>,
    ids: &[u64],
    p: &[u8],
    found_rows: bool,
    last: &mut Option<u64>,
) -> Action {
    match st.map(|st| inserted(st, ids, p, found_rows)) {
        Some(Inserted::All(id) | Inserted::Some(id)) => {
            *last = Some(id);
            match reply::with_last_insert_id(p, id) {
                Ok(out) => Action::Replace(out),
                Err(_) => Action::Keep,
            }
        }
        _ => Action::Keep,
    }
}

/// The connection's `LAST_INSERT_ID()` after one more statement's OK `p`,
/// as far as idgate knows it without asking (`before`: what it knew):
/// `first`, the id the statement wrote as `LAST_INSERT_ID(<first>)`, when
/// the OK reports it (or 0 with rows written: a trigger ran, which MariaDB
/// reports so); unknown after any other OK that carries an id (an
/// AUTO_INCREMENT of its own, `LAST_INSERT_ID(expr)`, an explicit id);
/// unchanged otherwise. Known, a multiplexed session's connection goes
/// back with no read of it (`mux.rs`).
fn wrapped_id(p: &[u8], first: Option<u64>, before: Option<u64>) -> Option<u64> {
    let Ok(ok) = reply::parse_ok(p) else {
        return None;
    };
    match first {
        Some(f) if ok.last_insert_id == f || ok.last_insert_id == 0 && ok.affected_rows > 0 => {
            Some(f)
        }
        Some(_) => None,
        None if ok.last_insert_id != 0 => None,
        None => before,
    }
}

/// The OK of a statement whose first generated id was written as
/// `LAST_INSERT_ID(<id>)` ([`Report::Wrap`]): the shard reports that id
/// itself, except when a trigger on the table ran a statement of its own
/// (MariaDB then sends 0, though `LAST_INSERT_ID()` is the id): idgate puts
/// the id in, as MariaDB reports an AUTO_INCREMENT id with or without
/// triggers.
fn wrapped_ok(p: &[u8], first: u64) -> Action {
    replace_last_insert_id(p, first)
}

fn replace_last_insert_id(p: &[u8], v: u64) -> Action {
    match reply::parse_ok(p) {
        Ok(ok) if ok.affected_rows > 0 && ok.last_insert_id == 0 => {
            match reply::with_last_insert_id(p, v) {
                Ok(out) => Action::Replace(out),
                Err(_) => Action::Keep,
            }
        }
        _ => Action::Keep,
    }
}

fn not_utf8(rule: Option<(&str, &str)>) -> SqlError {
    let (table, column) = rule.unwrap_or_default();
    SqlError::Unsupported {
        what: "a statement that is not valid UTF-8".into(),
        table: table.to_string(),
        column: column.to_string(),
    }
}
