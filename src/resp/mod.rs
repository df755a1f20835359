//! The Redis-protocol id service (`server.resp_listen`), as Youzan's March
//! has one: `INCR orders` returns the next id of generator `orders`, from
//! the same allocator that fills INSERTs, so ids from both never collide.
//!
//! # Files
//!
//! - `frame.rs`: one command out of the bytes read (RESP arrays, inline
//!   lines), bounded: no allocation by a declared length.
//! - `reply.rs`: reply encoding, RESP2 and RESP3.
//! - `command.rs`: arguments to a [`command::Command`] (arity, counts).
//! - `session.rs`: one connection: authentication, grants, applying commands,
//!   pipelining (every complete command read is answered in one write).
//! - `server.rs`: the accept loop, connection limit and graceful shutdown.
//!
//! Depends on `config` (users, grants), `idgen` and `throttle` (the delay
//! after failed logins, shared with the MySQL listener) only; nothing here
//! knows about MySQL.
//!
//! # Commands
//!
//! `INCR gen`, `INCRBY gen n` (sequences: `n` consecutive ids reserved, the
//! last returned), `GET gen` (the next id at best, nothing reserved),
//! `IDGATE.NEXT gen [n]` (an array of `n` ids, any generator), `AUTH`,
//! `HELLO`, `PING`, `ECHO`, `QUIT`, `SELECT 0`, `CLIENT
//! SETNAME|GETNAME|ID|SETINFO`, `COMMAND` (empty), `CONFIG GET` (`save`,
//! `appendonly`: what redis-benchmark asks). Anything else is an `ERR
//! unknown command` reply; the connection stays usable.

pub mod command;
pub mod frame;
pub mod reply;
pub mod server;
mod session;

use std::sync::atomic::AtomicU64;

use crate::config::{Config, UserConfig};
use crate::idgen::Allocator;
use crate::throttle::LoginThrottle;
use std::sync::Arc;

/// What every connection of the listener shares.
#[derive(Debug)]
pub struct Service {
    /// Where ids come from; `None` when idgate runs without rules (every
    /// generator is then unknown).
    allocator: Option<Allocator>,
    /// `[[users]]`: AUTH checks passwords and grants against them.
    users: Vec<UserConfig>,
    /// The user named `default`, which `AUTH password` logs in as; a
    /// connection starts logged in as it when its password is empty (as
    /// Redis's `nopass` default user).
    default_user: Option<usize>,
    /// Source of `CLIENT ID`.
    next_client_id: AtomicU64,
    /// Connections at once; one more gets an error and is closed.
    max_connections: usize,
    /// How long connections may take to finish after shutdown starts.
    drain: std::time::Duration,
    /// Failed logins per address (shared with the MySQL listener): AUTH
    /// from an address with repeated failures waits first.
    throttle: Arc<LoginThrottle>,
}

impl Service {
    /// The service for `cfg`'s users and limits, taking ids from
    /// `allocator`, delaying logins by `throttle`.
    pub fn new(
        cfg: &Config,
        allocator: Option<Allocator>,
        throttle: Arc<LoginThrottle>,
    ) -> Service {
        let users = cfg.users.clone();
        let default_user = users.iter().position(|u| u.name == "default");
        Service {
            allocator,
            users,
            default_user,
            next_client_id: AtomicU64::new(1),
            max_connections: cfg.server.max_connections,
            drain: std::time::Duration::from_secs(cfg.server.drain_timeout_secs),
            throttle,
        }
    }
}
