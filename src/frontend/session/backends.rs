//! The session's shard connections: the one place handlers get a shard
//! connection from and give it back to.
//!
//! Today the provider keeps at most one connection per shard for the
//! session's life (opened by `Session::backend` the first time a command
//! needs that shard). Handlers never index a connection vector: they ask
//! for an open connection ([`Backends::get_mut`]), give a fresh one
//! ([`Backends::put`]) and hand back one that must not be used again
//! ([`Backends::release`]: broken, killed, or closed with the session).
//! Each connection comes with its place in the shard's pool (a
//! [`ShardLease`], `backend::pool`): released, the connection is closed
//! and its place freed; at the session's end [`Backends::take`] hands
//! connection and lease back for the pool (`pooled.rs`).

use crate::backend::pool::ShardLease;
use crate::backend::BackendConn;
use std::time::{Duration, Instant};

/// One session's shard connections.
#[derive(Debug)]
pub struct Backends {
    /// Boxed: a connection moves between a session and its pool at every
    /// multiplexed statement, and the box moves as a pointer (a
    /// `BackendConn` is about 270 bytes, an idle entry 440).
    conns: Vec<Option<Box<BackendConn>>>,
    /// Each open connection's place in its shard's pool.
    leases: Vec<Option<ShardLease>>,
    /// When each shard's connection was last handed out.
    last_used: Vec<Instant>,
    /// The session ended between commands: no reply is in flight on its
    /// connections (they may be reset and reused).
    at_rest: bool,
}

impl Backends {
    /// No connection yet to any of `shards` shards.
    pub fn new(shards: usize) -> Backends {
        Backends {
            conns: (0..shards).map(|_| None).collect(),
            leases: (0..shards).map(|_| None).collect(),
            last_used: vec![Instant::now(); shards],
            at_rest: false,
        }
    }

    /// How many shards there are (open or not).
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether there are no shards.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Whether the session has a connection to `shard`.
    pub fn is_open(&self, shard: usize) -> bool {
        self.conns.get(shard).is_some_and(Option::is_some)
    }

    /// The session's open connection to `shard`, if any (never opens one).
    pub fn get(&self, shard: usize) -> Option<&BackendConn> {
        self.conns.get(shard).and_then(Option::as_deref)
    }

    /// [`Backends::get`], to use.
    pub fn get_mut(&mut self, shard: usize) -> Option<&mut BackendConn> {
        self.conns.get_mut(shard).and_then(Option::as_deref_mut)
    }

    /// Gives the provider a connection to `shard`, with its place in the
    /// shard's pool.
    pub fn put(&mut self, shard: usize, conn: Box<BackendConn>, lease: Option<ShardLease>) {
        if let (Some(c), Some(l)) = (self.conns.get_mut(shard), self.leases.get_mut(shard)) {
            *c = Some(conn);
            *l = lease;
        }
    }

    /// Takes the connection to `shard` out of use (broken, killed, or being
    /// closed): its place in the pool is freed, and the next command that
    /// needs the shard takes another.
    pub fn release(&mut self, shard: usize) -> Option<Box<BackendConn>> {
        if let Some(l) = self.leases.get_mut(shard) {
            *l = None;
        }
        self.conns.get_mut(shard).and_then(Option::take)
    }

    /// Takes the connection to `shard` and its lease (to give both back to
    /// the pool).
    pub fn take(&mut self, shard: usize) -> Option<(Box<BackendConn>, Option<ShardLease>)> {
        let conn = self.conns.get_mut(shard).and_then(Option::take)?;
        let lease = self.leases.get_mut(shard).and_then(Option::take);
        Some((conn, lease))
    }

    /// Records that the session ends between commands.
    pub fn set_at_rest(&mut self) {
        self.at_rest = true;
    }

    /// Whether the session ended between commands.
    pub fn at_rest(&self) -> bool {
        self.at_rest
    }

    /// The open connections, with their shard.
    pub fn open(&self) -> impl Iterator<Item = (usize, &BackendConn)> {
        self.conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_deref().map(|c| (i, c)))
    }

    /// The open connections.
    pub fn conns(&self) -> impl Iterator<Item = &BackendConn> {
        self.conns.iter().flatten().map(|c| &**c)
    }

    /// The open connections, to change.
    pub fn conns_mut(&mut self) -> impl Iterator<Item = &mut BackendConn> {
        self.conns.iter_mut().flatten().map(|c| &mut **c)
    }

    /// Marks `shard`'s connection used at `now` (the command's start);
    /// returns whether it had been idle for longer than `idle` before.
    pub fn touch(&mut self, shard: usize, idle: Duration, now: Instant) -> bool {
        match self.last_used.get_mut(shard) {
            Some(t) => {
                let was_idle = now.saturating_duration_since(*t) > idle;
                *t = now;
                was_idle
            }
            None => false,
        }
    }
}

/// A connection handed to a session, with what its last user left on it.
pub(in crate::frontend) struct Checked {
    pub(in crate::frontend) conn: Box<BackendConn>,
    pub(in crate::frontend) lease: ShardLease,
    /// Its session state tag (`Idle::tag`; 0: as after a login or reset).
    pub(in crate::frontend) tag: u64,
    /// Its `LAST_INSERT_ID()`, when known.
    pub(in crate::frontend) lid: Option<u64>,
    /// The session that gave it back as it was (`Idle::owner`).
    pub(in crate::frontend) owner: u32,
    /// Statement ids left open on it by `owner`.
    pub(in crate::frontend) stmts: Vec<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_connection_until_one_is_put() {
        let mut b = Backends::new(3);
        assert_eq!(b.len(), 3);
        assert!(!b.is_open(1) && b.get(1).is_none() && b.get_mut(7).is_none());
        assert!(b.release(1).is_none() && b.release(9).is_none());
        assert_eq!(b.open().count(), 0);
        // A fresh provider's connections are not idle for a long bound.
        assert!(!b.touch(0, Duration::from_secs(3600), Instant::now()));
        assert!(!b.touch(9, Duration::ZERO, Instant::now()));
    }
}
