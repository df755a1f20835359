//! Session state that must survive a reopened shard connection.
//!
//! When a shard connection is reopened (the shard closed it while idle, or
//! it broke outside a transaction), the new connection starts with the
//! server's defaults. The session's `SET` statements (sql_mode, names, time
//! zone, user variables, isolation level...) are recorded as the client sent
//! them and replayed, in order, on the new connection before anything else.
//! State idgate cannot replay (a `SET` inside a multi-statement query, more
//! than [`MAX_RECORDED`] statements) makes a reopen fail instead, so the
//! client never continues silently with different session settings.

use crate::sql::statement::keyword::{executed, session_set};
use crate::sql::statement::{first_keyword, keyword_start};

/// Most `SET` statements kept for replay.
pub const MAX_RECORDED: usize = 64;

/// What a session changed that a new shard connection must be told.
#[derive(Debug, Default)]
pub struct SessionState {
    /// COM_QUERY payloads (command byte included) of successful `SET`s, in order.
    sets: Vec<Vec<u8>>,
    /// Some state could not be recorded: a reopen cannot restore it.
    lost: bool,
    /// A fingerprint of `sets` and `lost` (`mux.rs`), kept up to date.
    tag: u64,
}

impl SessionState {
    /// Records a COM_QUERY that succeeded, if it changes session state.
    pub fn record(&mut self, payload: &[u8]) {
        // As MariaDB runs it: mysqldump's `/*!40101 SET ... */` is a `SET`.
        let raw = payload.get(1..).unwrap_or_default();
        if !session_set(raw) {
            return;
        }
        let sql = executed(raw);
        if !changes_session(&sql) {
            return;
        }
        if memchr::memchr(b';', &sql)
            .is_some_and(|i| sql[i + 1..].iter().any(|b| !b.is_ascii_whitespace()))
            || sets_one_shot(&sql)
        {
            self.lost = true;
            return;
        }
        if let Some(i) = self.sets.iter().position(|p| p == payload) {
            self.sets.remove(i);
        }
        if self.sets.len() >= MAX_RECORDED {
            self.lost = true;
            return;
        }
        self.sets.push(payload.to_vec());
        self.tag = fingerprint(&self.sets);
    }

    /// The session state tag of a connection that has these `SET`s (0:
    /// none, as after a login or COM_RESET_CONNECTION; `u64::MAX`: lost,
    /// never equal to a connection's).
    pub fn tag(&self) -> u64 {
        if self.lost {
            u64::MAX
        } else {
            self.tag
        }
    }

    /// The statements to replay on a new connection, or `None` when the
    /// session's state cannot be restored.
    pub fn replay(&self) -> Option<&[Vec<u8>]> {
        (!self.lost).then_some(&self.sets[..])
    }

    /// Session state was changed in a way idgate cannot replay (a `SET`
    /// among several statements of one query).
    pub fn lose(&mut self) {
        self.lost = true;
    }

    /// Forgets everything (COM_RESET_CONNECTION, COM_CHANGE_USER).
    pub fn clear(&mut self) {
        self.sets.clear();
        self.lost = false;
        self.tag = 0;
    }
}

/// Whether a `SET` assigns a variable that the next statement consumes
/// (`INSERT_ID`, `RAND_SEED1`, `RAND_SEED2`: what mysqlbinlog writes
/// before a statement). Replayed on another connection, it would apply a
/// second time: an `INSERT_ID` used twice is a duplicate key. The word
/// anywhere, also in a string: a pinned session at worst.
fn sets_one_shot(sql: &[u8]) -> bool {
    let ident = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
    let word_at = |i: usize, w: &[u8]| {
        sql.get(i..i + w.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(w))
            && !ident(i.checked_sub(1).and_then(|p| sql.get(p)))
    };
    memchr::memchr2_iter(b'i', b'I', sql)
        .any(|i| word_at(i, b"insert_id") && !ident(sql.get(i + 9)))
        || memchr::memchr2_iter(b'r', b'R', sql).any(|i| word_at(i, b"rand_seed"))
}

/// A fingerprint of `SET`s in order: 0 for none, never `u64::MAX`.
fn fingerprint(sets: &[Vec<u8>]) -> u64 {
    use std::hash::{Hash, Hasher};
    if sets.is_empty() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    sets.hash(&mut h);
    h.finish().clamp(1, u64::MAX - 1)
}

/// Whether a prepared statement's text is a `SET` of session state. One
/// the client runs as a server-side prepared statement has its values
/// outside the text, so it cannot be replayed: the state counts as lost
/// ([`SessionState::lose`]; a reopen fails, the session keeps its
/// connection and it is reset before another session gets it).
pub(in crate::frontend) fn changes_session_state(sql: &[u8]) -> bool {
    &first_keyword(sql)[..4] == b"SET\0" && changes_session(sql)
}

/// Whether a `SET` statement changes this session (not `SET GLOBAL`, `SET
/// PASSWORD`, or `SET TRANSACTION` for the next transaction only).
fn changes_session(sql: &[u8]) -> bool {
    let sql = &*crate::sql::statement::keyword::code(sql);
    let text = String::from_utf8_lossy(&sql[keyword_start(sql)..]);
    let mut words = text.split_ascii_whitespace().skip(1);
    let Some(second) = words.next() else {
        return false;
    };
    let second = second.to_ascii_uppercase();
    !(second == "GLOBAL"
        || second.starts_with("@@GLOBAL.")
        || second == "PASSWORD"
        || second == "TRANSACTION"
        || second == "STATEMENT")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Vec<u8> {
        [&[3u8][..], s.as_bytes()].concat()
    }

    #[test]
    fn records_session_sets_in_order_once_each() {
        let mut st = SessionState::default();
        st.record(&q("SET NAMES utf8mb4"));
        st.record(&q("set @a = 1"));
        st.record(&q("SET GLOBAL max_connections = 10"));
        st.record(&q("/* c */ SET GLOBAL max_connections = 10"));
        st.record(&q("SET /* c */ GLOBAL max_connections = 10"));
        st.record(&q("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"));
        st.record(&q("SELECT 1"));
        st.record(&q("SET NAMES utf8mb4"));
        let r = st.replay().unwrap();
        assert_eq!(r, &[q("set @a = 1"), q("SET NAMES utf8mb4")]);
        st.record(&q("SET @b = 2; SELECT 1"));
        assert!(st.replay().is_none());
        // Consumed by the next statement: never replayed.
        for one_shot in [
            "SET INSERT_ID = 100",
            "SET @@session.insert_id=5",
            "/*!*/ SET @@RAND_SEED1=1, @@RAND_SEED2=2",
        ] {
            let mut st = SessionState::default();
            st.record(&q(one_shot));
            assert!(st.replay().is_none(), "{one_shot}");
        }
        for kept in ["SET LAST_INSERT_ID = 7", "SET @my_insert_id = 1"] {
            let mut st = SessionState::default();
            st.record(&q(kept));
            assert_eq!(st.replay().map(<[_]>::len), Some(1), "{kept}");
        }
        st.clear();
        assert_eq!(st.replay().map(<[_]>::len), Some(0));
    }

    #[test]
    fn too_many_statements_mark_the_state_lost() {
        let mut st = SessionState::default();
        for i in 0..=MAX_RECORDED {
            st.record(&q(&format!("SET @v{i} = {i}")));
        }
        assert!(st.replay().is_none());
    }
}
