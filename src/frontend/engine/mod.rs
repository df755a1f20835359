//! The query engine, the top of the frontend: a client connection's life
//! ([`serve`]: login, then the command loop), and the dispatch: one match
//! on the command byte and, for COM_QUERY, one match on the statement's
//! classification ([`crate::sql::statement::classify`]), each arm calling
//! its handler (the `impl Session` methods of `write/`, `route/`,
//! `admin/`, the transaction statements of `txn/`, and `multi`: a query of
//! several statements, each run through this dispatch again). Nothing
//! below calls up into it. The session's state and I/O primitives are in
//! `session/`.

pub mod multi;
#[cfg(test)]
mod size_tests;

use crate::backend::relay::Action;
use crate::frontend::admin::sequence::SeqOutcome;
use crate::frontend::route::QueryRoute;
use crate::frontend::session::backends::Backends;
use crate::frontend::session::login::{self, LoginError};
use crate::frontend::session::replay::SessionState;
use crate::frontend::session::stmt::PreparedStmt;
use crate::frontend::session::stmt::Statements;
use crate::frontend::session::{
    acquire_slot, registry, registry::Peer, too_many_user_connections, CmdError, Next, Session,
};
use crate::frontend::shared::Shared;
use crate::protocol::codes;
use crate::protocol::consts::{cap, cmd, status};
use crate::protocol::packet::{PacketConn, ReadError};
use crate::protocol::reply;
use crate::protocol::response::{Expect, Kind};
use crate::protocol::stmt as wire_stmt;
use crate::protocol::wire::Cursor;
use crate::sql::statement::mentions::{Mentions, Word};
use crate::sql::statement::{self, keyword, TxnStmt};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// The largest command buffer a session keeps between commands (a larger
/// one is freed after its command; the next allocates what it needs).
const KEEP_COMMAND_BUFFER: usize = 256 * 1024;

/// Serves one accepted client connection until it quits, fails or the server
/// drains. Never panics on anything the client or a shard sends.
pub async fn serve(
    shared: Arc<Shared>,
    mut client: PacketConn,
    mut shutdown: watch::Receiver<bool>,
) {
    let peer = Peer(client.peer_addr());
    let id = shared.connection_id();
    // The login's and the session end's futures are boxed, each for its
    // own length: every session's future, idle ones too, is as large as
    // its largest inline await (`engine/size_tests.rs`).
    let login = match Box::pin(login::login(&mut client, &shared, id)).await {
        Ok(l) => l,
        Err(LoginError::Refused { code, message }) => {
            warn!(conn = id, %peer, code = code.code, "login refused: {message}");
            return;
        }
        Err(LoginError::Io(e)) => {
            debug!(conn = id, %peer, "client left during login: {e}");
            return;
        }
        Err(LoginError::Tls(e)) => {
            warn!(conn = id, %peer, "TLS handshake with the client failed: {e}");
            return;
        }
    };
    let Some(user_slot) = acquire_slot(&shared, &login.user) else {
        let (msg, _) = too_many_user_connections(&shared, &login.user);
        warn!(conn = id, %peer, user = %login.user, "login refused: {msg}");
        let _ = client
            .write_packet(
                login.reply_seq,
                &reply::err_packet(&codes::ER_TOO_MANY_USER_CONNECTIONS, &msg),
            )
            .await;
        return;
    };
    let tls = client.is_tls();
    debug!(target: SESSIONS, conn = id, %peer, user = %login.user, db = ?login.database, tls, "session opened");
    let shards = shared.config.shards.len();
    let shared_registry = shared.sessions.clone();
    let login_user = login.user.clone();
    let mut session = Session {
        schema: login.database.clone(),
        shared,
        client,
        id,
        login,
        backends: Backends::new(shards),
        stmts: Statements::default(),
        buf: Vec::new(),
        next_seq: 0,
        sql_modes: None,
        client_cs: None,
        state: SessionState::default(),
        txn_begin: None,
        txn_write: None,
        txn_xa: None,
        txn_savepoints: Vec::new(),
        savepoints_on: Vec::new(),
        lid_home: 0,
        lid_synced: u64::MAX,
        xa_seq: 0,
        diag_shards: vec![0],
        serving_diag: false,
        registered: shared_registry.register(id, &login_user, peer, tls, shards),
        watched: None,
        watching: false,
        killed: false,
        began: Instant::now(),
        rules: None,
        rules_version: 0,
        last_values: Default::default(),
        cursor_stream: None,
        mux: Default::default(),
        schema_shown: None,
        user_slot,
    };
    session.rules_version = session.shared.rules.generation();
    session.rules = session.shared.rules.load();
    let started = Instant::now();
    let reason = session.run(&mut shutdown).await;
    let at_rest = session.backends.at_rest();
    Box::pin(session.return_backends(at_rest)).await;
    let secs = started.elapsed().as_secs_f64();
    match reason {
        Ended::Ordinary(why) => {
            debug!(target: SESSIONS, conn = id, %peer, secs, "session closed: {why}")
        }
        Ended::Other(why) => {
            info!(target: SESSIONS, conn = id, %peer, secs, "session closed: {why}")
        }
    }
}

/// The log target of sessions opening and closing. A session that opens
/// and ends the ordinary way (the client quits or closes its socket, or
/// the server drains) is logged at debug: an application that connects
/// per request would otherwise write two lines per request, each a write
/// to stderr under its lock. `IDGATE_LOG=info,idgate::sessions=debug`
/// shows them all; a session that ends any other way (an error, a KILL) is
/// logged at info. `idgate_sessions_opened_total` counts them.
const SESSIONS: &str = "idgate::sessions";

/// Why a session ended ([`Session::run`]).
enum Ended {
    /// The client quit or closed its connection between commands, or the
    /// server drained.
    Ordinary(&'static str),
    /// Anything else.
    Other(String),
}

/// How a shard's prepare response is turned into the client's.
struct PrepareShape {
    /// The client's parameter count, when idgate's statement has more.
    client_params: Option<usize>,
    /// The statement got a RETURNING the client did not write.
    hide_columns: bool,
    /// The shard the statement is prepared on first.
    prepare_on: usize,
}

impl Session {
    /// Handles one command. Shard failures are reported to the client here;
    /// an `Err` means the session must end.
    pub(in crate::frontend) async fn command(&mut self, payload: &[u8]) -> Result<Next, CmdError> {
        self.began = Instant::now();
        self.mux.ended = None;
        let now = self.shared.sessions.us_at(self.began);
        self.registered.control.set_command(payload[0], now);
        self.before_command(payload);
        let r = self.dispatch(payload).await;
        // The payload's borrow ends with the command: its address may hold
        // another text next.
        self.mux.text = None;
        if r.is_ok() {
            // Pins, and with multiplexing the connections given back.
            self.after_command(payload).await;
        }
        self.command_done();
        r
    }

    /// What `SHOW IDGATE SESSIONS` shows of this session, after a command.
    fn command_done(&mut self) {
        let c = &self.registered.control;
        // The clock read when the connections were given back, if they were.
        let ended = self.mux.ended.take().unwrap_or_else(Instant::now);
        c.set_command(registry::IDLE, self.shared.sessions.us_at(ended));
        let in_txn = self.txn_open();
        if c.in_txn.load(std::sync::atomic::Ordering::Relaxed) != in_txn {
            c.in_txn.store(in_txn, std::sync::atomic::Ordering::Relaxed);
        }
        if self.schema != self.schema_shown {
            self.schema_shown.clone_from(&self.schema);
            *c.schema.lock() = self.schema.clone();
        }
    }

    async fn dispatch(&mut self, payload: &[u8]) -> Result<Next, CmdError> {
        if self.cursor_stream.is_some() {
            self.settle_cursor(payload).await;
        }
        if self.shared.rules.generation() != self.rules_version {
            self.take_new_rules();
        }
        if self.shared.deadlock_detection {
            self.watch_command_start();
        }
        let mut result = match payload[0] {
            cmd::QUIT => return Ok(Next::Quit),
            cmd::QUERY if !self.may_adopt_rows(&payload[1..]) => self.query(payload).await,
            cmd::QUERY => {
                // `CREATE TABLE t ... SELECT`, `RENAME TABLE x TO t`: the
                // reply waits until t's highest id is observed.
                let held = self.start_captures();
                let r = self.query(payload).await;
                if r.is_ok() {
                    // Boxed: rare (`engine/size_tests.rs`).
                    Box::pin(self.observe_adopted_rows(payload)).await;
                    // `CREATE VIEW v AS SELECT ... FROM orders`: guarded
                    // before the reply goes out (`frontend/views.rs`).
                    let guarded = self.rules.as_ref().is_some_and(|r| !r.views().is_empty());
                    if crate::frontend::views::may_change_views(&payload[1..], guarded) {
                        self.shared.read_views().await;
                        self.take_new_rules();
                    }
                }
                self.release_held(held).await?;
                r
            }
            cmd::INIT_DB => self.init_db(payload).await,
            cmd::PING => self.ping(payload).await,
            cmd::FIELD_LIST => self
                .forward(0, payload, Expect::FieldList)
                .await
                .map(|_| ()),
            cmd::STATISTICS => self.forward(0, payload, Expect::Single).await.map(|_| ()),
            cmd::SET_OPTION => self.forward(0, payload, Expect::Single).await.map(|_| ()),
            cmd::STMT_PREPARE => self.prepare(payload).await,
            cmd::STMT_EXECUTE => self.execute(payload).await,
            cmd::STMT_FETCH => self.stmt_forward(payload, Some(Expect::Rows)).await,
            cmd::STMT_RESET => self.stmt_forward(payload, Some(Expect::Single)).await,
            cmd::STMT_SEND_LONG_DATA => self.stmt_forward(payload, None).await,
            cmd::STMT_CLOSE => self.stmt_close(payload).await,
            cmd::RESET_CONNECTION => self.reset_connection(payload).await,
            cmd::CHANGE_USER => return self.change_user(payload).await,
            cmd::PROCESS_KILL if payload.len() >= 5 => {
                let id = u32::from_le_bytes([payload[1], payload[2], payload[3], payload[4]]);
                self.kill(statement::Kill {
                    query: false,
                    id: u64::from(id),
                })
                .await
            }
            other => {
                let msg = format!("Unknown command {other:#04x}");
                self.send_error(self.next_seq, &codes::ER_UNKNOWN_COM_ERROR, &msg)
                    .await
                    .map_err(CmdError::ClientGone)?;
                Ok(())
            }
        };
        if self.killed {
            self.killed = false;
            // Boxed: rare (`engine/size_tests.rs`).
            result = Box::pin(self.deadlock_victim(result)).await;
        }
        if self.shared.routing {
            self.txn_settled();
        }
        if self.watched.is_some() {
            self.watch_command_end();
        }
        match result {
            Ok(()) => Ok(Next::Continue),
            Err(CmdError::Backend(e)) => self.shard_failed(e).await,
            Err(CmdError::Sql(e)) => {
                debug!(conn = self.id, "statement refused: {e}");
                self.send_refusal(&crate::frontend::errors::sql_error_code(&e), &e.to_string())
                    .await?;
                Ok(Next::Continue)
            }
            Err(CmdError::Refused(code, message)) => {
                debug!(conn = self.id, "statement refused: {message}");
                self.send_refusal(&code, &message).await?;
                Ok(Next::Continue)
            }
            Err(CmdError::Reply(p)) => {
                self.reply_packet(&p).await?;
                Ok(Next::Continue)
            }
            Err(e) => Err(e),
        }
    }

    /// A reload published other rules: the session uses them from this
    /// command on, unless it is inside a transaction (which keeps the
    /// rules it began with).
    #[cold]
    fn take_new_rules(&mut self) {
        // Not `in_txn`: under autocommit off that is always true, and such
        // a session would never take new rules.
        if self.txn_open() {
            return;
        }
        self.rules_version = self.shared.rules.generation();
        self.rules = self.shared.rules.load();
    }

    pub(in crate::frontend) async fn query(&mut self, payload: &[u8]) -> Result<(), CmdError> {
        let sql = &payload[1..];
        if self.shared.pause.active() {
            // A resharding cutover: held while it names a paused table.
            self.hold_if_paused(sql).await?;
        }
        let mentions = self.mentions_of(sql);
        let stmt = statement::classify_with(sql, mentions);
        if stmt.sequences {
            // `NEXTVAL(idgate.g)` and friends (`admin/sequence.rs`).
            match self.query_sequences(sql).await? {
                SeqOutcome::NotOurs => {}
                SeqOutcome::Answered => return Ok(()),
                SeqOutcome::Rewritten(p) => return Box::pin(self.query(&p)).await,
            }
        }
        let routing = self.shared.routing;
        match stmt.kind {
            // Boxed: an admin command's future (a rules reload holds a
            // generator, 128-byte aligned) would otherwise size and align
            // every session's future for a command a DBA runs.
            statement::Kind::Admin(cmd) => return Box::pin(self.admin(cmd)).await,
            statement::Kind::Kill(Ok(k)) => return self.kill(k).await,
            statement::Kind::Kill(Err(what)) => {
                return Err(CmdError::Refused(
                    codes::ER_NOT_SUPPORTED_YET,
                    format!("idgate: {what} is not supported; use KILL [CONNECTION | QUERY] <connection id>"),
                ))
            }
            statement::Kind::Diag(d) if routing => {
                return Box::pin(self.diagnostics(payload, d)).await
            }
            statement::Kind::Begin if routing => return self.begin(payload).await,
            statement::Kind::End if routing => return self.end(payload).await,
            statement::Kind::Savepoint(op, name) if routing => return self.savepoint(payload, op, name).await,
            _ => {}
        }
        if &stmt.keyword[..5] == b"LOAD\0"
            && self.rules.is_some()
            && Box::pin(self.load_data(payload)).await?
        {
            // LOAD DATA into a rule table (`write/load.rs`).
            return Ok(());
        }
        // INSERT ... SELECT into a rule table (`write/insel.rs`).
        if self.rules.is_some()
            && matches!(&stmt.keyword, b"INSERT\0\0" | b"REPLACE\0")
            && self.insert_select(payload).await?
        {
            return Ok(());
        }
        if routing {
            match self.query_routed(payload).await? {
                QueryRoute::NotRouted => {}
                QueryRoute::Done => return Ok(()),
                // Several statements: each runs as if sent alone (`multi`).
                QueryRoute::Several(parts) => return Box::pin(self.multi(payload, parts)).await,
            }
        }
        let mut handled = false;
        if self.rules.is_some() {
            handled = self.query_with_rules(payload).await?;
            if self.client_cs.is_some() && keyword::mentions_charset(sql) {
                self.client_cs = None;
            }
        }
        // What idgate read of the session and of tables (rules, and the
        // AUTO_INCREMENT columns a multiplexed session looks at).
        if (self.rules.is_some() || self.multiplexing())
            && Mentions::may_have(mentions, Word::SqlMode, || keyword::mentions_sql_mode(sql))
        {
            self.sql_modes = None;
            for b in self.backends.conns_mut() {
                b.sql_modes = None;
            }
        }
        if stmt.is_ddl() {
            self.shared.columns.clear();
        }
        if !handled {
            let mut keeps_lid = false;
            if routing {
                if stmt.may_write() {
                    self.check_write(&[0])?;
                }
                self.sync_last_id(0, sql).await?;
                keeps_lid = self.insert_keeps_last_id(0, sql).await;
            }
            let outcome = self.forward(0, payload, Expect::Results).await?;
            if routing {
                if keeps_lid && !outcome.error {
                    // Explicit ids: the value stays where it is.
                    self.note_last_id_set(0, sql);
                } else {
                    self.note_last_id_change(0, sql);
                }
            }
            if !outcome.error && outcome.oks == 1 {
                let db = keyword::use_statement(sql);
                // A session `SET` (not `SET STATEMENT ... FOR`, whose
                // statement must run once) reaches every open shard.
                if routing && (db.is_some() || keyword::session_set(sql)) {
                    self.propagate(0, payload, Expect::Results).await;
                }
                if let Some(db) = db {
                    self.schema = Some(db);
                }
                self.state.record(payload);
            }
        }
        if Mentions::may_have(mentions, Word::Semicolon, || {
            keyword::may_change_schema(sql)
        }) {
            self.refresh_schema().await?;
        }
        Ok(())
    }

    async fn init_db(&mut self, payload: &[u8]) -> Result<(), CmdError> {
        let outcome = self.forward(0, payload, Expect::Single).await?;
        if !outcome.error {
            self.schema = Some(String::from_utf8_lossy(&payload[1..]).into_owned());
            if self.shared.routing {
                self.propagate(0, payload, Expect::Single).await;
            }
        }
        Ok(())
    }

    /// COM_PING: answered by the shard when the session has a connection to
    /// it, else by idgate itself (pools ping idle connections often).
    async fn ping(&mut self, payload: &[u8]) -> Result<(), CmdError> {
        if self.backends.is_open(0) {
            self.forward(0, payload, Expect::Single).await?;
            return Ok(());
        }
        self.send_ok(self.next_seq, status::AUTOCOMMIT).await
    }

    /// What a COM_STMT_PREPARE of `payload` (the client's) becomes under
    /// the session's rules: the statement to keep, and what its shard's
    /// prepare response must be turned into for the client. Used at
    /// prepare, and again at an execute after a rule reload changed the
    /// rules the statement was planned with ([`Session::replan`]).
    async fn build_stmt(
        &mut self,
        payload: &[u8],
    ) -> Result<(PreparedStmt, PrepareShape), CmdError> {
        let client_prepare = payload.to_vec();
        // Calls on idgate's generators: the shard prepares placeholders
        // (each execute plans it again with values: `admin/sequence.rs`).
        let (seq_text, sequence) = match statement::sequence::may_have(&payload[1..]) {
            true => match self.prepare_sequences(payload).await? {
                Some((text, s)) => (Some(text), Some(s)),
                None => (None, None),
            },
            false => (None, None),
        };
        let payload = seq_text.as_deref().unwrap_or(payload);
        if statement::kill::parse(&payload[1..]).is_some() {
            // Prepared, the id would reach a shard as a thread id.
            return Err(CmdError::Refused(
                codes::ER_NOT_SUPPORTED_YET,
                "idgate: a prepared KILL is not supported; send KILL [CONNECTION | QUERY] <connection id> as a statement".into(),
            ));
        }
        let plan = match self.rules {
            Some(_) => self.plan_prepare(payload).await?,
            None => None,
        };
        // An UPDATE of a rule table's id column: the shard prepares it with
        // the assignment that records the highest id (`sql::update`).
        let highest = match (&plan, &self.rules) {
            (None, Some(rules)) => self.prepare_highest(rules.clone(), payload).await?,
            _ => None,
        };
        let with_capture;
        let payload = match &highest {
            Some((text, _)) => {
                with_capture = text.clone();
                &with_capture[..]
            }
            None => payload,
        };
        let highest = highest.map(|(_, h)| h);
        let client_sql = plan
            .as_ref()
            .filter(|p| p.rule.routed.is_some())
            .and_then(|_| std::str::from_utf8(&payload[1..]).ok())
            .map(Arc::from);
        let rewritten;
        let payload = match &plan {
            Some(p) => {
                rewritten = [&[cmd::STMT_PREPARE][..], p.backend_sql.as_bytes()].concat();
                &rewritten[..]
            }
            None => payload,
        };
        let (route, prepare_on) = match (&plan, self.shared.routing) {
            (None, true) => self.prepare_route(payload).await?,
            (Some(p), true) => (None, self.insert_prepare_shard(p)),
            _ => (None, 0),
        };
        // A scattered SELECT's LIMIT with a `?` or an offset: the shards
        // get `LIMIT ?, ?`, bound by idgate (`route.rs`).
        let limit = match &route {
            Some(a) => self.limit_rewrite(a, &payload[1..]).await?,
            None => None,
        };
        let limited;
        let (payload, client_params) = match &limit {
            Some((_, text, n)) => {
                limited = [&[cmd::STMT_PREPARE][..], text.as_bytes()].concat();
                (&limited[..], Some(*n))
            }
            None => (payload, plan.as_ref().map(|p| p.client_params)),
        };
        let limit = limit.map(|(l, _, _)| l);
        let shards = self.backends.len();
        let stmt = PreparedStmt {
            prepare: payload.to_vec(),
            params: 0,
            backend_ids: vec![None; shards],
            types_sent: vec![false; shards],
            types: None,
            plan: plan.clone(),
            route,
            txn: (self.shared.routing && statement::txn::classify(&payload[1..]) != TxnStmt::Other)
                .then(|| [&[cmd::QUERY][..], &payload[1..]].concat()),
            exec_shard: prepare_on,
            long_data: Vec::new(),
            long_data_bytes: 0,
            long_params: Vec::new(),
            client_sql,
            limit,
            merged: None,
            highest,
            client_prepare,
            rules_version: self.rules_version,
            mux_facts: None,
            sequence,
        };
        let hide_columns = stmt
            .plan
            .as_ref()
            .is_some_and(|p| p.report == crate::sql::Report::Returning);
        Ok((
            stmt,
            PrepareShape {
                client_params,
                hide_columns,
                prepare_on,
            },
        ))
    }

    async fn prepare(&mut self, payload: &[u8]) -> Result<(), CmdError> {
        let (stmt, shape) = self.build_stmt(payload).await?;
        if let Some(names) = stmt
            .sequence
            .as_ref()
            .and_then(|s| s.found.select_only.clone())
        {
            return self.prepare_answered(stmt, &names).await;
        }
        let PrepareShape {
            client_params,
            hide_columns,
            prepare_on,
        } = shape;
        let mut stmt = stmt;
        let payload = stmt.prepare.clone();
        let payload = &payload[..];
        let id = self.stmts.insert(stmt.clone());
        // With a plan or a LIMIT rewrite, the client is told the parameters
        // it wrote: the shard's definitions of the parameters idgate added
        // are dropped (they are all alike).
        // A RETURNING idgate added (`sql::upsert`): the client prepared a
        // statement without a result set, and is told so.
        let deprecate_eof = self.login.capabilities & cap::DEPRECATE_EOF != 0;
        let mut index = 0usize;
        let mut backend_id = None;
        let mut hook = |kind: Kind, p: &[u8]| {
            let i = index;
            index += 1;
            if i == 0 {
                if kind == Kind::Err || p.len() < 12 {
                    return Action::Keep;
                }
                let mut c = Cursor::new(p);
                let _ = c.u8();
                backend_id = c.u32().ok();
                let _columns = c.u16();
                stmt.params = c.u16().unwrap_or(0);
                let mut out = p.to_vec();
                out[1..5].copy_from_slice(&id.to_le_bytes());
                if let Some(n) = client_params {
                    out[7..9].copy_from_slice(&(n as u16).to_le_bytes());
                }
                if hide_columns {
                    out[5..7].copy_from_slice(&0u16.to_le_bytes());
                }
                return Action::Replace(out);
            }
            let params = stmt.params as usize;
            let params_end = params + usize::from(params > 0 && !deprecate_eof);
            if hide_columns && i > params_end {
                return Action::Drop;
            }
            let (Some(n), params) = (client_params, stmt.params as usize) else {
                return Action::Keep;
            };
            if i <= params {
                if i <= n {
                    Action::Keep
                } else {
                    Action::Drop
                }
            } else if i == params + 1 && params > 0 && !deprecate_eof && n == 0 {
                // The EOF closing parameter definitions the client does not get.
                Action::Drop
            } else {
                Action::Keep
            }
        };
        let result = self
            .forward_with(prepare_on, payload, Expect::Prepare, &mut hook)
            .await;
        match (result, backend_id) {
            (Ok(_), Some(bid)) => {
                stmt.backend_ids[prepare_on] = Some(bid);
                if let Some(s) = self.stmts.get_mut(id) {
                    *s = stmt;
                }
                Ok(())
            }
            (r, _) => {
                self.stmts.remove(id);
                r.map(|_| ())
            }
        }
    }

    async fn execute(&mut self, payload: &[u8]) -> Result<(), CmdError> {
        let Ok(id) = wire_stmt::stmt_id(&payload[1..]) else {
            return self.malformed("COM_STMT_EXECUTE").await;
        };
        if self.shared.pause.active() {
            // A resharding cutover: held while it names a paused table.
            if let Some(text) = self.stmts.get_mut(id).map(|s| s.client_prepare.clone()) {
                self.hold_if_paused(text.get(1..).unwrap_or_default())
                    .await?;
            }
        }
        let sequence = self.stmts.get_mut(id).and_then(|s| s.sequence.clone());
        if let Some(seq) = sequence {
            // Fresh values for its calls (`admin/sequence.rs`).
            match self.execute_sequences(id, &seq).await? {
                None => return Ok(()),
                Some(text) => self.replan(id, Some(text)).await?,
            }
        } else if self.stmts.get_mut(id).is_some_and(|s| {
            s.rules_version != self.rules_version && !s.long_params.contains(&true)
        }) {
            self.replan(id, None).await?;
        }
        let highest = self.stmts.get_mut(id).and_then(|s| s.highest.clone());
        let result = match highest {
            // An UPDATE of a rule table's id column (`capture.rs`).
            Some(h) => {
                let release = self.start_captures();
                match self.execute_stmt(id, payload).await {
                    Ok(()) => {
                        let c = crate::frontend::session::readback::Captured {
                            generator: &h.generator,
                            captures: &[],
                            highest: true,
                            report_last: None,
                            shards: h.shards.clone(),
                        };
                        self.finish_captures(std::slice::from_ref(&c), release)
                            .await
                    }
                    Err(e) => {
                        self.release_held(release).await?;
                        Err(e)
                    }
                }
            }
            None => self.execute_stmt(id, payload).await,
        };
        // Long data is for one execute, as in MariaDB.
        if let Some(s) = self.stmts.get_mut(id) {
            s.clear_long_data();
        }
        result
    }

    async fn execute_stmt(&mut self, id: u32, payload: &[u8]) -> Result<(), CmdError> {
        let max = self.shared.config.server.max_packet;
        let Some(s) = self.stmts.get_mut(id) else {
            return self.unknown_stmt(id, "mysqld_stmt_execute").await;
        };
        // A new execute closes the statement's cursor.
        s.merged = None;
        if s.long_data_bytes > max {
            return Err(CmdError::Refused(
                codes::ER_NET_PACKET_TOO_LARGE,
                format!("idgate: the long data sent for this session's statements (COM_STMT_SEND_LONG_DATA) is larger than 'max_packet' ({max} bytes); a statement's shard is chosen at execute, so idgate holds it until then"),
            ));
        }
        if let Some(plan) = s.plan.clone() {
            if plan.captures.is_empty() {
                return self.execute_planned(id, payload, plan).await;
            }
            return self.execute_captured(id, payload, plan).await;
        }
        if let Some(route) = s.route.clone() {
            return self.execute_routed(id, payload, route).await;
        }
        if let Some(q) = s.txn.clone() {
            // A prepared BEGIN/COMMIT/ROLLBACK: the same as its text.
            return match statement::txn::classify(&q[1..]) {
                TxnStmt::Begin => self.begin(&q).await,
                _ => self.end(&q).await,
            };
        }
        let shard = 0;
        match self.execute_payload(id, shard, payload).await? {
            Some(out) => self.forward(shard, &out, Expect::Results).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// FETCH, RESET and SEND_LONG_DATA: the statement id is translated, the
    /// rest passes as it is. `expect` is `None` for commands without a reply.
    async fn stmt_forward(
        &mut self,
        payload: &[u8],
        expect: Option<Expect>,
    ) -> Result<(), CmdError> {
        let name = match payload[0] {
            cmd::STMT_FETCH => "mysqld_stmt_fetch",
            cmd::STMT_RESET => "mysqld_stmt_reset",
            _ => "mysqld_stmt_send_long_data",
        };
        let Ok(id) = wire_stmt::stmt_id(&payload[1..]) else {
            return match expect {
                Some(_) => self.malformed(name).await,
                None => Ok(()),
            };
        };
        if payload[0] == cmd::STMT_FETCH {
            // A cursor over several shards is served by idgate (`cursor.rs`).
            let n = payload
                .get(5..9)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            if self.fetch_merged(id, n).await? {
                return Ok(());
            }
        }
        if payload[0] == cmd::STMT_SEND_LONG_DATA
            && self.stmts.get_mut(id).is_some_and(|s| {
                s.rules_version != self.rules_version && !s.long_params.contains(&true)
            })
        {
            // With the first long data of an execute: once a shard holds
            // some, the execute runs on the plan that has it.
            if let Err(e) = self.replan(id, None).await {
                debug!(
                    conn = self.id,
                    stmt = id,
                    "planning again before long data failed: {e}"
                );
            }
        }
        if payload[0] == cmd::STMT_SEND_LONG_DATA {
            let max = self.shared.config.server.max_packet;
            let held = self.stmts.long_data_held();
            let param = payload
                .get(5..7)
                .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
            let Some(s) = self.stmts.get_mut(id) else {
                return Ok(());
            };
            if let Some(n) = param {
                // The next execute carries no value for it.
                if s.long_params.len() <= n {
                    s.long_params.resize(n + 1, false);
                }
                s.long_params[n] = true;
            }
            if s.routed() {
                // Its shard is not known before the execute. The session
                // holds at most `max_packet` bytes of it over all statements.
                if held.saturating_add(payload.len()) > max {
                    s.long_data.clear();
                    s.long_data_bytes = usize::MAX;
                } else {
                    s.long_data_bytes += payload.len();
                    s.long_data.push(payload.to_vec());
                }
                return Ok(());
            }
        }
        if payload[0] == cmd::STMT_RESET {
            if let Some(s) = self.stmts.get_mut(id) {
                s.clear_long_data();
                s.merged = None;
            }
        }
        // A fetch reads the cursor where the last execute ran; the other
        // commands go there too (a statement on a routed table is prepared
        // on each shard it ran on).
        let shard = self.stmts.get_mut(id).map(|s| s.exec_shard).unwrap_or(0);
        let Some(bid) = self.backend_stmt(id, shard).await? else {
            return match expect {
                Some(_) => self.unknown_stmt(id, name).await,
                None => Ok(()),
            };
        };
        let out = if payload[0] == cmd::STMT_SEND_LONG_DATA {
            match self.long_data_packet(id, bid, payload) {
                Some(out) => out,
                None => return Ok(()),
            }
        } else {
            let mut out = payload.to_vec();
            out[1..5].copy_from_slice(&bid.to_le_bytes());
            out
        };
        match expect {
            Some(e) => self.forward(shard, &out, e).await.map(|_| ()),
            None => {
                let b = self.backend(shard).await.map_err(CmdError::Backend)?;
                b.send(&out).await.map_err(CmdError::Backend)?;
                Ok(())
            }
        }
    }

    /// Plans prepared statement `id` again under the session's rules (a
    /// reload changed them since it was prepared): the client's statement
    /// id and parameter count stay; the shards' statements are closed and
    /// prepared again as the new plan says (at once on the shard it runs
    /// on first, elsewhere when an execute needs them).
    /// `text`: the COM_STMT_PREPARE payload to plan instead of the
    /// client's (its sequence calls replaced by values).
    pub(in crate::frontend) async fn replan(
        &mut self,
        id: u32,
        text: Option<Vec<u8>>,
    ) -> Result<(), CmdError> {
        // Boxed: after a reload only (`engine/size_tests.rs`).
        Box::pin(self.replan_now(id, text)).await
    }

    async fn replan_now(&mut self, id: u32, text: Option<Vec<u8>>) -> Result<(), CmdError> {
        let Some(old) = self.stmts.get_mut(id) else {
            return Ok(());
        };
        let client_prepare = text.unwrap_or_else(|| old.client_prepare.clone());
        let (fresh, shape) = self.build_stmt(&client_prepare).await?;
        let Some(old) = self.stmts.get_mut(id) else {
            return Ok(());
        };
        let old_ids = std::mem::take(&mut old.backend_ids);
        let PreparedStmt {
            prepare,
            backend_ids,
            types_sent,
            plan,
            route,
            txn,
            client_sql,
            highest,
            limit,
            rules_version,
            ..
        } = fresh;
        old.prepare = prepare;
        old.backend_ids = backend_ids;
        old.types_sent = types_sent;
        old.plan = plan;
        old.route = route;
        old.txn = txn;
        old.client_sql = client_sql;
        old.highest = highest;
        old.limit = limit;
        old.rules_version = rules_version;
        old.exec_shard = shape.prepare_on;
        old.merged = None;
        for (shard, bid) in old_ids.iter().enumerate() {
            if let (Some(bid), Some(b)) = (bid, self.backends.get_mut(shard)) {
                let mut out = vec![cmd::STMT_CLOSE];
                out.extend_from_slice(&bid.to_le_bytes());
                b.send(&out).await.map_err(CmdError::Backend)?;
            }
        }
        // Learn the shard statement's parameter count now: an execute
        // reads it before it prepares on another shard.
        self.backend_stmt(id, shape.prepare_on).await?;
        debug!(
            conn = self.id,
            stmt = id,
            "prepared statement planned again after a rules reload"
        );
        Ok(())
    }

    async fn stmt_close(&mut self, payload: &[u8]) -> Result<(), CmdError> {
        let Ok(id) = wire_stmt::stmt_id(&payload[1..]) else {
            return Ok(());
        };
        let Some(s) = self.stmts.remove(id) else {
            return Ok(());
        };
        for (shard, bid) in s.backend_ids.iter().enumerate() {
            if let (Some(bid), Some(b)) = (bid, self.backends.get_mut(shard)) {
                let mut out = vec![cmd::STMT_CLOSE];
                out.extend_from_slice(&bid.to_le_bytes());
                b.send(&out).await.map_err(CmdError::Backend)?;
            }
        }
        Ok(())
    }

    async fn reset_connection(&mut self, payload: &[u8]) -> Result<(), CmdError> {
        self.forget_session_state();
        let mut replied = false;
        for shard in 0..self.backends.len() {
            if !self.backends.is_open(shard) {
                continue;
            }
            if !replied {
                self.forward(shard, payload, Expect::Single).await?;
                replied = true;
            } else if let Some(b) = self.backends.get_mut(shard) {
                b.run(payload, Expect::Single)
                    .await
                    .map_err(CmdError::Backend)?;
            }
        }
        if !replied {
            self.send_ok(self.next_seq, status::AUTOCOMMIT).await?;
        }
        Ok(())
    }

    /// COM_CHANGE_USER: checked against `[[users]]` like a login; then the
    /// session starts afresh (shard connections reopen with the new schema).
    async fn change_user(&mut self, payload: &[u8]) -> Result<Next, CmdError> {
        let mut c = Cursor::new(&payload[1..]);
        let user = c.null_str().to_vec();
        let token = if self.login.capabilities & cap::SECURE_CONNECTION != 0 {
            c.u8()
                .ok()
                .and_then(|n| c.take(n as usize).ok())
                .unwrap_or_default()
                .to_vec()
        } else {
            c.null_str().to_vec()
        };
        let db = c.null_str().to_vec();
        let charset = c.u16().ok();
        let plugin = if self.login.capabilities & cap::PLUGIN_AUTH != 0 {
            c.null_str().to_vec()
        } else {
            Vec::new()
        };
        let name = String::from_utf8_lossy(&user).into_owned();
        // A login like any other: delayed after repeated failures from
        // this address, and counted.
        let peer_ip = self.client.peer_ip();
        if let Some(ip) = peer_ip {
            self.shared
                .login_throttle
                .wait(ip, &name, "COM_CHANGE_USER")
                .await;
        }
        // The same exchange as a login's, with the session's nonce.
        let attempt = crate::frontend::session::auth::Attempt {
            user: &user,
            plugin: &plugin,
            token,
            nonce: &self.login.scramble,
            seq: self.next_seq,
        };
        let shared = self.shared.clone();
        let verdict =
            crate::frontend::session::auth::authenticate(&mut self.client, &shared, attempt).await;
        let Ok(verdict) = verdict else {
            if let Some(ip) = peer_ip {
                self.shared.login_throttle.failed(ip);
            }
            return Ok(Next::Quit);
        };
        let (ok, seq) = (verdict.accepted, verdict.seq);
        if let Some(ip) = peer_ip {
            if ok {
                self.shared.login_throttle.succeeded(ip);
            } else {
                self.shared.login_throttle.failed(ip);
            }
        }
        if !ok {
            let using = if verdict.used_password { "YES" } else { "NO" };
            warn!(conn = self.id, user = %name, "COM_CHANGE_USER refused");
            let msg = format!("Access denied for user '{name}' (using password: {using})");
            let _ = self
                .send_error(seq, &codes::ER_ACCESS_DENIED_ERROR, &msg)
                .await;
            return Ok(Next::Quit);
        }
        // A user that must use TLS cannot be reached from a plaintext
        // session either.
        if !self.client.is_tls() && self.shared.user_requires_tls(&user) {
            warn!(conn = self.id, user = %name, "COM_CHANGE_USER refused: TLS required");
            let msg = format!(
                "{} (user '{name}' requires TLS)",
                crate::frontend::session::login::INSECURE_REFUSED
            );
            let _ = self
                .send_error(seq, &codes::ER_SECURE_TRANSPORT_REQUIRED, &msg)
                .await;
            return Ok(Next::Quit);
        }
        // The new user's own place under its max_connections (the old
        // one's is given back once the switch is done).
        let same_user = self.shared.user(&user).map(|(i, _)| i) == Some(self.user_slot.user());
        if !same_user {
            match crate::frontend::session::acquire_slot(&self.shared, &name) {
                Some(slot) => self.user_slot = slot,
                None => {
                    let (msg, _) =
                        crate::frontend::session::too_many_user_connections(&self.shared, &name);
                    warn!(conn = self.id, user = %name, "COM_CHANGE_USER refused: {msg}");
                    let _ = self
                        .send_error(seq, &codes::ER_TOO_MANY_USER_CONNECTIONS, &msg)
                        .await;
                    return Ok(Next::Quit);
                }
            }
        }
        // Shard connections of the old user's account are closed: the new
        // ones log in with the new user's (`Session::backend`).
        self.return_backends(true).await;
        self.forget_session_state();
        self.registered.control.set_user(&name);
        self.login.user = name;
        if let Some(cs) = charset {
            self.login.charset = cs as u8;
        }
        self.schema = (!db.is_empty()).then(|| String::from_utf8_lossy(&db).into_owned());
        if self.schema.is_some() {
            if let Err(e) = self.backend(0).await {
                let _ = self.send_backend_error(seq, &e).await;
                return Ok(Next::Quit);
            }
        }
        self.send_ok(seq, status::AUTOCOMMIT).await?;
        Ok(Next::Continue)
    }

    async fn run(&mut self, shutdown: &mut watch::Receiver<bool>) -> Ended {
        // A client that names a database at login learns at once whether it
        // exists, as with a direct connection.
        let seq = self.login.reply_seq;
        let mut login_ok = None;
        if self.schema.is_some() {
            // Boxed, as the awaits below that run once per session
            // (`engine/size_tests.rs`).
            match Box::pin(self.backend(0)).await {
                // The shard's own OK: it carries the schema change for
                // clients that track session state.
                // A connection reused from the pool has none: idgate's own OK.
                Ok(b) => {
                    login_ok = Some(std::mem::take(&mut b.login_ok)).filter(|ok| !ok.is_empty())
                }
                Err(e) => {
                    let _ = self.send_backend_error(seq, &e).await;
                    return Ended::Other(format!("login database refused: {e}"));
                }
            }
        }
        let sent = match login_ok {
            Some(ok) => self.client.write_packet(seq, &ok).await.map(|_| ()),
            None => self
                .send_ok(seq, status::AUTOCOMMIT)
                .await
                .map_err(|e| match e {
                    CmdError::ClientGone(io) => io,
                    other => std::io::Error::other(other.to_string()),
                }),
        };
        if let Err(e) = sent {
            return Ended::Other(e.to_string());
        }
        // A multiplexed session holds no connection while it waits.
        Box::pin(self.after_login()).await;
        let max_packet = self.shared.config.server.max_packet;
        let mut draining = *shutdown.borrow();
        let control = self.registered.control.clone();
        // Armed once, not at every command: a `Notified` or `changed()`
        // made anew each time registers and unregisters its waiter (four
        // locks per statement). The drain is watched on a clone, so that
        // `shutdown` itself can be asked at every command without a lock.
        let mut killed = std::pin::pin!(control.killed());
        let mut shut_rx = shutdown.clone();
        let mut shut = std::pin::pin!(shut_rx.changed());
        loop {
            // Checked at every command (an atomic load each), so a client
            // that keeps sending cannot hold off a KILL or the drain,
            // although the read below comes first.
            if !draining && shutdown.has_changed().unwrap_or(true) {
                draining = true;
            }
            if draining && !self.in_transaction() {
                self.backends.set_at_rest();
                return Ended::Ordinary("server shutting down");
            }
            if control.is_killed() {
                return Ended::Other("killed by KILL from another session".into());
            }
            let mut buf = std::mem::take(&mut self.buf);
            // Biased, the read first: a session woken by its client's
            // command reads it without polling the KILL and drain
            // waiters (each poll takes their lock); they are polled when
            // the read has to wait, which arms them for the wait.
            let read = tokio::select! {
                biased;
                r = self.client.read_packet(&mut buf, max_packet) => r,
                _ = killed.as_mut() => {
                    killed.set(control.killed());
                    self.buf = buf;
                    continue;
                }
                _ = shut.as_mut(), if !draining => {
                    draining = true;
                    self.buf = buf;
                    continue;
                }
            };
            let next = match read {
                Ok(None) => {
                    self.backends.set_at_rest();
                    return Ended::Ordinary("client closed the connection");
                }
                Ok(Some((0, last))) if buf.is_empty() => {
                    // MariaDB reads an empty command packet as COM_SLEEP:
                    // "Unknown command", and the connection stays open.
                    self.next_seq = last.wrapping_add(1);
                    self.send_error(1, &codes::ER_UNKNOWN_COM_ERROR, "Unknown command")
                        .await
                        .map(|_| Next::Continue)
                        .map_err(CmdError::ClientGone)
                }
                Ok(Some((0, last))) => {
                    self.next_seq = last.wrapping_add(1);
                    self.command(&buf).await
                }
                Ok(Some(_)) | Err(ReadError::OutOfOrder { .. }) => {
                    let _ = self
                        .send_error(
                            1,
                            &codes::ER_NET_PACKETS_OUT_OF_ORDER,
                            "Got packets out of order",
                        )
                        .await;
                    return Ended::Other("packets out of order".into());
                }
                Err(ReadError::TooLarge(n)) => {
                    let _ = self
                        .send_error(
                            1,
                            &codes::ER_NET_PACKET_TOO_LARGE,
                            &format!("Got a packet bigger than 'max_packet' ({n} bytes or more)"),
                        )
                        .await;
                    return Ended::Other("packet too large".into());
                }
                Err(ReadError::Io(e)) => {
                    return Ended::Other(format!("client connection error: {e}"))
                }
            };
            // A large command's buffer is not kept for the session's life
            // (a bulk load's 16 MiB statement, then hours idle).
            if buf.capacity() > KEEP_COMMAND_BUFFER {
                buf = Vec::new();
            }
            self.buf = buf;
            match next {
                Ok(Next::Continue) => {}
                Ok(Next::Quit) => {
                    self.backends.set_at_rest();
                    return Ended::Ordinary("client quit");
                }
                Err(CmdError::ClientGone(e)) => {
                    return Ended::Other(format!("client connection lost: {e}"))
                }
                Err(CmdError::End(why)) => return Ended::Other(why),
                Err(CmdError::Backend(e)) => {
                    return Ended::Other(format!(
                        "closed after shard failure in a transaction: {e}"
                    ))
                }
                Err(e) => return Ended::Other(e.to_string()),
            }
        }
    }
}
