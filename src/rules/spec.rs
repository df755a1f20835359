//! The rule-file schema: what a DBA writes in `rules/*.toml`.
//!
//! These types are the contract of the rule files (see the README). They only
//! describe and check *one* entry; cross-entry checks (unknown generator, two
//! rules for one column) and file:line reporting live in the loader.

use serde::Deserialize;

/// One `rules/*.toml` file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    /// `[[generator]]` entries: id sources.
    #[serde(default)]
    pub generator: Vec<GeneratorRule>,
    /// `[[table]]` entries: which column of which table gets ids.
    #[serde(default)]
    pub table: Vec<TableRule>,
}

/// Which algorithm a generator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GeneratorKind {
    /// Dense increasing integers served from segments reserved in the store.
    Sequence,
    /// k-sorted 64-bit ids: timestamp | node | sequence.
    Snowflake,
}

/// Unit of a snowflake timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Milliseconds (the default, as in Twitter's layout).
    #[default]
    Ms,
    /// Seconds (longer lifetime for narrow timestamp fields, e.g. 53-bit ids).
    S,
}

/// A `[[generator]]` entry. Fields that do not apply to `kind` must be absent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorRule {
    /// Unique name; `[[table]] generator` refers to it, and it names the
    /// generator's keys in the store.
    pub name: String,
    /// `sequence` or `snowflake`.
    pub kind: GeneratorKind,

    // ---- sequence ----
    /// Ids reserved per store round trip at start (the adaptive batch starts here).
    pub batch: Option<u64>,
    /// Lower bound of the adaptive batch (default: 1/10 of `batch`, at least 1).
    pub min_batch: Option<u64>,
    /// Upper bound of the adaptive batch (default: 1000 x `batch`).
    pub max_batch: Option<u64>,
    /// Seconds one segment should last at the measured rate (default 60).
    pub segment_seconds: Option<u64>,
    /// Fraction of a segment left when the next one is reserved (default 0.5).
    pub refill_at: Option<f64>,
    /// First id a fresh generator issues (default 1).
    pub start: Option<u64>,
    /// Largest id that may be issued; exhaustion is an error naming the generator.
    pub max: Option<u64>,
    /// Step between ids (default 1), like `auto_increment_increment`.
    pub increment: Option<u64>,
    /// Ids written as decimal fields, e.g. `"{prefix:2}{yyyyMMdd}{seq:8}"`
    /// (`crate::idgen` `format.rs`); with a date the counter restarts daily.
    pub format: Option<String>,
    /// The value of `{prefix:W}`.
    pub prefix: Option<u64>,
    /// Timezone of the date fields: `"UTC"` (default) or a fixed offset
    /// like `"+08:00"`.
    pub timezone: Option<String>,
    /// Non-enumerable ids: issue a keyed permutation of the sequence
    /// (`crate::idgen` `scramble.rs`) instead of the sequence itself.
    pub scramble: Option<bool>,
    /// File holding the scramble key (at least 16 bytes; a trailing newline
    /// is ignored). Relative paths are relative to idgate's working directory.
    pub scramble_key_file: Option<String>,
    /// Environment variable holding the scramble key (at least 16 bytes).
    pub scramble_key_env: Option<String>,
    /// Width of scrambled ids: 63 (default, positive BIGINT) or 53 (exact
    /// in JavaScript).
    pub bits: Option<u32>,

    // ---- snowflake ----
    /// Named layout: `"twitter"` (41/10/12, ms) or `"js53"` (53 bits, exact in
    /// JavaScript). Explicit bit widths override the preset's.
    pub preset: Option<String>,
    /// RFC 3339 instant that timestamp 0 stands for.
    pub epoch: Option<String>,
    /// `ms` (default) or `s`.
    pub time_unit: Option<TimeUnit>,
    /// Width of the timestamp field.
    pub timestamp_bits: Option<u32>,
    /// Width of the node-id field (node ids are leased from the store).
    pub node_bits: Option<u32>,
    /// Width of the per-tick sequence field.
    pub sequence_bits: Option<u32>,
    /// Milliseconds the persisted timestamp runs ahead of issued ones (default 3000).
    pub lead_ms: Option<u64>,
    /// How far (ms) this node's clock may be behind the cluster's
    /// high-water (the newest clock reading any node persisted) before it
    /// issues from the high-water as a logical clock instead (default 1000).
    pub max_clock_skew_ms: Option<u64>,
}

impl GeneratorRule {
    /// A rule with only a name and a kind; every option at its default.
    pub fn new(name: &str, kind: GeneratorKind) -> GeneratorRule {
        GeneratorRule {
            name: name.to_string(),
            kind,
            batch: None,
            min_batch: None,
            max_batch: None,
            segment_seconds: None,
            refill_at: None,
            start: None,
            max: None,
            increment: None,
            format: None,
            prefix: None,
            timezone: None,
            scramble: None,
            scramble_key_file: None,
            scramble_key_env: None,
            bits: None,
            preset: None,
            epoch: None,
            time_unit: None,
            timestamp_bits: None,
            node_bits: None,
            sequence_bits: None,
            lead_ms: None,
            max_clock_skew_ms: None,
        }
    }
}

/// A `[[table]]` entry: fill `column` of table `name` from `generator`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableRule {
    /// `schema.table`, or a bare `table` that matches it in any schema.
    pub name: String,
    /// The column idgate fills.
    pub column: String,
    /// Name of a `[[generator]]` (in any rule file of the directory).
    pub generator: String,
    /// Column whose value picks the shard; absent (and not broadcast): the
    /// table lives on the default shard (the config's first `[[shards]]`).
    pub shard_key: Option<String>,
    /// How `shard_key` maps to a shard (`mod`, `hash`, `range`); required
    /// with `shard_key`, refused without it.
    pub sharding: Option<String>,
    /// `sharding = "hash"` only: what is hashed. `"collation"` (the
    /// default): the key as the column's collation compares it, so keys
    /// MariaDB finds equal (`'Bob'`, `'bob '`) are on one shard; `"bytes"`:
    /// the key's bytes as written (idgate before collation-aware placement;
    /// for tables already placed that way).
    pub hash: Option<String>,
    /// Small reference table: every write goes to every shard of `shards`,
    /// reads to the first of them. No `shard_key`/`sharding`/`ranges`.
    pub broadcast: Option<bool>,
    /// `mod`/`hash`/broadcast tables: the config shard names the table is
    /// spread over, in this order (the order fixes which shard `key % n`
    /// picks). Default: every `[[shards]]` entry, in config order.
    pub shards: Option<Vec<String>>,
    /// `range` tables: contiguous intervals of the key, in ascending order,
    /// each mapped to a shard name.
    pub ranges: Option<Vec<RangeRule>>,
}

/// One entry of `[[table]] ranges`: keys `from <= k < to` live on `shard`.
/// The first entry has no `from` (it starts at the smallest key), the last no
/// `to` (it runs to the largest), and every other `from` is the previous `to`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeRule {
    /// Inclusive lower bound; absent only on the first entry.
    pub from: Option<i64>,
    /// Exclusive upper bound; absent only on the last entry.
    pub to: Option<i64>,
    /// A `[[shards]]` name of the config.
    pub shard: String,
}
