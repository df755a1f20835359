//! Prepared statements (COM_STMT_PREPARE / COM_STMT_EXECUTE).
//!
//! The backend prepares a rewritten statement once; its extra `?`s receive
//! fresh ids at every execute, so the OK packet's last_insert_id and
//! `LAST_INSERT_ID()` stay exact:
//! - column omitted: a `?` per row, the first written `LAST_INSERT_ID(?)`;
//! - `NULL`/`DEFAULT`/`0` written in the id column: `LAST_INSERT_ID(?)` or `?`
//!   when it is known at prepare time whether it is the first generated id,
//!   else `IFNULL(?, LAST_INSERT_ID(?))` (exactly one of the two is bound);
//! - the client's own `?` in the id column:
//!   `IFNULL(?, IFNULL(?, LAST_INSERT_ID(?)))` (client value, or NULL and
//!   then a generated id in the plain or the first position), or
//!   `IFNULL(?, ?)` when it can never be the first generated id.
//!
//! MariaDB's IFNULL is lazy: `LAST_INSERT_ID(x)` in the branch not taken
//! does not fire. [`PrepareRewrite::execute`] decides at each execute which
//! slots are generated, and [`Execution::backend_params`] says what to bind
//! to each backend `?`.

use super::edit::{EditKind, IdOrigin, Lead, Prefix};
use super::error::SqlError;
use super::insert::{Mode, RowId, SlotKind};
use super::plan::{Engine, PlanCtx, QueryPlanner, RuleHit, Stop};
use super::route::KeyArg;
use super::upsert::{self, IdForm, LastRow, Report, Upsert, Upserts};
use crate::rules::RuleSet;

/// What to do with a COM_STMT_PREPARE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreparePlan {
    /// Not an INSERT into a rule table: prepare the client's text unchanged.
    Passthrough,
    /// Fetch the table's column order, then plan again.
    NeedColumns {
        /// The table's schema.
        schema: String,
        /// The table.
        table: String,
    },
    /// Prepare [`PrepareRewrite::backend_sql`] on the backend instead.
    Rewrite(Box<PrepareRewrite>),
}

/// Where the value of one backend `?` comes from at execute time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamSource {
    /// The client's parameter `n`, unchanged.
    Client(usize),
    /// The client's parameter `param` (the id column's value), or NULL when
    /// slot `slot` is generated at this execute.
    ClientUnlessAuto {
        /// The client's parameter index.
        param: usize,
        /// The slot it decides.
        slot: usize,
    },
    /// The id generated for slot `n` (always generated).
    Generated(usize),
    /// The id of slot `n` if it is generated and not the first generated
    /// one of this execute; else NULL.
    GeneratedPlainOrNull(usize),
    /// The id of slot `n` if it is the first generated one of this execute;
    /// else NULL.
    GeneratedFirstOrNull(usize),
    /// The first generated id of this execute, NULL if there is none.
    FirstGenerated,
}

/// A prepared INSERT into a rule table, rewritten for the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareRewrite {
    /// The statement to prepare on the backend.
    pub backend_sql: String,
    /// Number of `?` the client wrote (what the client must be told).
    pub client_params: usize,
    /// The rule table and generator.
    pub rule: RuleHit,
    /// One entry per slot (a row that may get a generated id).
    pub slots: Vec<SlotKind>,
    /// One entry per `?` of `backend_sql`, in order.
    pub params: Vec<ParamSource>,
    /// How the ids are written and reported ([`crate::sql::upsert`]).
    pub report: Report,
    /// Its IGNORE / ON DUPLICATE KEY UPDATE / RETURNING clauses, if any.
    pub upsert: Option<Box<Upsert>>,
    /// Per row: slot, explicit literal id, or kept value.
    rows: Vec<RowId>,
    /// For a table sharded by another column than the id: each row's value
    /// of that column (a literal, or the client's parameter); else empty.
    pub shard_keys: Vec<KeyArg>,
    /// Id values captured in session variables, read back after each
    /// execute (see [`crate::sql::StmtInfo::captures`]).
    pub captures: Vec<usize>,
    /// The last row's id is captured: its byte offset.
    pub last_captured: Option<usize>,
}

/// How the client bound an id-column parameter, as decoded by the caller
/// from COM_STMT_EXECUTE (integers and digit strings as `Int`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundId {
    /// NULL (null bitmap set).
    Null,
    /// A non-negative integer value.
    Int(u64),
    /// A negative integer: kept, not observed (never a generated id), and
    /// reported as MariaDB reports it when it is the last row's id.
    Negative(i64),
    /// Anything else: kept as is, not observed.
    Other,
}

/// One execute's decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    /// Per slot: gets a generated id at this execute.
    pub generated: Vec<bool>,
    /// How many ids to ask the generator for.
    pub demand: usize,
    /// Explicit ids in this execute (literals and client values), row order.
    pub observed: Vec<u64>,
    /// The last row's explicit id at this execute, if it has one.
    pub last_row: Option<u64>,
}

/// What to bind to one backend `?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendParam {
    /// The client's parameter `n` (value, type and null bit as sent).
    Client(usize),
    /// NULL.
    Null,
    /// A generated id (bind as unsigned BIGINT).
    Id(u64),
}

impl Execution {
    /// The last explicit id of this execute, if any: the last row's when
    /// it is explicit (a negative one as an unsigned 64-bit number, as
    /// MariaDB reports it), else the last observed one.
    pub fn last_explicit(&self) -> Option<u64> {
        self.last_row.or_else(|| self.observed.last().copied())
    }

    /// The first generated slot, if any.
    fn first(&self) -> Option<usize> {
        self.generated.iter().position(|&g| g)
    }

    /// The values for every backend `?`, given `ids` (exactly
    /// [`Execution::demand`] ids, in slot order). The first id is the one
    /// the OK packet reports.
    ///
    /// # Errors
    /// [`SqlError::IdCount`] if `ids.len() != demand`.
    pub fn backend_params(
        &self,
        plan: &PrepareRewrite,
        ids: &[u64],
    ) -> Result<Vec<BackendParam>, SqlError> {
        if ids.len() != self.demand {
            return Err(SqlError::IdCount {
                table: plan.rule.table.clone(),
                needed: self.demand,
                given: ids.len(),
            });
        }
        let first = self.first();
        let id_of = |slot: usize| -> Option<u64> {
            if !self.generated.get(slot).copied().unwrap_or(false) {
                return None;
            }
            let n = self
                .generated
                .get(..slot)
                .map_or(0, |g| g.iter().filter(|&&x| x).count());
            ids.get(n).copied()
        };
        let id_or_null = |v: Option<u64>| v.map_or(BackendParam::Null, BackendParam::Id);
        Ok(plan
            .params
            .iter()
            .map(|p| match *p {
                ParamSource::Client(n) => BackendParam::Client(n),
                ParamSource::ClientUnlessAuto { param, slot } => {
                    if self.generated.get(slot).copied().unwrap_or(false) {
                        BackendParam::Null
                    } else {
                        BackendParam::Client(param)
                    }
                }
                ParamSource::Generated(s) => id_or_null(id_of(s)),
                ParamSource::GeneratedPlainOrNull(s) => {
                    id_or_null(id_of(s).filter(|_| first != Some(s)))
                }
                ParamSource::GeneratedFirstOrNull(s) => {
                    id_or_null(id_of(s).filter(|_| first == Some(s)))
                }
                ParamSource::FirstGenerated => id_or_null(ids.first().copied()),
            })
            .collect())
    }
}

impl PrepareRewrite {
    /// Decides, for one COM_STMT_EXECUTE, which slots get generated ids.
    /// `bound(n)` is the client's value for parameter `n` (only asked for
    /// parameters in the id column). A client NULL, or 0 unless
    /// `no_auto_value_on_zero`, is generated; other integers are explicit.
    /// Rows per execute.
    pub fn row_count(&self) -> usize {
        self.rows.len()
    }

    /// Some row may get a generated id at an execute.
    pub fn has_slots(&self) -> bool {
        !self.slots.is_empty()
    }

    pub fn execute(
        &self,
        bound: &dyn Fn(usize) -> BoundId,
        no_auto_value_on_zero: bool,
    ) -> Execution {
        let mut generated = vec![false; self.slots.len()];
        let mut observed = Vec::new();
        let mut last_row = None;
        for r in &self.rows {
            last_row = None;
            match *r {
                RowId::Slot(k) => {
                    let g = match self.slots.get(k) {
                        Some(SlotKind::Always) => true,
                        Some(SlotKind::Client(n)) => match bound(*n) {
                            BoundId::Null => true,
                            BoundId::Int(0) if !no_auto_value_on_zero => true,
                            BoundId::Int(v) => {
                                observed.push(v);
                                last_row = Some(v);
                                false
                            }
                            BoundId::Negative(v) => {
                                last_row = Some(v as u64);
                                false
                            }
                            BoundId::Other => false,
                        },
                        None => false,
                    };
                    if let Some(x) = generated.get_mut(k) {
                        *x = g;
                    }
                }
                RowId::Explicit(v) => {
                    observed.push(v);
                    last_row = Some(v);
                }
                RowId::Kept => {}
            }
        }
        let demand = generated.iter().filter(|&&g| g).count();
        Execution {
            generated,
            demand,
            observed,
            last_row,
        }
    }
}

/// Plans a COM_STMT_PREPARE text. Last-insert-id uses are left to the backend
/// (a literal would be frozen into the prepared statement). INSERT IGNORE
/// and ON DUPLICATE KEY UPDATE get plain ids ([`Report::Plain`]); see
/// [`plan_prepare_with`].
///
/// # Errors
/// As [`super::plan_query`], for an INSERT into a rule table that cannot be filled.
pub fn plan_prepare(
    sql: &str,
    rules: &RuleSet,
    ctx: &PlanCtx<'_>,
) -> Result<PreparePlan, SqlError> {
    plan_prepare_with(sql, rules, ctx, Upserts::default())
}

/// [`plan_prepare`] for shards that support `upserts`: INSERT IGNORE and ON
/// DUPLICATE KEY UPDATE are then tracked ([`crate::sql::upsert`]).
///
/// # Errors
/// As [`plan_prepare`].
pub fn plan_prepare_with(
    sql: &str,
    rules: &RuleSet,
    ctx: &PlanCtx<'_>,
    upserts: Upserts,
) -> Result<PreparePlan, SqlError> {
    let mut p = QueryPlanner {
        sql,
        rules,
        ctx,
        modes: ctx.modes(),
        engine: Engine::Auto,
        hint: false,
        mode: Mode::Prepare,
        slot_base: 0,
        params: Vec::new(),
        last_planned: None,
        use_schema: None,
        sql_mode_changed: false,
    };
    let out = match p.statement(0, false) {
        Ok(Some(o)) => o,
        Ok(None) => return Ok(PreparePlan::Passthrough),
        Err(Stop::Need { schema, table }) => return Ok(PreparePlan::NeedColumns { schema, table }),
        Err(Stop::Err(e)) => return Err(e),
    };
    if out.semicolon {
        // Several statements cannot be prepared: the backend will say so.
        let rest = super::lexer::Lexer::new(sql, out.end + 1, ctx.modes()).next_token();
        if rest.is_some() {
            return Ok(PreparePlan::Passthrough);
        }
    }
    let report = out.info.report(upserts, true);
    let Some(rule) = out.info.rule else {
        return Ok(PreparePlan::Passthrough);
    };
    let client = p.params.clone();
    let mut backend_sql = String::with_capacity(sql.len() + 64);
    let mut params = Vec::with_capacity(client.len() + out.info.generated * 3);
    let mut cur = 0;
    let mut next_client = 0;
    // Copies the text up to `to`, listing the client's `?`s in it.
    let copy_to = |to: usize,
                   backend_sql: &mut String,
                   params: &mut Vec<ParamSource>,
                   cur: usize,
                   next: &mut usize| {
        while let Some(&pos) = client.get(*next) {
            if pos >= to {
                break;
            }
            params.push(ParamSource::Client(*next));
            *next += 1;
        }
        backend_sql.push_str(sql.get(cur..to).unwrap_or(""));
    };
    let tracked = matches!(report, Report::Track | Report::Returning);
    let rows = out.info.upsert.as_ref().map_or(1, |u| u.rows);
    let chained = tracked && out.info.upsert.as_ref().is_some_and(|u| u.chained(rows));
    let later = if chained {
        IdForm::Chain
    } else {
        IdForm::Plain
    };
    let mut injects: Vec<(usize, bool)> = Vec::new();
    if let Some(u) = out.info.upsert.as_deref().filter(|_| tracked) {
        if let Some(at) = u.odku_end {
            injects.push((at, false));
        }
        if report == Report::Returning {
            injects.push((u.end, true));
        }
    }
    let mut pending = injects.iter().peekable();
    let push_injection =
        |returning: bool, backend_sql: &mut String, params: &mut Vec<ParamSource>| {
            if returning {
                upsert::push_returning(backend_sql, &rule.quoted_column);
                return;
            }
            // `first` comes before `last` in the text.
            params.push(ParamSource::FirstGenerated);
            let last = match out.info.upsert.as_ref().map(|u| u.last) {
                Some(LastRow::Slot(s)) if rows > 1 => {
                    // Written twice (`push_assignment`).
                    params.push(ParamSource::Generated(s));
                    params.push(ParamSource::Generated(s));
                    "?".to_string()
                }
                Some(LastRow::Explicit(v)) => v.to_string(),
                _ => "NULL".to_string(),
            };
            upsert::push_assignment(backend_sql, &rule.quoted_column, rows, "?", &last);
        };
    for e in &out.info.edits {
        while let Some(&&(at, returning)) = pending.peek().filter(|(at, _)| *at < e.start) {
            copy_to(at, &mut backend_sql, &mut params, cur, &mut next_client);
            cur = at.max(cur);
            push_injection(returning, &mut backend_sql, &mut params);
            pending.next();
        }
        copy_to(
            e.start,
            &mut backend_sql,
            &mut params,
            cur,
            &mut next_client,
        );
        cur = e.end.max(cur);
        // Skip client `?`s inside the replaced range (the id column's own `?`).
        while client.get(next_client).is_some_and(|&p| p < cur) {
            next_client += 1;
        }
        match &e.kind {
            EditKind::Id {
                slot,
                first,
                prefix,
                origin,
            } => {
                match prefix {
                    Prefix::None => {}
                    Prefix::Comma => backend_sql.push_str(", "),
                    Prefix::Assign => {
                        backend_sql.push_str(", ");
                        backend_sql.push_str(&rule.quoted_column);
                        backend_sql.push_str(" = ");
                    }
                }
                let s = *slot;
                let first_form = match report {
                    Report::Wrap => IdForm::Wrap,
                    Report::Plain => IdForm::Plain,
                    Report::Track | Report::Returning => IdForm::Save,
                };
                let plain_form = if tracked { later } else { IdForm::Plain };
                match origin {
                    IdOrigin::Added => {
                        let form = if *first { first_form } else { plain_form };
                        push_param_id(
                            &mut backend_sql,
                            &mut params,
                            form,
                            ParamSource::Generated(s),
                        );
                    }
                    IdOrigin::Literal => {
                        push_dynamic(&mut backend_sql, &mut params, first_form, plain_form, s);
                    }
                    IdOrigin::ClientParam(n) => {
                        backend_sql.push_str("IFNULL(?, ");
                        params.push(ParamSource::ClientUnlessAuto { param: *n, slot: s });
                        if *first {
                            push_dynamic(&mut backend_sql, &mut params, first_form, plain_form, s);
                        } else {
                            push_param_id(
                                &mut backend_sql,
                                &mut params,
                                plain_form,
                                ParamSource::GeneratedPlainOrNull(s),
                            );
                        }
                        backend_sql.push(')');
                    }
                }
            }
            EditKind::Column(lead) => match lead {
                Lead::None => backend_sql.push_str(&rule.quoted_column),
                Lead::Comma => {
                    backend_sql.push_str(", ");
                    backend_sql.push_str(&rule.quoted_column);
                }
                Lead::Paren => {
                    backend_sql.push_str(" (");
                    backend_sql.push_str(&rule.quoted_column);
                    backend_sql.push(')');
                }
            },
            EditKind::LastId { .. } => backend_sql.push_str(sql.get(e.start..e.end).unwrap_or("")),
            EditKind::Zero => backend_sql.push('0'),
            EditKind::Capture(_) | EditKind::CaptureEnd => {
                super::edit::push_capture(&mut backend_sql, &e.kind)
            }
            // UPDATEs are not planned for prepare.
            EditKind::CaptureHighest => {}
        }
    }
    for &(at, returning) in pending {
        copy_to(at, &mut backend_sql, &mut params, cur, &mut next_client);
        cur = at.max(cur);
        push_injection(returning, &mut backend_sql, &mut params);
    }
    copy_to(
        sql.len(),
        &mut backend_sql,
        &mut params,
        cur,
        &mut next_client,
    );
    let (slots, rows) = p
        .last_planned
        .take()
        .map(|pl| (pl.slots, pl.rows))
        .unwrap_or_default();
    Ok(PreparePlan::Rewrite(Box::new(PrepareRewrite {
        backend_sql,
        client_params: client.len(),
        rule,
        slots,
        params,
        report,
        upsert: out.info.upsert,
        rows,
        shard_keys: out.info.shard_keys,
        captures: out.info.captures,
        last_captured: out.info.last_captured,
    })))
}

/// Writes a generated id bound from `src` in `form` (a `?` per use).
fn push_param_id(sql: &mut String, params: &mut Vec<ParamSource>, form: IdForm, src: ParamSource) {
    upsert::push_id(sql, form, "?");
    let uses = match form {
        IdForm::Save => 3,
        IdForm::Chain => 2,
        IdForm::Plain | IdForm::Wrap => 1,
    };
    params.extend(std::iter::repeat_n(src, uses));
}

/// Writes slot `s`'s id when whether it is the first generated one of an
/// execute is only known then: exactly one of the two branches is bound,
/// and MariaDB's IFNULL/IF are lazy, so the other branch's
/// `LAST_INSERT_ID(x)` never fires.
fn push_dynamic(
    sql: &mut String,
    params: &mut Vec<ParamSource>,
    first: IdForm,
    later: IdForm,
    s: usize,
) {
    match first {
        IdForm::Save => {
            // Nothing of the first form may run when it is not bound.
            sql.push_str("IFNULL(IF(? IS NULL, NULL, ");
            params.push(ParamSource::GeneratedFirstOrNull(s));
            push_param_id(sql, params, first, ParamSource::GeneratedFirstOrNull(s));
            sql.push_str("), ");
            push_param_id(sql, params, later, ParamSource::GeneratedPlainOrNull(s));
            sql.push(')');
        }
        _ => {
            sql.push_str("IFNULL(");
            push_param_id(sql, params, later, ParamSource::GeneratedPlainOrNull(s));
            sql.push_str(", ");
            push_param_id(sql, params, first, ParamSource::GeneratedFirstOrNull(s));
            sql.push(')');
        }
    }
}
