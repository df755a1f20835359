//! `INSERT [IGNORE] ... SELECT` into a rule table (issue 17).
//!
//! MariaDB cannot fill the id column itself (the table has no
//! AUTO_INCREMENT, and its rows may belong on other shards), so idgate
//! runs the statement's two halves itself:
//!
//! 1. The source query runs where idgate can read it (`source_shards`):
//!    the default shard, one copy of a broadcast table, or every shard of
//!    a sharded table (merged by `shard::stream::Merger`, honouring ORDER
//!    BY and LIMIT). Each shard runs it as a server-side cursor
//!    (COM_STMT_EXECUTE with a read-only cursor): MariaDB materialises the
//!    result before the first row is fetched (so a query on the target
//!    table itself reads it whole before any row is written, as MariaDB's
//!    own INSERT ... SELECT does with a temporary table), the rows come in
//!    the binary protocol with their column types, and the same connection
//!    can write between fetches, inside the same transaction.
//! 2. Rows are fetched `FETCH_ROWS` at a time, given ids in row order
//!    (generated where the id is not selected, NULL, or 0 without
//!    NO_AUTO_VALUE_ON_ZERO; an explicit id is observed, as for INSERT),
//!    written as typed literals (`sql::insel`), placed on their shard,
//!    and sent as multi-row INSERTs of at most `BATCH_BYTES` per shard.
//!    At most one batch per shard is in flight, its reply read before the
//!    next command to that shard: the shards write while idgate reads.
//!    Memory is bounded by the fetch size and the batches, whatever the
//!    row count.
//! 3. Everything runs in one XA transaction over the target's shards (all
//!    or none), or inside the session's transaction under a savepoint.
//!
//! The client gets what MariaDB sends for INSERT ... SELECT into an
//! AUTO_INCREMENT table: affected rows, `Records: n  Duplicates: d
//! Warnings: w`, and the first generated id as last insert id (the last
//! row's explicit id when none was generated).

use std::collections::VecDeque;

use crate::frontend::errors::refuse;
use crate::frontend::session::{shard_error, CmdError, Session};
use crate::frontend::shardkey::{self, KeyType, Purpose};
use crate::frontend::txn::xa::xa_cmd;
use crate::protocol::codes::{self, ErrorCode};
use crate::protocol::column::{flags, ColumnDef, BINARY_CHARSET};
use crate::protocol::consts::{cmd, status};
use crate::protocol::reply;
use crate::protocol::response::Expect;
use crate::protocol::stmt::{types, ParamType};
use crate::rules::{RuleSet, TableEntry};
use crate::shard::merge::{MergeSpec, Protocol};
use crate::shard::placement::{KeyValue, Placement};
use crate::shard::stream::{Merger, Pull};
use crate::sql::convert::{self, Converted};
use crate::sql::insel::{self, InsertSelect, SourceColumn, Tail};
use crate::sql::route::{self as analysis, StmtKind};
use crate::sql::SqlModes;

/// Rows asked for per COM_STMT_FETCH.
const FETCH_ROWS: u32 = 8000;
/// A shard's batch is sent once its text is this long (or a quarter of
/// the smallest `max_allowed_packet` of the target's shards, if less).
const BATCH_BYTES: usize = 4 << 20;
/// Rows given ids together (explicit ids observed, generated ones taken).
const CHUNK_ROWS: usize = 8000;

/// "Column count doesn't match value count at row 1".
const ER_WRONG_VALUE_COUNT_ON_ROW: ErrorCode = ErrorCode {
    code: 1136,
    state: "21S01",
};
/// "Incorrect integer value".
const ER_TRUNCATED_WRONG_VALUE: ErrorCode = ErrorCode {
    code: 1366,
    state: "22007",
};

/// One source shard's cursor.
struct Source {
    shard: usize,
    stmt: u32,
    /// Rows fetched and not yet given to the merge.
    rows: VecDeque<Vec<u8>>,
    /// The shard said its last row was sent.
    done: bool,
}

/// What the batches of one target shard did.
#[derive(Default, Clone)]
struct Tally {
    affected: u64,
    duplicates: u64,
    warnings: u64,
    status: u16,
}

/// The running statement's per-shard state.
struct Writer {
    /// The text every batch starts with: `INSERT ... INTO t (cols) `.
    head: String,
    /// Per shard: the batch being built (rows, comma-separated) and its row count.
    batch: Vec<(String, usize)>,
    /// Per shard: a batch was sent and its reply is not read yet.
    in_flight: Vec<bool>,
    /// Per shard: the rows its in-flight batch holds.
    in_flight_rows: Vec<usize>,
    tally: Vec<Tally>,
    /// INSERT IGNORE: batches get `RETURNING <id>`, so the reply tells
    /// which rows were stored (`tracking`).
    ignore: bool,
    /// ` RETURNING <id column>` for IGNORE batches.
    returning: String,
    /// Per shard: the generated ids of the batch being built, and of the
    /// one in flight (IGNORE only).
    pending_ids: Vec<Vec<u64>>,
    in_flight_ids: Vec<Vec<u64>>,
    /// IGNORE: the least generated id stored (ids rise with the rows: the
    /// first stored), and its shard.
    first_stored: Option<(u64, usize)>,
    /// Source shards whose `character_set_results` idgate set to NULL
    /// (strings come in their column's own character set, unconverted),
    /// with the value to set back.
    restore_cs: Vec<(usize, Option<String>)>,
    /// When a batch is sent (`BATCH_BYTES`, or less for a shard that
    /// takes smaller packets).
    batch_bytes: usize,
}

impl Session {
    /// Runs `payload` if it is an INSERT ... SELECT into a rule table;
    /// `Ok(false)` when it is not one (the caller goes on as before).
    pub(in crate::frontend) async fn insert_select(
        &mut self,
        payload: &[u8],
    ) -> Result<bool, CmdError> {
        if !insel::may_be(payload) {
            return Ok(false);
        }
        // Boxed: an INSERT ... SELECT into a rule table is rare beside
        // other INSERTs, and its future large (`engine/size_tests.rs`).
        Box::pin(self.insert_select_now(payload)).await
    }

    async fn insert_select_now(&mut self, payload: &[u8]) -> Result<bool, CmdError> {
        let Some(rules) = self.rules.clone() else {
            return Ok(false);
        };
        let Some(sql) = payload.get(1..).and_then(|b| std::str::from_utf8(b).ok()) else {
            return Ok(false);
        };
        let modes = self.sql_modes().await?;
        let Some(parsed) = insel::parse(sql, modes.lexer()) else {
            return Ok(false);
        };
        // A form it cannot read (executable comments, an unclosed quote, a
        // bad column list) is judged by the planner, as before.
        let Ok(parsed) = parsed else {
            return Ok(false);
        };
        let schema = parsed
            .schema
            .as_deref()
            .map(str::to_string)
            .or_else(|| self.schema.clone());
        let Some(entry) = rules.entry(schema.as_deref(), &parsed.table).cloned() else {
            return Ok(false);
        };
        // Only this statement in the query (several are split by the engine
        // when sharding is on; otherwise the planner refuses them as before).
        if sql.get(parsed.query.1..).is_some_and(|rest| {
            !rest
                .trim_start_matches([';', ' ', '\t', '\r', '\n'])
                .is_empty()
        }) && parsed.tail == Tail::None
        {
            return Ok(false);
        }
        let Some(schema) = schema else {
            return Err(CmdError::Refused(
                codes::ER_NO_DB_ERROR,
                "No database selected".into(),
            ));
        };
        let display = format!("{schema}.{}", parsed.table);
        let form = match (parsed.replace, parsed.tail) {
            (_, Tail::OnDuplicate) => Some("INSERT ... SELECT ... ON DUPLICATE KEY UPDATE"),
            (_, Tail::Returning) => Some("... SELECT ... RETURNING"),
            _ => None,
        };
        if let Some(form) = form {
            return Err(CmdError::Refused(
                codes::ER_NOT_SUPPORTED_YET,
                format!(
                    "idgate: {form} into table {display} is not supported (idgate cannot yet report what MariaDB would for it exactly); use INSERT ... SELECT, or write the rows with INSERT ... VALUES",
                ),
            ));
        }
        self.run_insert_select(sql, &parsed, &rules, &entry, &schema, &display, modes)
            .await?;
        Ok(true)
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_insert_select(
        &mut self,
        sql: &str,
        parsed: &InsertSelect<'_>,
        rules: &RuleSet,
        entry: &TableEntry,
        schema: &str,
        display: &str,
        modes: SqlModes,
    ) -> Result<(), CmdError> {
        let id_col = entry.column().to_string();
        // The target columns, in the order the source gives them.
        let columns: Vec<String> = match &parsed.columns {
            Some(c) => c.iter().map(|s| s.to_string()).collect(),
            None => self.table_columns(schema, &parsed.table).await?,
        };
        let id_index = columns.iter().position(|c| c.eq_ignore_ascii_case(&id_col));
        let placement = entry.placement().cloned();
        let targets: Vec<usize> = match &placement {
            Some(p) => p.shards().to_vec(),
            None => vec![0],
        };
        let broadcast = placement.as_ref().is_some_and(Placement::is_broadcast);
        // Where the row's shard comes from: its id, or another column.
        let key_index = match (&placement, entry.shard_key()) {
            (Some(p), Some(k)) if !p.is_broadcast() && !k.eq_ignore_ascii_case(&id_col) => {
                Some(columns.iter().position(|c| c.eq_ignore_ascii_case(k)).ok_or_else(|| {
                    refuse(format!(
                        "INSERT ... SELECT into sharded table {display}: its shard key `{k}` is not among the columns written, so no row can be placed"
                    ))
                })?)
            }
            _ => None,
        };
        let key_ctx = self.insert_key_ctx(display, entry).await?;
        let (query_start, query_end) = parsed.query;
        let query = sql.get(query_start..query_end).unwrap_or_default();
        let (sources, spec, source_sql) = self.source_shards(rules, query, modes)?;
        // The text each batch starts with.
        let mut head = String::with_capacity(parsed.head_end + 64);
        head.push_str(sql.get(..parsed.head_end).unwrap_or_default());
        head.push_str(" (");
        for (i, c) in columns.iter().enumerate() {
            if i > 0 {
                head.push_str(", ");
            }
            insel::quote_ident(c, &mut head);
        }
        if id_index.is_none() {
            if !columns.is_empty() {
                head.push_str(", ");
            }
            insel::quote_ident(&id_col, &mut head);
        }
        head.push_str(") ");
        let shards = self.backends.len();
        let mut w = Writer {
            head,
            batch: vec![(String::new(), 0); shards],
            in_flight: vec![false; shards],
            in_flight_rows: vec![0; shards],
            tally: vec![Tally::default(); shards],
            ignore: parsed.ignore,
            returning: {
                let mut r = String::from(" RETURNING ");
                insel::quote_ident(&id_col, &mut r);
                r
            },
            pending_ids: vec![Vec::new(); shards],
            in_flight_ids: vec![Vec::new(); shards],
            first_stored: None,
            restore_cs: Vec::new(),
            batch_bytes: BATCH_BYTES,
        };
        self.check_write(&targets)?;
        self.note_diag(&targets);
        let in_txn = self.in_txn();
        let register = !in_txn && self.shared.deadlock_detection && !self.watching;
        if register {
            self.watch_register();
        }
        // Open the transaction (or savepoint) on every target shard.
        let xid = (!in_txn).then(|| self.new_xid());
        let mut started = Vec::with_capacity(targets.len());
        let mut result = Ok(());
        for &s in &targets {
            let r = match &xid {
                Some(x) => self.own_command(s, &xa_cmd("START", x, "")).await,
                None => match self.enlist(s).await {
                    Ok(()) => self.own_command(s, b"\x03SAVEPOINT idgate_stmt").await,
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = r {
                result = Err(e);
                break;
            }
            started.push(s);
            let max = match self.backend(s).await {
                Ok(b) => b.query_rows("SELECT @@max_allowed_packet").await.ok(),
                Err(_) => None,
            };
            if let Some(m) = max
                .and_then(|r| r.first()?.first().cloned().flatten())
                .and_then(|v| v.parse::<usize>().ok())
            {
                w.batch_bytes = w.batch_bytes.min(m / 4).max(16 * 1024);
            }
        }
        let mut opened: Vec<Source> = Vec::new();
        let mut summary = None;
        if result.is_ok() {
            let copy = Copy {
                display,
                id_col: &id_col,
                generator: entry.generator().to_string(),
                columns: columns.len(),
                id_index,
                key_index,
                placement: placement.as_ref(),
                key_ctx,
                broadcast,
                targets: &targets,
                no_auto_value_on_zero: modes.no_auto_value_on_zero,
            };
            match self
                .copy_rows(&sources, &source_sql, &spec, &mut opened, &mut w, &copy)
                .await
            {
                Ok(s) => summary = Some(s),
                Err(e) => result = Err(e),
            }
        }
        // Every reply read, every cursor closed, before the end.
        for s in 0..shards {
            if w.in_flight.get(s) == Some(&true) {
                if let Err(e) = self.settle(&mut w, s).await {
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
        }
        for src in &opened {
            let mut close = vec![cmd::STMT_CLOSE];
            close.extend_from_slice(&src.stmt.to_le_bytes());
            if let Ok(b) = self.backend(src.shard).await {
                let _ = b.send(&close).await;
            }
        }
        for (shard, old) in std::mem::take(&mut w.restore_cs) {
            let value = match old {
                Some(name) if name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => name,
                _ => "NULL".into(),
            };
            let set = format!("\x03SET character_set_results = {value}");
            if let Err(e) = self.own_command(shard, set.as_bytes()).await {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        let end = match (&xid, &result) {
            (Some(x), Ok(())) => {
                self.two_phase_commit(x, &started, "the INSERT ... SELECT")
                    .await
            }
            (Some(x), Err(_)) => {
                self.rollback_xa(x, &started).await;
                Ok(())
            }
            (None, Ok(())) => Ok(()),
            (None, Err(_)) => {
                for &s in &started {
                    let _ = self
                        .own_command(s, b"\x03ROLLBACK TO SAVEPOINT idgate_stmt")
                        .await;
                }
                Ok(())
            }
        };
        if register {
            self.watch_deregister();
        }
        result?;
        end?;
        let Some(sum) = summary else {
            return Ok(());
        };
        // One copy of a broadcast table tells what one server did.
        let counted: Vec<&Tally> = if broadcast {
            targets
                .first()
                .and_then(|&s| w.tally.get(s))
                .into_iter()
                .collect()
        } else {
            targets.iter().filter_map(|&s| w.tally.get(s)).collect()
        };
        let affected: u64 = counted.iter().map(|t| t.affected).sum();
        let duplicates: u64 = counted.iter().map(|t| t.duplicates).sum();
        let warnings: u64 = counted.iter().map(|t| t.warnings).sum();
        let mut st = targets
            .last()
            .and_then(|&s| w.tally.get(s))
            .map_or(status::AUTOCOMMIT, |t| t.status);
        if !in_txn {
            st &= !status::IN_TRANS;
        }
        // MariaDB: the first generated id stored; else, when rows were
        // written, the id of the last row (explicit, or an ignored row's
        // unused one); else 0.
        let first_generated = if w.ignore {
            w.first_stored
        } else {
            sum.first_generated
        };
        let last_insert_id = match (first_generated, sum.last_explicit) {
            (Some((id, _)), _) => id,
            (None, _) if w.ignore && affected > 0 => sum.last_row.unwrap_or(0),
            (None, Some(v)) if affected > 0 => v,
            _ => 0,
        };
        let info = format!(
            "Records: {}  Duplicates: {duplicates}  Warnings: {warnings}",
            sum.rows
        );
        let mut tail = Vec::with_capacity(info.len() + 1);
        crate::protocol::wire::put_lenenc_bytes(&mut tail, info.as_bytes());
        let ok = reply::ok_packet(
            &reply::OkPacket {
                affected_rows: affected,
                last_insert_id,
                status: st,
                warnings: u16::try_from(warnings).unwrap_or(u16::MAX),
            },
            &tail,
        );
        if let Some((id, home)) = first_generated {
            self.set_last_insert_id(home, id).await?;
            self.last_id_home(home);
        }
        self.reply_packet(&ok).await
    }

    /// The table's columns in order (the shared cache, read on a miss).
    async fn table_columns(&mut self, schema: &str, table: &str) -> Result<Vec<String>, CmdError> {
        for _ in 0..2 {
            if let Some(c) = self.shared.columns.get(schema, table) {
                return Ok(c.to_vec());
            }
            self.fetch_columns(schema, table).await?;
        }
        Err(CmdError::Refused(
            ErrorCode {
                code: 1146,
                state: "42S02",
            },
            format!("Table '{schema}.{table}' doesn't exist"),
        ))
    }

    /// Where the source query runs: its shards, the merge of their rows,
    /// and the text each runs.
    fn source_shards(
        &self,
        rules: &RuleSet,
        query: &str,
        modes: SqlModes,
    ) -> Result<(Vec<usize>, MergeSpec, String), CmdError> {
        if !self.shared.routing {
            // Every table is on the default shard.
            return Ok((vec![0], MergeSpec::default(), query.to_string()));
        }
        let schema = self.schema.clone();
        let key_of = |s: Option<&str>, t: &str| {
            rules
                .entry(s.or(schema.as_deref()), t)
                .filter(|e| e.placement().is_some_and(|p| !p.is_broadcast()))
                .and_then(|e| e.shard_key().map(std::sync::Arc::<str>::from))
        };
        let a = analysis::analyze(query, modes.lexer(), &key_of).map_err(|e| {
            CmdError::Refused(
                ErrorCode {
                    code: e.code(),
                    state: e.sqlstate(),
                },
                e.to_string(),
            )
        })?;
        if a.kind != StmtKind::Select {
            return Err(refuse(
                "INSERT ... SELECT into a rule table: the source is not a SELECT idgate can run"
                    .into(),
            ));
        }
        let mut sharded: Option<(String, Vec<usize>)> = None;
        let mut default_table: Option<String> = None;
        let mut broadcast: Option<usize> = None;
        for t in &a.tables {
            match rules
                .entry(t.schema.as_deref().or(schema.as_deref()), &t.table)
                .and_then(|e| e.placement())
            {
                Some(p) if p.is_broadcast() => {
                    broadcast.get_or_insert(p.read_shard());
                }
                Some(p) => {
                    let on = p.shards().to_vec();
                    match &sharded {
                        Some((name, prev)) if *prev != on || on.len() > 1 => {
                            return Err(refuse(format!(
                                "INSERT ... SELECT: the source joins sharded tables {name} and {} across shards; idgate can read one sharded table (or tables on one shard)",
                                t.table
                            )))
                        }
                        _ => sharded = Some((t.table.clone(), on)),
                    }
                }
                None => {
                    default_table.get_or_insert(t.table.clone());
                }
            }
        }
        match sharded {
            None => {
                let shard = if default_table.is_some() {
                    0
                } else {
                    broadcast.unwrap_or(0)
                };
                Ok((vec![shard], MergeSpec::default(), query.to_string()))
            }
            Some((_, on)) if on.len() == 1 => {
                if default_table.is_some() && on != [0] {
                    return Err(refuse(format!(
                        "INSERT ... SELECT: the source uses table {} (on the default shard) with a table on another shard",
                        default_table.unwrap_or_default()
                    )));
                }
                Ok((on, MergeSpec::default(), query.to_string()))
            }
            Some((name, on)) => {
                if let Some(d) = default_table {
                    return Err(refuse(format!(
                        "INSERT ... SELECT: the source uses table {d} (on the default shard) with sharded table {name}, which idgate cannot join across shards"
                    )));
                }
                if a.tables.iter().any(|t| t.in_subquery) {
                    return Err(refuse(format!(
                        "INSERT ... SELECT: a subquery over sharded table {name} cannot be answered across shards"
                    )));
                }
                let spec = a.scatter.clone().map_err(|reason| {
                    refuse(format!(
                        "INSERT ... SELECT: the source reads sharded table {name} on several shards, and {reason}"
                    ))
                })?;
                let text = a.shard_sql.clone().unwrap_or_else(|| query.to_string());
                Ok((on, spec, text))
            }
        }
    }

    /// Runs an own command on `shard` and reads its reply (an error reply
    /// is the shard's error for the client).
    async fn own_command(&mut self, shard: usize, payload: &[u8]) -> Result<(), CmdError> {
        let b = self.backend(shard).await.map_err(CmdError::Backend)?;
        b.run(payload, Expect::Results).await.map_err(shard_error)?;
        Ok(())
    }

    /// Opens the cursors, then reads, places and writes every row.
    async fn copy_rows(
        &mut self,
        sources: &[usize],
        text: &str,
        spec: &MergeSpec,
        opened: &mut Vec<Source>,
        w: &mut Writer,
        c: &Copy<'_>,
    ) -> Result<Summary, CmdError> {
        let mut heads = Vec::with_capacity(sources.len());
        for &shard in sources {
            // The values as stored, in their column's character set.
            let b = self.backend(shard).await.map_err(CmdError::Backend)?;
            let old = b
                .query_rows("SELECT @@character_set_results")
                .await
                .map_err(shard_error)?
                .first()
                .and_then(|r| r.first().cloned().flatten());
            self.own_command(shard, b"\x03SET character_set_results = NULL")
                .await?;
            w.restore_cs.push((shard, old));
            let (stmt, head) = self.open_cursor(shard, text, opened).await?;
            opened.push(Source {
                shard,
                stmt,
                rows: VecDeque::new(),
                done: false,
            });
            heads.push(head);
        }
        // The source columns, from the first shard's head.
        let defs = column_defs(heads.first().map(Vec::as_slice).unwrap_or(&[]))
            .map_err(|e| refuse(format!("INSERT ... SELECT into {}: {e}", c.display)))?;
        if defs.len() != c.columns {
            return Err(CmdError::Refused(
                ER_WRONG_VALUE_COUNT_ON_ROW,
                "Column count doesn't match value count at row 1".into(),
            ));
        }
        let charsets = self.charset_names(&defs).await?;
        let cols: Vec<SourceColumn> = defs
            .iter()
            .zip(charsets)
            .map(|(d, cs)| SourceColumn {
                ty: d.ty,
                unsigned: d.unsigned,
                decimals: d.decimals,
                charset: cs,
            })
            .collect();
        let types: Vec<u8> = defs.iter().map(|d| d.ty).collect();
        let mut merger = Merger::new(heads, spec, Protocol::Binary).map_err(|e| {
            CmdError::Refused(
                e.code(),
                format!("INSERT ... SELECT into {}: {e}", c.display),
            )
        })?;
        let mut sum = Summary::default();
        let mut chunk: Vec<Vec<u8>> = Vec::with_capacity(CHUNK_ROWS);
        loop {
            match merger.pull().map_err(|e| {
                CmdError::Refused(
                    e.code(),
                    format!("INSERT ... SELECT into {}: {e}", c.display),
                )
            })? {
                Pull::Need(n) => {
                    let src = opened
                        .get_mut(n)
                        .ok_or_else(|| CmdError::End("merge asked for an unknown shard".into()))?;
                    if src.rows.is_empty() && !src.done {
                        let (shard, stmt) = (src.shard, src.stmt);
                        self.settle(w, shard).await?;
                        let (rows, done) = self.fetch(shard, stmt).await?;
                        let src = opened
                            .get_mut(n)
                            .ok_or_else(|| CmdError::End("source lost".into()))?;
                        src.rows.extend(rows);
                        src.done = done;
                    }
                    let src = opened
                        .get_mut(n)
                        .ok_or_else(|| CmdError::End("source lost".into()))?;
                    match src.rows.pop_front() {
                        Some(r) => merger.push(n, r).map_err(|e| {
                            CmdError::Refused(
                                e.code(),
                                format!("INSERT ... SELECT into {}: {e}", c.display),
                            )
                        })?,
                        None if src.done => merger.end(n),
                        None => {}
                    }
                }
                Pull::Row(r) => {
                    chunk.push(r);
                    if chunk.len() >= CHUNK_ROWS {
                        self.write_chunk(&chunk, &types, &cols, w, c, &mut sum)
                            .await?;
                        chunk.clear();
                    }
                }
                Pull::Done => break,
            }
        }
        self.write_chunk(&chunk, &types, &cols, w, c, &mut sum)
            .await?;
        for &s in c.targets {
            self.flush(w, s).await?;
        }
        Ok(sum)
    }

    /// Prepares `text` on `shard` and opens it as a read-only cursor;
    /// returns the statement id and the execute reply's column head.
    async fn open_cursor(
        &mut self,
        shard: usize,
        text: &str,
        opened: &mut Vec<Source>,
    ) -> Result<(u32, Vec<Vec<u8>>), CmdError> {
        let mut prep = Vec::with_capacity(text.len() + 1);
        prep.push(cmd::STMT_PREPARE);
        prep.extend_from_slice(text.as_bytes());
        let b = self.backend(shard).await.map_err(CmdError::Backend)?;
        let reply = b.run(&prep, Expect::Prepare).await.map_err(shard_error)?;
        let first = reply
            .first()
            .ok_or_else(|| CmdError::End("empty prepare reply".into()))?;
        let stmt = crate::protocol::stmt::stmt_id(first.get(1..).unwrap_or_default())
            .map_err(|e| CmdError::End(format!("bad prepare reply: {}", e.0)))?;
        let params = first
            .get(7..9)
            .and_then(|p| <[u8; 2]>::try_from(p).ok())
            .map_or(0, u16::from_le_bytes);
        if params > 0 {
            opened.push(Source {
                shard,
                stmt,
                rows: VecDeque::new(),
                done: true,
            });
            return Err(refuse(
                "INSERT ... SELECT: the source query has `?` placeholders".into(),
            ));
        }
        let mut exec = vec![cmd::STMT_EXECUTE];
        // Flags 1: CURSOR_TYPE_READ_ONLY; one iteration; no parameters.
        crate::protocol::stmt::encode_execute(stmt, 1, 1, &[], &mut exec);
        let b = self.backend(shard).await.map_err(CmdError::Backend)?;
        let head = match b.run(&exec, Expect::Results).await {
            Ok(h) => h,
            Err(e) => {
                opened.push(Source {
                    shard,
                    stmt,
                    rows: VecDeque::new(),
                    done: true,
                });
                return Err(shard_error(e));
            }
        };
        if head.first().and_then(|p| p.first()) == Some(&reply::OK) {
            return Err(refuse(
                "INSERT ... SELECT: the source query returned no result set".into(),
            ));
        }
        Ok((stmt, head))
    }

    /// Fetches the next rows of cursor `stmt` on `shard`; `true` once the
    /// shard has sent its last row.
    async fn fetch(&mut self, shard: usize, stmt: u32) -> Result<(Vec<Vec<u8>>, bool), CmdError> {
        let mut payload = vec![cmd::STMT_FETCH];
        payload.extend_from_slice(&stmt.to_le_bytes());
        payload.extend_from_slice(&FETCH_ROWS.to_le_bytes());
        let b = self.backend(shard).await.map_err(CmdError::Backend)?;
        let deprecate_eof = b.deprecate_eof();
        let mut packets = b.run(&payload, Expect::Rows).await.map_err(shard_error)?;
        let Some(last) = packets.pop() else {
            return Ok((Vec::new(), true));
        };
        let t = reply::parse_terminator(&last, deprecate_eof)
            .map_err(|e| CmdError::End(format!("bad fetch reply: {}", e.0)))?;
        let done = t.status & status::LAST_ROW_SENT != 0 || packets.is_empty();
        Ok((packets, done))
    }

    /// The introducer name of each column's character set (one query for
    /// the ones not binary).
    async fn charset_names(&mut self, defs: &[Def]) -> Result<Vec<String>, CmdError> {
        let mut ids: Vec<u16> = defs
            .iter()
            .map(|d| d.charset)
            .filter(|&c| c != BINARY_CHARSET)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut names: Vec<(u16, String)> = vec![(BINARY_CHARSET, "binary".into())];
        if !ids.is_empty() {
            let list: Vec<String> = ids.iter().map(u16::to_string).collect();
            let q = format!(
                "SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS WHERE ID IN ({})",
                list.join(",")
            );
            let b = self.backend(0).await.map_err(CmdError::Backend)?;
            for row in b.query_rows(&q).await.map_err(CmdError::Backend)? {
                if let (Some(Some(id)), Some(Some(name))) = (row.first(), row.get(1)) {
                    if let Ok(id) = id.parse::<u16>() {
                        names.push((id, name.clone()));
                    }
                }
            }
        }
        defs.iter()
            .map(|d| {
                let binary = d.charset == BINARY_CHARSET;
                names
                    .iter()
                    .find(|(id, _)| *id == d.charset)
                    .map(|(_, n)| if binary { "binary".to_string() } else { n.clone() })
                    .filter(|n| n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
                    .ok_or_else(|| {
                        refuse(format!(
                            "INSERT ... SELECT: source column {} has character set id {} the shard does not know",
                            String::from_utf8_lossy(&d.name),
                            d.charset
                        ))
                    })
            })
            .collect()
    }

    /// Gives a chunk of rows their ids and shards and adds them to the
    /// batches (sending full ones).
    #[allow(clippy::too_many_arguments)]
    async fn write_chunk(
        &mut self,
        chunk: &[Vec<u8>],
        types: &[u8],
        cols: &[SourceColumn],
        w: &mut Writer,
        c: &Copy<'_>,
        sum: &mut Summary,
    ) -> Result<(), CmdError> {
        if chunk.is_empty() {
            return Ok(());
        }
        // Each row's id: explicit (observed) or generated (taken in row
        // order; an explicit id raises what later rows get, as with
        // AUTO_INCREMENT).
        let mut ids: Vec<RowId> = Vec::with_capacity(chunk.len());
        let mut run = 0usize;
        for (k, row) in chunk.iter().enumerate() {
            let cells = crate::protocol::row::binary_cells(row, types)
                .map_err(|e| CmdError::End(format!("bad row from a shard: {}", e.0)))?;
            let id = match c.id_index {
                None => RowId::Generate,
                Some(i) => match cells.get(i).copied().flatten() {
                    None => RowId::Generate,
                    Some(v) => {
                        let flag = if cols.get(i).is_some_and(|s| s.unsigned) {
                            types::UNSIGNED_FLAG
                        } else {
                            0
                        };
                        let ty: ParamType = [types.get(i).copied().unwrap_or(0), flag];
                        match convert::bound(ty, v) {
                            Converted::Int(0) if !c.no_auto_value_on_zero => RowId::Generate,
                            Converted::Int(n) => RowId::Explicit(n),
                            Converted::Negative(n) => RowId::Negative(n),
                            Converted::Unknown => {
                                return Err(CmdError::Refused(
                                    ER_TRUNCATED_WRONG_VALUE,
                                    format!(
                                        "idgate: INSERT ... SELECT into {}: row {} gives column `{}` a value idgate cannot read as an integer id",
                                        c.display,
                                        sum.rows + k as u64 + 1,
                                        c.id_col
                                    ),
                                ))
                            }
                        }
                    }
                },
            };
            if let RowId::Explicit(n) = id {
                self.take_run(c, &mut ids, run).await?;
                run = 0;
                self.observe(&c.generator, &[n]).await?;
            }
            if id == RowId::Generate {
                run += 1;
            }
            ids.push(id);
        }
        self.take_run(c, &mut ids, run).await?;
        for (row, id) in chunk.iter().zip(&ids) {
            let cells = crate::protocol::row::binary_cells(row, types)
                .map_err(|e| CmdError::End(format!("bad row from a shard: {}", e.0)))?;
            sum.rows += 1;
            let id_value: i128 = match *id {
                RowId::Given(v) => i128::from(v),
                RowId::Explicit(v) => {
                    sum.last_explicit = Some(v);
                    i128::from(v)
                }
                RowId::Negative(v) => {
                    sum.last_explicit = Some(v as u64);
                    i128::from(v)
                }
                RowId::Generate => return Err(CmdError::End("a row without its id".into())),
            };
            // Its shard(s).
            let shard_list: Vec<usize> = match c.placement {
                None => vec![0],
                Some(p) if c.broadcast => p.shards().to_vec(),
                Some(p) => {
                    let key = match c.key_index {
                        None => KeyValue::Int(id_value),
                        Some(k) => {
                            let flag = if cols.get(k).is_some_and(|s| s.unsigned) {
                                types::UNSIGNED_FLAG
                            } else {
                                0
                            };
                            shardkey::key_value([types.get(k).copied().unwrap_or(0), flag], cells.get(k).copied().flatten())
                                .ok_or_else(|| {
                                    refuse(format!(
                                        "INSERT ... SELECT into sharded table {}: row {}: its shard key value has a type idgate cannot place (an integer or a string)",
                                        c.display, sum.rows
                                    ))
                                })?
                        }
                    };
                    let row_error = |e: String| {
                        refuse(format!(
                            "INSERT ... SELECT into sharded table {}: row {}: shard key: {e}",
                            c.display, sum.rows
                        ))
                    };
                    let key =
                        shardkey::canonical(&key, p, c.key_ctx.0, c.key_ctx.1, Purpose::Store)
                            .map_err(row_error)?
                            .unwrap_or(key);
                    vec![p.shard_of(&key).map_err(|e| row_error(e.to_string()))?]
                }
            };
            if let (RowId::Given(v), None) = (*id, sum.first_generated) {
                sum.first_generated = Some((v, shard_list.first().copied().unwrap_or(0)));
            }
            sum.last_row = Some(id_value as u64);
            // The row's text, once.
            let mut text = String::with_capacity(row.len() * 2 + 32);
            text.push('(');
            for (i, col) in cols.iter().enumerate() {
                if i > 0 {
                    text.push_str(", ");
                }
                if Some(i) == c.id_index {
                    text.push_str(&id_value.to_string());
                    continue;
                }
                insel::write_literal(&mut text, col, cells.get(i).copied().flatten()).map_err(
                    |e| {
                        refuse(format!(
                            "INSERT ... SELECT into {}: row {}, column {}: {e}",
                            c.display,
                            sum.rows,
                            i + 1
                        ))
                    },
                )?;
            }
            if c.id_index.is_none() {
                if !cols.is_empty() {
                    text.push_str(", ");
                }
                text.push_str(&id_value.to_string());
            }
            text.push(')');
            for s in shard_list {
                if let (true, RowId::Given(v)) = (w.ignore, *id) {
                    if let Some(p) = w.pending_ids.get_mut(s) {
                        p.push(v);
                    }
                }
                if let Some((b, n)) = w.batch.get_mut(s) {
                    if *n > 0 {
                        b.push(',');
                    }
                    b.push_str(&text);
                    *n += 1;
                    if b.len() >= w.batch_bytes {
                        self.flush(w, s).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes ids for the last `run` rows of `ids` that want one.
    async fn take_run(
        &mut self,
        c: &Copy<'_>,
        ids: &mut [RowId],
        run: usize,
    ) -> Result<(), CmdError> {
        if run == 0 {
            return Ok(());
        }
        let mut got = Vec::with_capacity(run);
        self.take_ids(&c.generator, run, &mut got).await?;
        let mut it = got.into_iter();
        for id in ids
            .iter_mut()
            .rev()
            .filter(|i| **i == RowId::Generate)
            .take(run)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            if let Some(v) = it.next() {
                *id = RowId::Given(v);
            }
        }
        Ok(())
    }

    /// Sends shard `s`'s batch (after reading the reply to the one before).
    async fn flush(&mut self, w: &mut Writer, s: usize) -> Result<(), CmdError> {
        let Some((rows, n)) = w.batch.get_mut(s) else {
            return Ok(());
        };
        if *n == 0 {
            return Ok(());
        }
        let body = std::mem::take(rows);
        let count = std::mem::replace(n, 0);
        self.settle(w, s).await?;
        let mut payload = Vec::with_capacity(w.head.len() + body.len() + 16);
        payload.push(cmd::QUERY);
        payload.extend_from_slice(w.head.as_bytes());
        if count == 1 {
            // One row as a SELECT: MariaDB treats it as one of many rows
            // (a NULL into a NOT NULL column is a warning outside strict
            // mode, as in INSERT ... SELECT), which VALUES with one row
            // does not.
            payload.extend_from_slice(b"SELECT ");
            payload.extend_from_slice(
                body.get(1..body.len().saturating_sub(1))
                    .unwrap_or_default()
                    .as_bytes(),
            );
        } else {
            payload.extend_from_slice(b"VALUES ");
            payload.extend_from_slice(body.as_bytes());
        }
        if w.ignore {
            payload.extend_from_slice(w.returning.as_bytes());
            let ids = w
                .pending_ids
                .get_mut(s)
                .map(std::mem::take)
                .unwrap_or_default();
            if let Some(f) = w.in_flight_ids.get_mut(s) {
                *f = ids;
            }
        }
        let b = self.backend(s).await.map_err(CmdError::Backend)?;
        b.send(&payload).await.map_err(CmdError::Backend)?;
        if let Some(f) = w.in_flight.get_mut(s) {
            *f = true;
        }
        if let Some(r) = w.in_flight_rows.get_mut(s) {
            *r = count;
        }
        // Reuse the buffer.
        let mut body = body;
        body.clear();
        if let Some((rows, _)) = w.batch.get_mut(s) {
            *rows = body;
        }
        Ok(())
    }

    /// Reads the reply to shard `s`'s batch in flight, if any.
    async fn settle(&mut self, w: &mut Writer, s: usize) -> Result<(), CmdError> {
        if w.in_flight.get(s) != Some(&true) {
            return Ok(());
        }
        if let Some(f) = w.in_flight.get_mut(s) {
            *f = false;
        }
        let rows = w.in_flight_rows.get(s).copied().unwrap_or(0) as u64;
        // Not `backend()`: the reply waiting on a connection not used for a
        // second would look like a shard that closed it, and be replaced.
        let b = self.backends.get_mut(s).ok_or_else(|| {
            CmdError::End(format!(
                "INSERT ... SELECT: the connection to shard {s} is gone"
            ))
        })?;
        let deprecate_eof = b.deprecate_eof();
        let reply = b.read_reply(Expect::Results).await.map_err(shard_error)?;
        if w.ignore {
            let Some(r) = crate::frontend::returned::Returned::read_all(&reply, deprecate_eof)
            else {
                return Err(CmdError::End(
                    "a shard answered an INSERT IGNORE batch without its RETURNING rows".into(),
                ));
            };
            let (st, warnings, _) = r.end.clone().unwrap_or_default();
            let generated = w
                .in_flight_ids
                .get_mut(s)
                .map(std::mem::take)
                .unwrap_or_default();
            // Ids rise with the rows: the least stored generated id is the first.
            let mut gen = generated;
            gen.sort_unstable();
            let least = r
                .ids
                .iter()
                .copied()
                .filter(|v| gen.binary_search(v).is_ok())
                .min();
            if let Some(v) = least {
                if w.first_stored.is_none_or(|(f, _)| v < f) {
                    w.first_stored = Some((v, s));
                }
            }
            if let Some(t) = w.tally.get_mut(s) {
                let stored = r.ids.len() as u64;
                t.affected += stored;
                t.duplicates += rows.saturating_sub(stored);
                t.warnings += u64::from(warnings);
                t.status = st;
            }
            return Ok(());
        }
        let Some(ok) = reply.first().and_then(|p| reply::parse_ok(p).ok()) else {
            return Err(CmdError::End("a shard answered a batch with rows".into()));
        };
        let info = reply.first().map(|p| reply::ok_info(p)).unwrap_or_default();
        if let Some(t) = w.tally.get_mut(s) {
            t.affected += ok.affected_rows;
            t.status = ok.status;
            match reply::parse_records(&info) {
                Some((_, d)) => t.duplicates += d,
                // One REPLACE row: 2 affected means it replaced one.
                None => t.duplicates += ok.affected_rows.saturating_sub(rows),
            }
            t.warnings += u64::from(ok.warnings);
        }
        Ok(())
    }
}

/// A row's id while a chunk is processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowId {
    /// To be generated.
    Generate,
    /// Generated: this id.
    Given(u64),
    /// Given by the source (observed).
    Explicit(u64),
    /// A negative id given by the source.
    Negative(i64),
}

/// What the copy needs to know of the target.
struct Copy<'a> {
    display: &'a str,
    id_col: &'a str,
    generator: String,
    columns: usize,
    id_index: Option<usize>,
    key_index: Option<usize>,
    placement: Option<&'a Placement>,
    key_ctx: (Option<KeyType>, crate::collation::Charset),
    broadcast: bool,
    targets: &'a [usize],
    no_auto_value_on_zero: bool,
}

/// What the statement did, for its OK packet.
#[derive(Debug, Default)]
struct Summary {
    rows: u64,
    /// The first generated id and the shard its row went to.
    first_generated: Option<(u64, usize)>,
    last_explicit: Option<u64>,
    /// The id of the last row (as the OK packet writes it).
    last_row: Option<u64>,
}

/// A source column's definition, owned.
struct Def {
    name: Vec<u8>,
    ty: u8,
    unsigned: bool,
    decimals: u8,
    charset: u16,
}

/// The column definitions of an execute reply's head (count, definitions[, EOF]).
fn column_defs(head: &[Vec<u8>]) -> Result<Vec<Def>, String> {
    let first = head.first().ok_or("empty reply")?;
    let n = crate::protocol::wire::Cursor::new(first)
        .lenenc()
        .map_err(|e| e.0.to_string())?;
    let n = usize::try_from(n).map_err(|_| "bad column count".to_string())?;
    let defs = head
        .get(1..n.checked_add(1).ok_or("bad column count")?)
        .ok_or("reply ends inside its column definitions")?;
    defs.iter()
        .map(|p| {
            let d = ColumnDef::decode(p).map_err(|e| e.0.to_string())?;
            Ok(Def {
                name: d.name.to_vec(),
                ty: d.column_type,
                unsigned: d.flags & flags::UNSIGNED != 0,
                decimals: d.decimals,
                charset: d.charset,
            })
        })
        .collect()
}
