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
    Rewrite(PrepareRewrite),
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
    /// Per row: slot, explicit literal id, or kept value.
    rows: Vec<RowId>,
}

/// How the client bound an id-column parameter, as decoded by the caller
/// from COM_STMT_EXECUTE (integers and digit strings as `Int`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundId {
    /// NULL (null bitmap set).
    Null,
    /// A non-negative integer value.
    Int(u64),
    /// Anything else (negative, non-integer): kept as is, not observed.
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
    /// The last explicit id of this execute, if any.
    pub fn last_explicit(&self) -> Option<u64> {
        self.observed.last().copied()
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

    pub fn execute(
        &self,
        bound: &dyn Fn(usize) -> BoundId,
        no_auto_value_on_zero: bool,
    ) -> Execution {
        let mut generated = vec![false; self.slots.len()];
        let mut observed = Vec::new();
        for r in &self.rows {
            match *r {
                RowId::Slot(k) => {
                    let g = match self.slots.get(k) {
                        Some(SlotKind::Always) => true,
                        Some(SlotKind::Client(n)) => match bound(*n) {
                            BoundId::Null => true,
                            BoundId::Int(0) if !no_auto_value_on_zero => true,
                            BoundId::Int(v) => {
                                observed.push(v);
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
                RowId::Explicit(v) => observed.push(v),
                RowId::Kept => {}
            }
        }
        let demand = generated.iter().filter(|&&g| g).count();
        Execution {
            generated,
            demand,
            observed,
        }
    }
}

/// Plans a COM_STMT_PREPARE text. Last-insert-id uses are left to the backend
/// (a literal would be frozen into the prepared statement).
///
/// # Errors
/// As [`super::plan_query`], for an INSERT into a rule table that cannot be filled.
pub fn plan_prepare(
    sql: &str,
    rules: &RuleSet,
    ctx: &PlanCtx<'_>,
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
    for e in &out.info.edits {
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
                match origin {
                    IdOrigin::Added if *first => {
                        backend_sql.push_str("LAST_INSERT_ID(?)");
                        params.push(ParamSource::Generated(s));
                    }
                    IdOrigin::Added => {
                        backend_sql.push('?');
                        params.push(ParamSource::Generated(s));
                    }
                    IdOrigin::Literal => {
                        backend_sql.push_str("IFNULL(?, LAST_INSERT_ID(?))");
                        params.push(ParamSource::GeneratedPlainOrNull(s));
                        params.push(ParamSource::GeneratedFirstOrNull(s));
                    }
                    IdOrigin::ClientParam(n) if *first => {
                        backend_sql.push_str("IFNULL(?, IFNULL(?, LAST_INSERT_ID(?)))");
                        params.push(ParamSource::ClientUnlessAuto { param: *n, slot: s });
                        params.push(ParamSource::GeneratedPlainOrNull(s));
                        params.push(ParamSource::GeneratedFirstOrNull(s));
                    }
                    IdOrigin::ClientParam(n) => {
                        backend_sql.push_str("IFNULL(?, ?)");
                        params.push(ParamSource::ClientUnlessAuto { param: *n, slot: s });
                        params.push(ParamSource::GeneratedPlainOrNull(s));
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
        }
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
    Ok(PreparePlan::Rewrite(PrepareRewrite {
        backend_sql,
        client_params: client.len(),
        rule,
        slots,
        params,
        rows,
    }))
}
