//! What a session keeps of its sequence calls (`admin::sequence`): the
//! value `LASTVAL` answers per generator, and a prepared statement's calls.
//! In the core because the session's state and its prepared statements
//! hold them.

use crate::sql::statement::sequence::Sequences;
use std::collections::HashMap;

/// The last id `NEXTVAL` gave this session, per generator: what `LASTVAL`
/// answers (NULL before any, as MariaDB). Cleared by COM_RESET_CONNECTION
/// and COM_CHANGE_USER.
#[derive(Debug, Default)]
pub struct LastValues(HashMap<String, u64>);

impl LastValues {
    /// Forgets every value.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Records the value `NEXTVAL` just gave for `generator`.
    pub fn set(&mut self, generator: String, id: u64) {
        self.0.insert(generator, id);
    }

    /// What `LASTVAL` answers for `generator` (`None`: NULL).
    pub fn get(&self, generator: &str) -> Option<u64> {
        self.0.get(generator).copied()
    }
}

/// A prepared statement's calls, kept to take fresh values at each execute.
#[derive(Debug)]
pub struct SeqStmt {
    /// The client's statement text.
    pub sql: String,
    /// Its calls and shape.
    pub found: Sequences,
}
