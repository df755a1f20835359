//! Sessions and the shared pool of shard connections (`backend::pool`):
//! taking a ready connection for a session, giving the session's
//! connections back when it ends, and the pool's upkeep.
//!
//! - Taking ([`Session::checkout`]): an idle connection of the session's
//!   [`ConnKey`] is checked before it is handed out: one the shard closed
//!   (bytes or EOF waiting on its socket) is replaced, never handed out, and
//!   one idle longer than [`PING_AFTER`] must answer COM_PING first. Its
//!   schema is changed (COM_INIT_DB) when the session's differs; a session
//!   without a schema never gets one that has one (MariaDB cannot leave a
//!   schema) and opens a new connection in its place.
//! - Giving back ([`Session::return_backends`]): only from a session that
//!   ended between commands (no reply in flight), outside a transaction
//!   and XA branch, and only a connection that answers COM_RESET_CONNECTION
//!   (MariaDB then drops the session's temporary tables, user variables,
//!   prepared statements, locks, `SET`s and `LAST_INSERT_ID()`, and goes
//!   back to the handshake's character set; the schema stays). Anything
//!   else is closed.
//! - Upkeep ([`maintain`], once a second): idle connections past
//!   `pool_idle_timeout` (beyond `pool_min_idle`) or `pool_max_lifetime` are
//!   closed; with `pool_min_idle`, idle connections of the last key used
//!   are opened up to it.

use crate::backend::pool::{ConnKey, Idle, ShardLease, ShardPool, Taken, Want};
use crate::backend::{BackendConn, BackendError, ConnectParams};
use crate::frontend::session::backends::Checked;
use crate::frontend::session::Session;
use crate::frontend::shared::Shared;
use crate::protocol::consts::{cap, cmd, status};
use crate::protocol::response::Expect;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// An idle connection unused for longer than this answers COM_PING before
/// it is handed out (a half-open connection shows nothing on its socket).
pub const PING_AFTER: Duration = Duration::from_secs(1);

/// How long a connection being closed may take to give up the value of a
/// claim it carries (`lidclaim.rs`).
const QUIT_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Capabilities that do not change how a connection's replies are framed
/// (they only shape its login).
const LOGIN_ONLY_CAPS: u32 = cap::CONNECT_WITH_DB | cap::CONNECT_ATTRS | cap::SSL;

/// Sends COM_QUIT and closes, best effort (the connection is not reused).
/// A session's `LAST_INSERT_ID()` it still holds unread is read first.
/// Boxed inside, like every rare wait on a statement's path (a new
/// connection, a ping, a claim read): inline, it would size every
/// session's future (`engine/size_tests.rs`).
pub(in crate::frontend) async fn quit<C: std::borrow::BorrowMut<BackendConn>>(mut c: C) {
    Box::pin(async move {
        let c = c.borrow_mut();
        if c.lid_claim.is_some() {
            crate::frontend::session::lidread::settle_claim(c, QUIT_READ_TIMEOUT).await;
        }
        let _ = c.send(&[cmd::QUIT]).await;
        c.conn.shutdown().await;
    })
    .await
}

/// How many more connections a session takes when the one it took breaks
/// before its statement is sent ([`Session::after_broken_take`]): each is
/// closed, and only the last failure fails the statement.
const TAKE_RETRIES: u32 = 2;

impl Session {
    /// The pool key of this session's connections.
    /// Made once per login (COM_CHANGE_USER forgets it).
    pub(in crate::frontend) fn conn_key(&mut self) -> ConnKey {
        if let Some(k) = self.mux.key {
            return k;
        }
        let (user, password) = self.shared.shard_account_key(&self.login.user);
        let key = ConnKey {
            user,
            password,
            capabilities: self.login.capabilities & !LOGIN_ONLY_CAPS,
            ext_capabilities: self.login.ext_capabilities,
            charset: self.login.charset,
        };
        self.mux.key = Some(key);
        key
    }

    /// The session's schema, shared with the connections it gives back
    /// (one `Arc` per name for all sessions: the pool compares pointers).
    pub(in crate::frontend) fn schema_shared(&mut self) -> Option<Arc<str>> {
        let now = self.schema.as_deref();
        if self.mux.schema.as_deref() != now {
            self.mux.schema = now.map(|s| self.shared.schema_arc(s));
        }
        self.mux.schema.clone()
    }

    /// A ready connection to `shard` from its pool (reused, or opened in a
    /// free place), in the session's schema, with the session state its
    /// last user left on it (`Checked::tag`, `Checked::lid`).
    pub(in crate::frontend) async fn checkout(
        &mut self,
        shard: usize,
    ) -> Result<Checked, BackendError> {
        let shared = self.shared.clone();
        let Some(pool) = shared.pools.get(shard) else {
            return Err(BackendError::Lost {
                shard: shard.to_string(),
                source: std::io::Error::other("no such shard"),
            });
        };
        let key = self.conn_key();
        let tag = self.state_tag();
        let db = self.schema_shared();
        let serial = self.mux.given.get(shard).copied().unwrap_or(0);
        let lease = loop {
            let want = Want {
                db: db.as_ref(),
                tag,
                owner: self.id,
                serial,
                home: crate::protocol::stream::event_loop(),
            };
            let taken = pool
                .take(&key, want)
                .await
                .map_err(|f| BackendError::PoolFull {
                    shard: pool.shard.clone(),
                    max: f.max,
                    waited_ms: f.waited.as_millis() as u64,
                })?;
            match taken {
                Taken::Open { lease, evicted } => {
                    if let Some(c) = evicted {
                        quit(c).await;
                    }
                    break lease;
                }
                Taken::Reuse(idle) => match self.ready(pool, idle).await? {
                    Ready::Conn(c) => return Ok(c),
                    // Closed: its place is free again, take anew.
                    Ready::Stale => continue,
                    // Connection closed, place kept: open one in it.
                    Ready::Reopen(lease) => break lease,
                },
            }
        };
        let s = &shared.config.shards[shard];
        let (user, password) = shared.shard_account(&self.login.user);
        let params = ConnectParams {
            shard: &s.name,
            address: &s.address,
            tls: &shared.shard_tls,
            public_key: s.public_key_pem.as_deref(),
            user,
            password,
            database: self.schema.as_deref(),
            charset: self.login.charset,
            capabilities: self.login.capabilities,
            ext_capabilities: self.login.ext_capabilities,
            attrs: self.login.attrs.as_deref(),
            timeout: shared.connect_timeout(),
        };
        // On an error the lease is dropped: the place is free again.
        let (conn, hs) = BackendConn::connect(&params).await?;
        shared.learn(&hs);
        pool.stats.created.fetch_add(1, Ordering::Relaxed);
        Ok(Checked {
            conn: Box::new(conn),
            lease,
            tag: 0,
            lid: Some(0),
            owner: 0,
            stmts: Vec::new(),
        })
    }

    /// Makes a connection just taken for `shard` the session's: the
    /// `LAST_INSERT_ID()` another session left on it read for that session
    /// (`lid`: its value when known), another session's state reset
    /// (`reset`), this session's `SET`s replayed when its state tag `tag`
    /// is not the session's, and the prepared statements left on it
    /// (`left`, by session `owner`) kept or closed. A shard's refusal of a
    /// `SET` is [`BackendError::StateLost`]; a connection that breaks on the
    /// way is [`BackendError::Lost`] (the caller takes another).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::frontend) async fn ready_taken(
        &mut self,
        shard: usize,
        conn: &mut BackendConn,
        tag: u64,
        lid: Option<u64>,
        owner: u32,
        left: &[u32],
        reset: bool,
    ) -> Result<(), BackendError> {
        let mut lid = self.settle_taken(shard, conn, lid, reset).await?;
        if reset {
            // Another session's state: reset, then this one's.
            if let Some(pool) = self.shared.pools.get(shard) {
                pool.stats.restored.fetch_add(1, Ordering::Relaxed);
            }
            Self::reset_taken(conn).await?;
            lid = Some(0);
        }
        let want = self.state_tag();
        if tag != want || want == u64::MAX {
            // Every new connection gets the session's state, whether it
            // replaces a lost one or is the first to this shard.
            let shard_name = || self.shared.config.shards[shard].name.clone();
            let Some(sets) = self.state.replay() else {
                return Err(BackendError::StateLost {
                    shard: shard_name(),
                    reason: "it was changed in ways idgate cannot replay (SET inside a multi-statement query, or too many SETs)".into(),
                });
            };
            for set in sets {
                if let Err(e) = conn.run(set, Expect::Results).await {
                    let what = String::from_utf8_lossy(&set[1..]);
                    return Err(if e.broke() {
                        BackendError::Lost {
                            shard: shard_name(),
                            source: std::io::Error::other(format!(
                                "the connection broke while the session's {what:?} was replayed: {e}"
                            )),
                        }
                    } else {
                        BackendError::StateLost {
                            shard: shard_name(),
                            reason: format!("replaying {what:?} failed: {e}"),
                        }
                    });
                }
            }
        }
        self.took(shard, conn, lid, owner, left, reset).await
    }

    /// A connection just taken broke before the session's statement was
    /// sent (reading the `LAST_INSERT_ID()` another session left on it,
    /// resetting it, replaying the session's state; or the shard did not
    /// answer in time): it is closed, and another is taken, up to
    /// [`TAKE_RETRIES`] times, since the statement has not been sent and
    /// a connection's failure must not fail it.
    pub(in crate::frontend) async fn after_broken_take(
        &mut self,
        shard: usize,
        conn: Box<BackendConn>,
        e: BackendError,
    ) -> Result<&mut BackendConn, BackendError> {
        warn!(
            conn = self.id,
            shard,
            backend_conn = conn.connection_id,
            "{e}; taking another connection"
        );
        quit(conn).await;
        if self.mux.take_retries >= TAKE_RETRIES {
            self.mux.take_retries = 0;
            return Err(e);
        }
        self.mux.take_retries += 1;
        let r = self.backend(shard).await.map(|_| ());
        self.mux.take_retries = 0;
        r?;
        self.held(shard)
    }

    /// Checks an idle connection before it is handed out, and moves it to
    /// the session's schema.
    async fn ready(
        &mut self,
        pool: &Arc<ShardPool>,
        idle: Idle<ConnKey, Box<BackendConn>>,
    ) -> Result<Ready, BackendError> {
        let Idle {
            key,
            mut conn,
            db,
            tag,
            lid,
            owner,
            stmts,
            lease,
            since,
            serial: _,
            home: _,
        } = idle;
        let timeout = self.shared.connect_timeout();
        let mut alive = !crate::frontend::session::closed_by_peer(&conn);
        // Idle since it was given back, to the command's start (a
        // connection given back since is younger still: no ping).
        if alive && self.began.saturating_duration_since(since) > PING_AFTER {
            let ping = Box::pin(conn.run(&[cmd::PING], Expect::Single));
            alive = matches!(tokio::time::timeout(timeout, ping).await, Ok(Ok(_)));
        }
        if alive {
            // Opened by a session on another session thread: its replies
            // would wake this one across threads at every statement.
            match conn.conn.move_here() {
                Ok(false) => {}
                Ok(true) => {
                    pool.stats.moved.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    debug!(conn = self.id, shard = %pool.shard, backend_conn = conn.connection_id, error = %e, "pooled connection could not be moved to this session's thread; replaced");
                    pool.stats.stale.fetch_add(1, Ordering::Relaxed);
                    return Ok(Ready::Stale);
                }
            }
        }
        if !alive {
            debug!(conn = self.id, shard = %pool.shard, backend_conn = conn.connection_id, "pooled connection was closed by the shard; replaced");
            pool.stats.stale.fetch_add(1, Ordering::Relaxed);
            drop(lease);
            quit(conn).await;
            return Ok(Ready::Stale);
        }
        let checked = |conn, lease, stmts| {
            Ready::Conn(Checked {
                conn,
                lease,
                tag,
                lid,
                owner,
                stmts,
            })
        };
        if db.as_deref() == self.schema.as_deref() {
            return Ok(checked(conn, lease, stmts));
        }
        let Some(want) = self.schema.clone() else {
            // A schema cannot be left: a new connection without one.
            quit(conn).await;
            return Ok(Ready::Reopen(lease));
        };
        let mut payload = vec![cmd::INIT_DB];
        payload.extend_from_slice(want.as_bytes());
        let init_db = Box::pin(conn.run(&payload, Expect::Single));
        match tokio::time::timeout(timeout, init_db).await {
            Ok(Ok(_)) => Ok(checked(conn, lease, stmts)),
            Ok(Err(e @ BackendError::Server { .. })) => {
                // The schema was refused (the client is told); the
                // connection is as good as before.
                if let Some(c) = pool.give_back(Idle {
                    key,
                    // Moved here above, maybe.
                    home: conn.conn.home(),
                    conn,
                    db,
                    tag,
                    lid,
                    owner,
                    stmts,
                    lease,
                    since: Instant::now(),
                    serial: 0,
                }) {
                    quit(c).await;
                }
                Err(e)
            }
            _ => {
                pool.stats.stale.fetch_add(1, Ordering::Relaxed);
                drop(lease);
                Ok(Ready::Stale)
            }
        }
    }

    /// At the session's end (or its COM_CHANGE_USER): each shard
    /// connection is given back to its pool when it can be reused (as it
    /// is when nothing pins the session, `mux.rs`; otherwise reset),
    /// otherwise closed.
    pub(in crate::frontend) async fn return_backends(&mut self, at_rest: bool) {
        let reusable =
            at_rest && self.txn_xa.is_none() && !self.killed && self.cursor_stream.is_none();
        if reusable && self.may_skip_reset() {
            // What a reset would clear the next taker restores if it
            // differs (the state tag): no round trip here.
            self.give_back_all(true).await;
            return;
        }
        let key = self.conn_key();
        let timeout = self.shared.connect_timeout();
        let routing = self.shared.routing;
        for shard in 0..self.backends.len() {
            let Some((mut conn, lease)) = self.backends.take(shard) else {
                continue;
            };
            let pool = self.shared.pools.get(shard).cloned();
            // Only shard 0 follows the session's schema without routing.
            let db_known = shard == 0 || routing;
            let (Some(lease), Some(pool), true, true) = (
                lease,
                pool,
                reusable && db_known,
                conn.status & status::IN_TRANS == 0,
            ) else {
                quit(conn).await;
                continue;
            };
            let reset = async {
                if conn.detached() > 0 {
                    conn.drain().await?;
                }
                conn.run(&[cmd::RESET_CONNECTION], Expect::Single).await
            };
            let ok = matches!(tokio::time::timeout(timeout, reset).await, Ok(Ok(_)))
                && conn.status & status::IN_TRANS == 0;
            if !ok {
                drop(lease);
                quit(conn).await;
                continue;
            }
            debug!(conn = self.id, shard = %pool.shard, backend_conn = conn.connection_id, "shard connection reset and given back to the pool");
            if let Some(c) = pool.give_back(Idle {
                key,
                home: conn.conn.home(),
                conn,
                db: self.schema_shared(),
                tag: 0,
                lid: Some(0),
                owner: 0,
                stmts: Vec::new(),
                lease,
                since: Instant::now(),
                serial: 0,
            }) {
                quit(c).await;
            }
        }
    }
}

/// What an idle connection turned out to be.
enum Ready {
    /// Not boxed: `Checked` holds its connection boxed (a box here cost a
    /// malloc and a free at every statement of a multiplexed session).
    Conn(Checked),
    Stale,
    Reopen(ShardLease),
}

/// The pools' upkeep, once a second, for the server's life.
pub async fn maintain(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (shard, pool) in shared.pools.iter().enumerate() {
            for c in pool.expire(Instant::now()) {
                quit(c).await;
            }
            if pool.settings.min_idle > 0 {
                fill_min_idle(&shared, shard, pool).await;
            }
        }
    }
}

/// Opens idle connections of the last key used on `shard` up to
/// `pool_min_idle` (while places are free and nobody waits).
async fn fill_min_idle(shared: &Shared, shard: usize, pool: &Arc<ShardPool>) {
    let Some(key) = pool.last_key() else {
        return;
    };
    let s = &shared.config.shards[shard];
    while pool.idle_of(&key) < pool.settings.min_idle {
        let Some(lease) = pool.spare_place() else {
            return;
        };
        let params = ConnectParams {
            shard: &s.name,
            address: &s.address,
            tls: &shared.shard_tls,
            public_key: s.public_key_pem.as_deref(),
            user: key.user,
            password: key.password,
            database: None,
            charset: key.charset,
            capabilities: key.capabilities,
            ext_capabilities: key.ext_capabilities,
            attrs: None,
            timeout: shared.connect_timeout(),
        };
        let Ok((conn, hs)) = BackendConn::connect(&params).await else {
            // The shard is down or refuses: try again next time.
            return;
        };
        shared.learn(&hs);
        pool.stats.created.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = pool.give_back(Idle {
            key,
            db: None,
            tag: 0,
            lid: Some(0),
            owner: 0,
            stmts: Vec::new(),
            lease,
            since: Instant::now(),
            serial: 0,
            home: conn.conn.home(),
            conn: Box::new(conn),
        }) {
            quit(c).await;
        }
    }
}
