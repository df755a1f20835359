//! What the mover (`idgate reshard`) and the running idgates share through
//! the store: the job document, the pause document and the members that
//! acknowledge it. Pure: types, keys, encoding. Both sides build on it.
//!
//! Store layout (keys relative to `[allocator] etcd_prefix`):
//! - `reshard/job/<schema>.<table>`: the [`Job`] of a move, written by the
//!   mover only (its checkpoint: a mover killed at any phase resumes from
//!   it), read by `SHOW IDGATE RESHARD` and the metrics of every idgate.
//! - `reshard/pause` (a counter, the pause *epoch*) and
//!   `reshard/pause/doc` (the [`Pause`] of that epoch): written together
//!   with `Store::publish` by the mover; every idgate follows the counter.
//! - member scope [`MEMBERS`]: every idgate on an etcd store joins it at
//!   start; its member value is the highest pause epoch it has *acted on*
//!   (see [`Pause`]). The mover reads `Store::members(MEMBERS, PAUSE)` to
//!   know when every live idgate has acted on an epoch.
//!
//! The pause handshake:
//! 1. The mover publishes epoch `e` with `tables = [t]`, a `deadline_ms`.
//! 2. An idgate that sees `e`: holds every new statement that names `t`
//!    (they wait, they do not fail); waits for the statements on `t` already
//!    running to finish (a transaction that already used `t` is let run:
//!    it is on the old rules and `RENAME`'s metadata lock waits for it on
//!    the shard); then sets its member value to `e`.
//! 3. The mover, once every member has value >= `e`, drains the change log,
//!    swaps the tables, publishes the new rules version `v`, then publishes
//!    epoch `e + 1` with `tables = []` and `resume_at_rules = Some(v)`.
//! 4. An idgate that sees `e + 1` applies rules version `v` (it follows the
//!    rules too; it waits for it), releases the held statements onto the new
//!    rules, and sets its member value to `e + 1`.
//!    A release without a rules version (`resume_at_rules = None`: the
//!    cutover was given up before the swap) releases onto the old rules.
//! 5. Held statements past `deadline_ms` (wall clock, Unix ms) fail with
//!    error 1205 naming the table and the move instead of running on rules
//!    that may be stale; the mover gives up a cutover whose acks do not all
//!    arrive well before the deadline (it releases with `None` and retries).

use serde::{Deserialize, Serialize};

/// Member scope of the idgates that take part in pauses.
pub const MEMBERS: &str = "reshard";

/// The pause epoch counter.
pub const PAUSE: &str = "reshard/pause";

/// The document of the current pause epoch.
pub const PAUSE_DOC: &str = "reshard/pause/doc";

/// Prefix of every job document.
pub const JOB_PREFIX: &str = "reshard/job/";

/// Key of the job moving `table` (`schema.table`, as rules name it).
pub fn job_key(table: &str) -> String {
    format!("{JOB_PREFIX}{table}")
}

/// Name of the shadow table the rows are copied into on a target shard.
pub fn shadow_table(table: &str) -> String {
    format!("_idgate_new_{table}")
}

/// Name the old table is renamed to at the swap (dropped by cleanup).
pub fn old_table(table: &str) -> String {
    format!("_idgate_old_{table}")
}

/// Name of the change log table on a source shard.
pub fn log_table(table: &str) -> String {
    format!("_idgate_log_{table}")
}

/// Where a table's rows live: what its rule says about placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// Shard names, in the rule's order (one name: the table is not split).
    pub shards: Vec<String>,
    /// `mod`, `hash` or `range`; `None` on one shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<String>,
    /// The column rows are placed by; `None`: the id column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_key: Option<String>,
}

/// The phases of a move, in order. A job only moves forward, except to
/// `Aborted` (from any phase before `Cutover`'s swap) or `Failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Targets checked, shadow tables, triggers and logs being created.
    Plan,
    /// Rows copied by primary-key chunks.
    Copy,
    /// Logged changes re-copied until the log is nearly empty.
    CatchUp,
    /// Chunk checksums compared between the placements.
    Verify,
    /// The pause, the last changes, the swap, the new rules version.
    Cutover,
    /// The new placement serves; old tables, triggers and logs removed.
    Cleanup,
    /// Finished.
    Done,
    /// Given up by `--abort` before the swap; the old placement serves.
    Aborted,
    /// Stopped on an error it will not retry (named in `error`); resumable
    /// after the cause is fixed, or abortable.
    Failed,
}

impl Phase {
    /// Its name as shown (`catch_up`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Plan => "plan",
            Phase::Copy => "copy",
            Phase::CatchUp => "catch_up",
            Phase::Verify => "verify",
            Phase::Cutover => "cutover",
            Phase::Cleanup => "cleanup",
            Phase::Done => "done",
            Phase::Aborted => "aborted",
            Phase::Failed => "failed",
        }
    }
}

/// Copy progress of one source shard: the checkpoint a resumed mover
/// continues from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceProgress {
    /// The source shard's name.
    pub shard: String,
    /// The last primary key copied, as SQL literals (one per primary-key
    /// column, ready to splice into `WHERE (pk) > (...)`); empty: none yet.
    #[serde(default)]
    pub last_key: Vec<String>,
    /// The largest primary key when the copy of this shard began (SQL
    /// literals; empty: not read yet): the copy stops there, later rows are
    /// the catch-up's (the triggers logged them).
    #[serde(default)]
    pub end_key: Vec<String>,
    /// Rows copied from this shard.
    pub copied: u64,
    /// Whether every chunk of this shard has been copied.
    #[serde(default)]
    pub done: bool,
}

/// One move, as the mover records it after every step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// `schema.table`.
    pub table: String,
    /// Random, unique to this job: a second mover started on the same table
    /// tells its own job from another's.
    pub id: String,
    /// The placement before the move.
    pub from: Placement,
    /// The placement after it.
    pub to: Placement,
    /// Where it is.
    pub phase: Phase,
    /// Rules version in force when the move began.
    pub rules_version: u64,
    /// The rules version the cutover published, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_version: Option<u64>,
    /// Shards whose tables have been swapped (cutover is resumable midway).
    #[serde(default)]
    pub swapped: Vec<String>,
    /// Rows on the source when the copy began (an estimate for the ETA).
    pub rows_total: u64,
    /// Per source shard: the copy checkpoint.
    pub sources: Vec<SourceProgress>,
    /// Rows re-copied by the catch-up so far.
    #[serde(default)]
    pub caught_up: u64,
    /// Chunks verified so far, and their count.
    #[serde(default)]
    pub verified_chunks: u64,
    /// Rows per second of the copy, over the last progress interval.
    #[serde(default)]
    pub rate: u64,
    /// The throttle: rows per second at most.
    pub max_rows_per_second: u64,
    /// When the move began and when this document was written (Unix ms).
    pub started_ms: u64,
    /// See `started_ms`.
    pub updated_ms: u64,
    /// The reason of `Failed`, or the last error retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Job {
    /// Rows copied so far, over every source.
    pub fn copied(&self) -> u64 {
        self.sources.iter().map(|s| s.copied).sum()
    }

    /// Encoded for the store (TOML: readable with `etcdctl get`).
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        encode(self, "job", &self.table)
    }

    /// Decoded from the store; `key` names it in the error.
    pub fn decode(key: &str, bytes: &[u8]) -> Result<Job, String> {
        decode(key, bytes, "job")
    }
}

/// The document of one pause epoch (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pause {
    /// The epoch (the value of the [`PAUSE`] counter it was published with).
    pub epoch: u64,
    /// Tables whose statements are held (`schema.table`); empty: a release.
    #[serde(default)]
    pub tables: Vec<String>,
    /// The job that asked (its [`Job::id`]).
    pub job: String,
    /// Held statements fail after this time (Unix ms, wall clock).
    pub deadline_ms: u64,
    /// On a release: the rules version to apply before resuming.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_at_rules: Option<u64>,
}

impl Pause {
    /// Encoded for the store.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        encode(self, "pause", &self.epoch.to_string())
    }

    /// Decoded from the store; `key` names it in the error.
    pub fn decode(key: &str, bytes: &[u8]) -> Result<Pause, String> {
        decode(key, bytes, "pause")
    }
}

/// A document as TOML bytes; `what` and `name` say which in the error.
fn encode<T: Serialize>(doc: &T, what: &str, name: &str) -> Result<Vec<u8>, String> {
    toml::to_string(doc)
        .map(String::into_bytes)
        .map_err(|e| format!("cannot serialize reshard {what} {name}: {e}"))
}

/// A document from TOML bytes read at `key`.
fn decode<T: serde::de::DeserializeOwned>(
    key: &str,
    bytes: &[u8],
    what: &str,
) -> Result<T, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{key}: not UTF-8"))?;
    toml::from_str(text).map_err(|e| format!("{key}: not a reshard {what}: {}", e.message()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        Job {
            table: "shop.orders".into(),
            id: "j1".into(),
            from: Placement {
                shards: vec!["s0".into(), "s1".into()],
                sharding: Some("mod".into()),
                shard_key: None,
            },
            to: Placement {
                shards: vec!["s0".into(), "s1".into(), "s2".into()],
                sharding: Some("mod".into()),
                shard_key: None,
            },
            phase: Phase::CatchUp,
            rules_version: 3,
            published_version: None,
            swapped: vec![],
            rows_total: 1000,
            sources: vec![SourceProgress {
                shard: "s0".into(),
                last_key: vec!["41".into()],
                end_key: vec!["90".into()],
                copied: 21,
                done: false,
            }],
            caught_up: 2,
            verified_chunks: 0,
            rate: 10,
            max_rows_per_second: 5000,
            started_ms: 1,
            updated_ms: 2,
            error: None,
        }
    }

    #[test]
    fn job_and_pause_round_trip() {
        let j = job();
        assert_eq!(Job::decode("k", &j.encode().unwrap()).unwrap(), j);
        assert_eq!(j.copied(), 21);
        let p = Pause {
            epoch: 7,
            tables: vec!["shop.orders".into()],
            job: "j1".into(),
            deadline_ms: 99,
            resume_at_rules: Some(4),
        };
        assert_eq!(Pause::decode("k", &p.encode().unwrap()).unwrap(), p);
        let err = Pause::decode("reshard/pause/doc", b"epoch = 'x'").unwrap_err();
        assert!(
            err.starts_with("reshard/pause/doc: not a reshard pause"),
            "{err}"
        );
    }

    #[test]
    fn phases_are_ordered() {
        assert!(Phase::Plan < Phase::Copy && Phase::Verify < Phase::Cutover);
        assert_eq!(Phase::CatchUp.name(), "catch_up");
        assert_eq!(job_key("shop.orders"), "reshard/job/shop.orders");
    }
}
