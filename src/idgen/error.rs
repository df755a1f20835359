//! Errors of the id allocator and of its stores.
//!
//! `StoreError` says what went wrong talking to a store; `IdgenError` is what the
//! rest of idgate sees, and its Display always names the generator involved so
//! a client error or a log line points at the right rule.

use std::time::Duration;

/// A failure of a persistent store (etcd, state file, in-memory test store).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or refused the call (connection, transport).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A call did not finish in time; its effect is unknown (it may have been applied).
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// A stored value that is not what idgate writes (hand-edited, corrupt).
    #[error("corrupt value at {key}: {detail}")]
    Corrupt {
        /// The key (etcd) or `file:line` (state file) holding the value.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// Local I/O on the state file failed.
    #[error("state file {path}: {detail}")]
    Io {
        /// The file involved.
        path: String,
        /// The operating system's message.
        detail: String,
    },
    /// Another process holds the state file's lock.
    #[error("state file {0} is locked by another process (one state file per idgate process)")]
    Locked(String),
    /// Every node id of a snowflake generator is leased by a live process.
    #[error("all {0} node ids are leased by live processes")]
    NodesExhausted(u64),
    /// A fault injected by a test through the in-memory store.
    #[error("injected fault")]
    Injected,
}

/// An error of the id allocator as seen by the rest of idgate.
#[derive(Debug, Clone, thiserror::Error)]
pub enum IdgenError {
    /// The cache is empty and the store cannot hand out a new segment or
    /// timestamp ceiling right now. Recovers by itself when the store is back.
    #[error("generator {generator}: store unavailable, no cached ids left ({source})")]
    Unavailable {
        /// The generator asked for ids.
        generator: String,
        /// The store failure that made it give up.
        source: StoreError,
    },
    /// The generator has issued everything up to its `max` (or the end of its
    /// timestamp field, for snowflakes).
    #[error("generator {generator}: exhausted at max {max}")]
    Exhausted {
        /// The generator asked for ids.
        generator: String,
        /// The largest id (sequence) or timestamp tick (snowflake) it may issue.
        max: u64,
    },
    /// A store call failed in an operation that does not serve from the cache
    /// (`set_floor`, `reserve`, opening).
    #[error("generator {generator}: store error: {source}")]
    Store {
        /// The generator involved.
        generator: String,
        /// What the store said.
        source: StoreError,
    },
    /// A snowflake generator has no valid node-id lease, so it issues nothing
    /// until it has leased one again.
    #[error("generator {generator}: no valid node id lease ({detail}); not issuing until one is leased again")]
    NoNode {
        /// The generator involved.
        generator: String,
        /// Why (lost lease, all node ids taken, store down).
        detail: String,
    },
    /// The rule is invalid (see [`crate::idgen::validate`]).
    #[error("generator {generator}: invalid rule: {reason}")]
    Invalid {
        /// The generator involved.
        generator: String,
        /// The reason, as `validate` returns it.
        reason: String,
    },
    /// Two `[[generator]]` entries share one name.
    #[error("generator {0}: defined twice")]
    Duplicate(String),
    /// The operation does not exist for this kind of generator.
    #[error("generator {generator}: {op} is not supported by {kind} generators")]
    Unsupported {
        /// The generator involved.
        generator: String,
        /// The operation asked for.
        op: &'static str,
        /// `sequence` or `snowflake`.
        kind: &'static str,
    },
    /// A request that can never be served, e.g. `next(n)` whose ids overflow u64.
    #[error("generator {generator}: {detail}")]
    BadRequest {
        /// The generator involved.
        generator: String,
        /// What is wrong with the request.
        detail: String,
    },
    /// The wall clock is before the generator's epoch.
    #[error("generator {generator}: the clock is before the epoch ({detail})")]
    ClockBeforeEpoch {
        /// The generator involved.
        generator: String,
        /// The clock reading and the epoch.
        detail: String,
    },
    /// The store could not be opened at all.
    #[error("allocator store: {0}")]
    Open(StoreError),
    /// An explicit id may lie in ids another live idgate process holds in
    /// its cache, and that process could not be made to skip it in time
    /// (it did not acknowledge, or the store is unreachable): the id is not
    /// known to be safe, so the statement that wrote it is refused.
    #[error("generator {generator}: explicit id {id} could not be confirmed as never issued by another idgate process ({detail})")]
    Unconfirmed {
        /// The generator involved.
        generator: String,
        /// The explicit id.
        id: u64,
        /// What was missing (a process that did not acknowledge, a store error).
        detail: String,
    },
    /// `shutdown` was called.
    #[error("generator {0}: the allocator is shut down")]
    Shutdown(String),
}
