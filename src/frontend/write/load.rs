//! `LOAD DATA LOCAL INFILE` into a rule table.
//!
//! idgate asks the client for the file itself, cuts the stream into rows by
//! the statement's own FIELDS/LINES options (`sql::load::cut`), gives each
//! row its id (generated where MariaDB would generate one, the explicit
//! one observed otherwise), and re-emits each row, byte for byte but for
//! the id, into its shard's own `LOAD DATA LOCAL` stream (idgate is the
//! client towards the shard). The shard reads the fields itself: the
//! column list, `@var`s, `SET`, `CHARACTER SET`, conversions, warnings and
//! `REPLACE`/`IGNORE` are MariaDB's own. Memory is bounded: at most
//! `server.load_buffer` bytes per shard wait to be sent, plus one client
//! packet and the row being cut.
//!
//! Atomicity: a table on several shards is loaded as one XA transaction
//! (each shard's branch started when its first row comes); any failure
//! rolls every branch back. On one shard the LOAD is one statement; a
//! failure of idgate's own mid-stream closes that shard connection (the
//! shard rolls the statement back), or inside a transaction rolls back
//! to a savepoint.

use crate::backend::{BackendConn, BackendError};
use crate::frontend::oks::{combined_ok, one_copy, PartOk};
use crate::frontend::session::{CmdError, Session};
use crate::frontend::shardkey::{self, Purpose};
use crate::protocol::codes::{self, ErrorCode};
use crate::protocol::consts::{cap, cmd, status, MAX_PAYLOAD};
use crate::protocol::packet::{frame, ReadError};
use crate::protocol::reply;
use crate::protocol::response::Expect;
use crate::shard::placement::KeyValue;
use crate::shard::placement::Sharding;
use crate::sql::load::cut::{cut_row_keyed, Cut, Format, Value};
use crate::sql::load::emit::{decide, write_row, Id, IdPlace};
use crate::sql::load::stmt::{self, Target};
use std::collections::BTreeMap;

/// What MariaDB (10.11) answers a LOAD DATA LOCAL from a client without
/// CLIENT_LOCAL_FILES (ER_LOAD_INFILE_CAPABILITY_DISABLED).
const ER_LOAD_INFILE_CAPABILITY_DISABLED: ErrorCode = ErrorCode {
    code: 4166,
    state: "HY000",
};
/// MySQL's parse error, for a LOAD DATA into a rule table idgate cannot read.
const ER_PARSE_ERROR: ErrorCode = ErrorCode {
    code: 1064,
    state: "42000",
};
/// The longest row idgate cuts (the rest of the file is still read).
const MAX_ROW: usize = 16 << 20;

/// How the load is made atomic.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// One autocommit LOAD on one shard.
    Single,
    /// A table on several shards, outside a transaction: one XA
    /// transaction with this xid.
    Xa(String),
    /// Inside the session's transaction: each shard's part after a
    /// savepoint, rolled back to it on failure.
    Txn,
}

/// One shard's `LOAD DATA LOCAL` stream.
struct Stream {
    /// Rows not sent yet.
    out: Vec<u8>,
    /// Its XA branch began, or its savepoint was taken (it must be undone
    /// on failure even if its LOAD did not start).
    begun: bool,
    /// The LOAD was sent and the shard asked for its file.
    started: bool,
    /// Sequence id of the next file packet to the shard.
    seq: u8,
}

/// What the load needs to know of the statement and the table.
struct Plan {
    table: String,
    generator: String,
    fmt: Format,
    /// Fields each row is cut into (the column list's length).
    columns: usize,
    /// Index of the id field in a row (`None`: prepended).
    id_index: Option<usize>,
    /// Index of the field of a shard key that is not the id.
    key_index: Option<usize>,
    place: IdPlace,
    ignore_lines: u64,
    /// COM_QUERY payload each shard gets.
    shard_query: Vec<u8>,
    /// The table's shards (one, every copy of a broadcast table, or the
    /// shards rows are placed on by id).
    shards: Vec<usize>,
    broadcast: bool,
    /// One XA transaction across the shards (else one statement on one).
    xa: bool,
    no_auto_value_on_zero: bool,
    /// The file name the client is asked for.
    file: Vec<u8>,
    /// How ids are placed (sharded tables).
    placement: Option<crate::shard::placement::Placement>,
    key_type: Option<shardkey::KeyType>,
    charset: crate::collation::Charset,
}

impl Session {
    /// A COM_QUERY that may be a `LOAD DATA` into a rule table: handled
    /// here (`Ok(true)`), or not one (`Ok(false)`: the caller goes on).
    pub(in crate::frontend) async fn load_data(
        &mut self,
        payload: &[u8],
    ) -> Result<bool, CmdError> {
        let Some(rules) = self.rules.clone() else {
            return Ok(false);
        };
        // Not UTF-8: the planner refuses it for a rule table.
        let Ok(sql) = std::str::from_utf8(payload.get(1..).unwrap_or(&[])) else {
            return Ok(false);
        };
        let lexer = self.sql_modes.unwrap_or_default().lexer();
        let Some((into, _)) = stmt::parse(sql, lexer) else {
            return Ok(false);
        };
        let schema = into.schema.clone().or_else(|| self.schema.clone());
        let Some(entry) = rules.entry(schema.as_deref(), &into.table) else {
            return Ok(false);
        };
        let entry = entry.clone();
        let table = match &schema {
            Some(s) => format!("{s}.{}", into.table),
            None => into.table.clone(),
        };
        let column = entry.column().to_string();
        let refuse = |what: String| {
            CmdError::Refused(
                codes::ER_NOT_SUPPORTED_YET,
                format!("idgate: LOAD DATA into table {table} (column {column} is filled by idgate): {what}"),
            )
        };
        if crate::sql::statement_count(sql, lexer) > 1 {
            return Err(refuse(
                "send LOAD DATA as a query of its own, not with other statements".into(),
            ));
        }
        if into.xml {
            return Err(refuse(
                "LOAD XML is not supported; use LOAD DATA LOCAL INFILE".into(),
            ));
        }
        // With the session's sql_mode now (the statement's literals may
        // depend on NO_BACKSLASH_ESCAPES / ANSI_QUOTES).
        let modes = self.sql_modes().await?;
        let st = match stmt::parse(sql, modes.lexer()) {
            Some((_, Ok(st))) => st,
            Some((_, Err(why))) => {
                return Err(CmdError::Refused(
                    ER_PARSE_ERROR,
                    format!(
                        "idgate: cannot read the LOAD DATA statement into table {table}: {why}"
                    ),
                ))
            }
            None => return Ok(false),
        };
        if !st.local {
            return Err(refuse(
                "without LOCAL the file would be read on a shard's host, where idgate cannot fill the ids; use LOAD DATA LOCAL INFILE (mysqlimport --local)".into(),
            ));
        }
        st.format.check().map_err(&refuse)?;
        if let Some(cs) = &st.charset {
            Format::check_charset(cs).map_err(&refuse)?;
        }
        if st
            .set_columns
            .iter()
            .any(|c| c.eq_ignore_ascii_case(&column))
        {
            return Err(refuse(format!(
                "a SET clause assigns column {column}; give it in the file or leave it out"
            )));
        }
        let placement = entry.placement().cloned();
        // Rows placed by another column than the id: its field's value.
        let key_column = entry
            .separate_shard_key()
            .filter(|_| {
                placement
                    .as_ref()
                    .is_some_and(|p| p.shards().len() > 1 && !p.is_broadcast())
            })
            .map(|k| k.to_string());
        if let Some(key) = &key_column {
            if st.set_columns.iter().any(|c| c.eq_ignore_ascii_case(key)) {
                return Err(refuse(format!(
                    "a SET clause assigns shard key column {key}; idgate places each row by the file's value of it"
                )));
            }
        }
        // Where the id field (and a separate shard key's) is in each row.
        let key_of = |names: Vec<Option<&str>>| {
            key_column.as_deref().and_then(|k| {
                names
                    .iter()
                    .position(|n| n.is_some_and(|n| n.eq_ignore_ascii_case(k)))
            })
        };
        let key_index;
        let (columns, id_index) = match &st.targets {
            Some(t) if t.is_empty() => {
                return Err(refuse("an empty column list is not supported".into()))
            }
            Some(t) => {
                key_index = key_of(
                    t.iter()
                        .map(|c| match c {
                            Target::Column(n) => Some(n.as_str()),
                            Target::Var => None,
                        })
                        .collect(),
                );
                (
                    t.len(),
                    t.iter().position(
                        |c| matches!(c, Target::Column(n) if n.eq_ignore_ascii_case(&column)),
                    ),
                )
            }
            None => {
                let Some(s) = schema.as_deref() else {
                    return Err(CmdError::Refused(
                        codes::ER_NO_DB_ERROR,
                        "No database selected".into(),
                    ));
                };
                let cols = match self.shared.columns.get(s, &into.table) {
                    Some(c) => c,
                    None => {
                        self.fetch_columns(s, &into.table).await?;
                        self.shared.columns.get(s, &into.table).ok_or_else(|| {
                            CmdError::Refused(
                                codes::ER_UNKNOWN_ERROR,
                                format!("idgate: the columns of table {table} could not be read"),
                            )
                        })?
                    }
                };
                key_index = key_of(cols.iter().map(|c| Some(c.as_str())).collect());
                let i = cols.iter().position(|c| c.eq_ignore_ascii_case(&column));
                if i.is_none() {
                    return Err(CmdError::Sql(crate::sql::SqlError::UnknownColumn {
                        table: table.clone(),
                        column: column.clone(),
                    }));
                }
                (cols.len(), i)
            }
        };
        let place = match id_index {
            Some(_) => IdPlace::Field,
            None => IdPlace::Prepend,
        };
        let quoted = format!("`{}`", column.replace('`', "``"));
        let Some(text) = st.shard_sql(sql, (place == IdPlace::Prepend).then_some(quoted.as_str()))
        else {
            return Err(refuse("the statement could not be rewritten".into()));
        };
        let shards: Vec<usize> = match &placement {
            Some(p) => p.shards().to_vec(),
            None => vec![0],
        };
        let broadcast = placement.as_ref().is_some_and(|p| p.is_broadcast());
        let (key_type, charset) = self.insert_key_ctx(&table, &entry).await?;
        if let Some(key) = &key_column {
            if key_index.is_none() {
                return Err(refuse(format!(
                    "the table is sharded by column {key}, which the file must give as a field of the column list (not an @var, not left out)"
                )));
            }
            // A file's bytes are in the LOAD's character set: only integer
            // keys are placed exactly (a string key's weights would need it).
            let p = placement.as_ref();
            let integer = match p.map(|p| p.kind()) {
                Some(Sharding::Mod | Sharding::Range) => true,
                Some(Sharding::Hash) => {
                    !p.is_some_and(|p| p.hashes_bytes())
                        && matches!(key_type, Some(shardkey::KeyType::Integer))
                }
                _ => false,
            };
            if !integer {
                return Err(refuse(format!(
                    "the table is sharded by string column {key}; LOAD DATA places rows by the id or an integer shard key only"
                )));
            }
        }
        let plan = Plan {
            table: table.clone(),
            generator: entry.generator().to_string(),
            fmt: st.format.clone(),
            columns,
            id_index,
            key_index,
            place,
            ignore_lines: st.ignore_lines,
            shard_query: [&[cmd::QUERY][..], text.as_bytes()].concat(),
            xa: shards.len() > 1,
            shards,
            broadcast,
            no_auto_value_on_zero: modes.no_auto_value_on_zero,
            file: st.file.clone(),
            placement: placement.clone(),
            key_type,
            charset,
        };
        if self.login.capabilities & cap::LOCAL_FILES == 0 {
            return Err(CmdError::Refused(
                ER_LOAD_INFILE_CAPABILITY_DISABLED,
                "The used command is not allowed because the MariaDB server or client has disabled the local infile capability".into(),
            ));
        }
        if self.in_txn() && self.txn_xa.is_none() {
            // One shard only (a sharded table is refused here), in the
            // session's transaction.
            self.check_write(&plan.shards)?;
        }
        self.run_load(plan).await?;
        Ok(true)
    }

    async fn run_load(&mut self, plan: Plan) -> Result<(), CmdError> {
        let mode = if self.in_txn() {
            Mode::Txn
        } else if plan.xa {
            Mode::Xa(self.new_xid())
        } else {
            Mode::Single
        };
        let register =
            matches!(mode, Mode::Xa(_)) && self.shared.deadlock_detection && !self.watching;
        if register {
            self.watch_register();
        }
        let r = self.stream_load(&plan, &mode).await;
        if register {
            self.watch_deregister();
        }
        r
    }

    /// Asks the client for the file and streams it to the shards; replies.
    async fn stream_load(&mut self, plan: &Plan, mode: &Mode) -> Result<(), CmdError> {
        let mut request = Vec::with_capacity(plan.file.len() + 1);
        request.push(reply::LOCAL_INFILE);
        request.extend_from_slice(&plan.file);
        let last = self
            .client
            .write_packet(self.next_seq, &request)
            .await
            .map_err(CmdError::ClientGone)?;
        let mut expect = last.wrapping_add(1);
        let limit = self.shared.config.server.load_buffer;
        let mut streams: BTreeMap<usize, Stream> = BTreeMap::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut packet = Vec::new();
        let mut failure: Option<CmdError> = None;
        let mut skip = plan.ignore_lines;
        let mut row_no: u64 = 0;
        let mut first_generated: Option<(u64, usize)> = None;
        let mut rows = Vec::new();
        let mut ended = false;
        // One client packet is held at a time: a file sent in packets joined
        // past this (16 MiB-1 payloads in a row) ends the session.
        let max_packet = self.shared.config.server.max_packet.min(2 * MAX_ROW);
        while !ended {
            // The client's next packet of the file (an empty one ends it).
            match self.client.read_packet(&mut packet, max_packet).await {
                Ok(Some((first, last))) if first == expect => expect = last.wrapping_add(1),
                Ok(Some(_)) | Err(ReadError::OutOfOrder { .. }) => {
                    self.drop_streams(&streams);
                    return Err(CmdError::End("LOCAL INFILE packets out of order".into()));
                }
                Ok(None) => return Err(CmdError::End("client left while sending its file".into())),
                Err(ReadError::TooLarge(n)) => {
                    self.drop_streams(&streams);
                    return Err(CmdError::End(format!("LOCAL INFILE packet of {n} bytes")));
                }
                Err(ReadError::Io(e)) => return Err(CmdError::ClientGone(e)),
            }
            ended = packet.is_empty();
            if failure.is_some() {
                continue;
            }
            pending.extend_from_slice(&packet);
            // Cut every whole row, then give the generated ones their ids
            // in one call.
            rows.clear();
            let mut at = 0;
            let mut generated = 0usize;
            loop {
                match cut_row_keyed(
                    &pending[at..],
                    ended,
                    &plan.fmt,
                    plan.columns,
                    plan.id_index,
                    plan.key_index,
                ) {
                    Cut::More | Cut::End => break,
                    Cut::Row(r) => {
                        let start = at;
                        at += r.end;
                        row_no += 1;
                        if skip > 0 {
                            skip -= 1;
                            continue;
                        }
                        let id = if plan.place == IdPlace::Prepend {
                            Id::Generate
                        } else {
                            match decide(r.wanted.as_ref(), plan.no_auto_value_on_zero) {
                                Ok(id) => id,
                                Err(e) => {
                                    failure = Some(CmdError::Refused(
                                        codes::ER_DATA_OUT_OF_RANGE,
                                        format!("idgate: LOAD DATA into table {}: row {row_no} of the file: {}; nothing was loaded", plan.table, e.0),
                                    ));
                                    break;
                                }
                            }
                        };
                        if plan.place == IdPlace::Field && r.wanted.is_none() && id == Id::Generate
                        {
                            failure = Some(CmdError::Refused(
                                codes::ER_NOT_SUPPORTED_YET,
                                format!("idgate: LOAD DATA into table {}: row {row_no} of the file has no field for the id column (it has {} of {} fields); nothing was loaded", plan.table, r.fields, plan.columns),
                            ));
                            break;
                        }
                        if id == Id::Generate {
                            generated += 1;
                        }
                        rows.push((start, r, id, row_no));
                    }
                }
            }
            if failure.is_none() && pending.len() - at > MAX_ROW {
                failure = Some(CmdError::Refused(
                    codes::ER_NOT_SUPPORTED_YET,
                    format!("idgate: LOAD DATA into table {}: row {} of the file is longer than {MAX_ROW} bytes; nothing was loaded", plan.table, row_no + 1),
                ));
            }
            if failure.is_some() {
                continue;
            }
            // Ids in file order, as AUTO_INCREMENT assigns them: each run
            // of generated rows takes its ids in one call after the
            // explicit ids before it were observed (a generated id comes
            // out above them).
            let mut ids: Vec<u64> = Vec::with_capacity(generated);
            let mut run = 0usize;
            for (_, _, id, _) in &rows {
                match *id {
                    Id::Generate => run += 1,
                    Id::Explicit(v) => {
                        if run > 0 {
                            if let Err(e) = self.take_ids(&plan.generator, run, &mut ids).await {
                                failure = Some(e);
                                break;
                            }
                            run = 0;
                        }
                        if let Ok(u) = u64::try_from(v) {
                            if let Err(e) = self.observe(&plan.generator, &[u]).await {
                                failure = Some(e);
                                break;
                            }
                        }
                    }
                }
            }
            if run > 0 && failure.is_none() {
                if let Err(e) = self.take_ids(&plan.generator, run, &mut ids).await {
                    failure = Some(e);
                }
            }
            if failure.is_some() {
                continue;
            }
            let mut ids = ids.into_iter();
            for (start, r, id, row) in &rows {
                let (value, generated) = match *id {
                    Id::Generate => match ids.next() {
                        Some(v) => (i128::from(v), Some(v)),
                        None => break,
                    },
                    Id::Explicit(v) => (v, None),
                };
                let one;
                let targets: &[usize] = if plan.broadcast || plan.shards.len() == 1 {
                    &plan.shards
                } else {
                    let Some(p) = &plan.placement else { break };
                    let key = match (plan.key_index, &r.key) {
                        (None, _) => KeyValue::Int(value),
                        (Some(_), Some(f)) => match &f.value {
                            Value::Bytes(b) => KeyValue::Str(b.clone()),
                            Value::Null => KeyValue::Null,
                        },
                        (Some(_), None) => KeyValue::Null,
                    };
                    let shown = match &key {
                        KeyValue::Int(v) => format!("id {v}"),
                        KeyValue::Str(b) => {
                            format!("shard key value '{}'", String::from_utf8_lossy(b))
                        }
                        _ => "no shard key value (NULL or no field)".to_string(),
                    };
                    let key =
                        shardkey::canonical(&key, p, plan.key_type, plan.charset, Purpose::Store)
                            .ok()
                            .flatten()
                            .unwrap_or(key);
                    match p.shard_of(&key) {
                        Ok(s) => {
                            one = [s];
                            &one
                        }
                        Err(e) => {
                            failure = Some(CmdError::Refused(
                                codes::ER_NOT_SUPPORTED_YET,
                                format!("idgate: LOAD DATA into table {}: row {row}: {shown}: {e}; nothing was loaded", plan.table, row = *row),
                            ));
                            break;
                        }
                    }
                };
                if let (Some(g), None) = (generated, first_generated) {
                    first_generated = Some((g, targets[0]));
                }
                for &s in targets {
                    let stream = streams.entry(s).or_insert_with(|| Stream {
                        out: Vec::new(),
                        begun: false,
                        started: false,
                        seq: 0,
                    });
                    write_row(
                        &mut stream.out,
                        &pending[*start..],
                        r,
                        &plan.fmt,
                        plan.place,
                        generated,
                    );
                }
            }
            pending.drain(..at);
            if failure.is_some() {
                continue;
            }
            // Send what is over the buffer (everything at the end).
            let full: Vec<usize> = streams
                .iter()
                .filter(|(_, s)| ended || s.out.len() >= limit)
                .map(|(&k, _)| k)
                .collect();
            for shard in full {
                if let Err(e) = self.flush_stream(shard, &mut streams, plan, mode).await {
                    failure = Some(e);
                    break;
                }
            }
        }
        self.next_seq = expect;
        if failure.is_none() && streams.values().all(|s| !s.started) {
            // An empty file: the home shard reports MariaDB's OK for it.
            let home = plan.shards[0];
            streams.insert(
                home,
                Stream {
                    out: Vec::new(),
                    begun: false,
                    started: false,
                    seq: 0,
                },
            );
            if let Err(e) = self.flush_stream(home, &mut streams, plan, mode).await {
                failure = Some(e);
            }
        }
        if let Some(f) = failure {
            self.abandon(&streams, mode).await;
            return Err(f);
        }
        // Every shard's file ends; each answers for its rows.
        let mut oks = Vec::new();
        let mut error = None;
        let started: Vec<usize> = streams
            .iter()
            .filter(|(_, s)| s.started)
            .map(|(&k, _)| k)
            .collect();
        for &shard in &started {
            let seq = streams.get(&shard).map(|s| s.seq).unwrap_or(0);
            let r = match self.backends.get_mut(shard) {
                Some(b) => finish_file(b, seq).await,
                None => Err(lost(self.shared.config.shards[shard].name.clone())),
            };
            match r {
                Ok(p) => match PartOk::parse(&[p], None) {
                    Some(ok) => oks.push(ok),
                    None => {
                        error.get_or_insert(CmdError::Refused(
                            codes::ER_UNKNOWN_ERROR,
                            "idgate: a shard answered LOAD DATA with something else than OK".into(),
                        ));
                    }
                },
                Err(e) => {
                    if !matches!(e, BackendError::Server { .. }) {
                        self.backends.release(shard);
                    }
                    error.get_or_insert(CmdError::Backend(e));
                }
            }
        }
        self.note_diag(&started);
        if let Some(e) = error {
            match mode {
                Mode::Xa(xid) => self.rollback_xa(xid, &started).await,
                Mode::Txn => {
                    for &shard in &started {
                        self.rollback_savepoint(shard).await;
                    }
                }
                Mode::Single => {}
            }
            return Err(e);
        }
        if let Mode::Xa(xid) = mode {
            self.two_phase_commit(xid, &started, "the load").await?;
            for p in &mut oks {
                p.ok.status &= !status::IN_TRANS;
            }
        }
        let oks = one_copy(&oks, plan.broadcast);
        let ok = combined_ok(oks, 0, 0, &|_| 0);
        if let Some((id, home)) = first_generated {
            self.set_last_insert_id(home, id).await?;
            self.last_id_home(home);
        }
        self.reply_packet(&ok).await
    }

    /// Sends `shard`'s pending rows, starting its LOAD (and XA branch) first.
    async fn flush_stream(
        &mut self,
        shard: usize,
        streams: &mut BTreeMap<usize, Stream>,
        plan: &Plan,
        mode: &Mode,
    ) -> Result<(), CmdError> {
        let Some(stream) = streams.get_mut(&shard) else {
            return Ok(());
        };
        if !stream.started && *mode == Mode::Txn && self.shared.routing {
            self.enlist(shard).await?;
        }
        // `backend()` only before anything of this LOAD went to the shard:
        // it may replace a connection that looks closed, and a file (or an
        // XA branch) under way must go on on the connection it began on,
        // never reach a fresh one as commands.
        let b = if stream.begun || stream.started {
            self.backends.get_mut(shard).ok_or_else(|| {
                CmdError::Backend(lost(self.shared.config.shards[shard].name.clone()))
            })?
        } else {
            self.backend(shard).await.map_err(CmdError::Backend)?
        };
        if !stream.started {
            let first: Option<Vec<u8>> = match mode {
                Mode::Xa(xid) => Some(crate::frontend::txn::xa::xa_cmd("START", xid, "")),
                Mode::Txn => Some(b"\x03SAVEPOINT idgate_load".to_vec()),
                Mode::Single => None,
            };
            if !stream.begun {
                if let Some(q) = first {
                    b.run(&q, Expect::Results)
                        .await
                        .map_err(CmdError::Backend)?;
                }
                stream.begun = true;
            }
            // An error here (the table missing on this shard...) leaves
            // the connection idle: only a started file is ended.
            stream.seq = ask_for_file(b, &plan.shard_query)
                .await
                .map_err(CmdError::Backend)?;
            stream.started = true;
        }
        // Each packet below the maximum payload: a full one would need an
        // empty one after it, which would end the file.
        let mut framed = Vec::with_capacity(stream.out.len() + 8);
        for chunk in stream.out.chunks(MAX_PAYLOAD - 1) {
            stream.seq = frame(&mut framed, stream.seq, chunk).wrapping_add(1);
        }
        stream.out.clear();
        if !framed.is_empty() {
            b.conn.write_raw(&framed).await.map_err(|source| {
                CmdError::Backend(BackendError::Lost {
                    shard: b.shard.clone(),
                    source,
                })
            })?;
        }
        Ok(())
    }

    /// After a failure: nothing the shards got may stay. XA branches and a
    /// single autocommit LOAD are undone by closing their connections
    /// mid-file (the shard rolls back the statement, and an XA branch not
    /// prepared); inside a transaction each file is ended and its shard
    /// rolled back to the savepoint taken before it.
    async fn abandon(&mut self, streams: &BTreeMap<usize, Stream>, mode: &Mode) {
        if *mode != Mode::Txn {
            self.drop_streams(streams);
            return;
        }
        for (&shard, s) in streams {
            if !s.started {
                if s.begun {
                    self.rollback_savepoint(shard).await;
                }
                continue;
            }
            let ended = match self.backends.get_mut(shard) {
                Some(b) => finish_file(b, s.seq).await,
                None => continue,
            };
            match ended {
                Ok(_) | Err(BackendError::Server { .. }) => self.rollback_savepoint(shard).await,
                Err(_) => {
                    self.backends.release(shard);
                    self.stmts.forget_shard(shard);
                }
            }
        }
    }

    /// Closes the connections of the shards whose LOAD (or XA branch) has
    /// begun.
    fn drop_streams(&mut self, streams: &BTreeMap<usize, Stream>) {
        for (&shard, s) in streams {
            if s.begun || s.started {
                self.backends.release(shard);
                self.stmts.forget_shard(shard);
            }
        }
    }

    async fn rollback_savepoint(&mut self, shard: usize) {
        if let Some(b) = self.backends.get_mut(shard) {
            let _ = b
                .run(b"\x03ROLLBACK TO SAVEPOINT idgate_load", Expect::Results)
                .await;
        }
    }
}

/// Sends the shard's LOAD statement and reads its request for the file;
/// returns the sequence id of the first file packet.
async fn ask_for_file(b: &mut BackendConn, query: &[u8]) -> Result<u8, BackendError> {
    b.send(query).await?;
    let mut p = Vec::new();
    let (_, last) = read_one(b, &mut p).await?;
    match p.first() {
        Some(&reply::LOCAL_INFILE) => Ok(last.wrapping_add(1)),
        Some(0xff) => Err(server_err(&b.shard, &p)),
        _ => Err(BackendError::Protocol {
            shard: b.shard.clone(),
            source: crate::protocol::Malformed(
                "no LOCAL INFILE request in reply to LOAD DATA LOCAL",
            ),
        }),
    }
}

/// Ends the shard's file (the empty packet) and reads its reply: the OK
/// packet, or its error.
async fn finish_file(b: &mut BackendConn, seq: u8) -> Result<Vec<u8>, BackendError> {
    b.conn
        .write_raw(&[0, 0, 0, seq])
        .await
        .map_err(|source| BackendError::Lost {
            shard: b.shard.clone(),
            source,
        })?;
    let mut p = Vec::new();
    read_one(b, &mut p).await?;
    match p.first() {
        Some(0xff) => Err(server_err(&b.shard, &p)),
        _ => {
            if let Ok(ok) = reply::parse_ok(&p) {
                b.status = ok.status;
            }
            Ok(p)
        }
    }
}

async fn read_one(b: &mut BackendConn, p: &mut Vec<u8>) -> Result<(u8, u8), BackendError> {
    match b.conn.read_packet(p, 1 << 30).await {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(lost(b.shard.clone())),
        Err(ReadError::Io(source)) => Err(BackendError::Lost {
            shard: b.shard.clone(),
            source,
        }),
        Err(_) => Err(BackendError::Protocol {
            shard: b.shard.clone(),
            source: crate::protocol::Malformed("reply packets out of order"),
        }),
    }
}

fn server_err(shard: &str, p: &[u8]) -> BackendError {
    BackendError::from_err_packet(shard, p)
}

fn lost(shard: String) -> BackendError {
    BackendError::Lost {
        shard,
        source: std::io::Error::other("connection closed"),
    }
}
