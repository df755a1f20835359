//! Column rules: which table columns get ids from which generator.
//!
//! Files:
//! - `spec.rs`: the schema of one rule file (`[[generator]]`, `[[table]]`).
//! - `load.rs`: loading a directory, whole-set validation, `rules check`.
//! - `bundle.rs`: [`bundle::Bundle`], a published rules version (the
//!   files as text, who, when, what changed), as stored in etcd.
//! - `ruleset.rs`: [`RuleSet`], the validated rules indexed for lookups
//!   (matching rules: see its module doc).
//! - `sharding.rs`: the sharding keys of a table rule: checks (unknown
//!   shard, range gaps...) and the placement they build.
//! - `diff.rs`: [`diff::diff`], what a reload changes and whether it may
//!   change while idgate runs.
//! - `names.rs`: which identifiers rule files may use.
//! - `views.rs`: views over rule tables ([`views::ViewGuards`]: the
//!   updatable ones through which an id could be written past idgate).
//! - `error.rs`: [`RulesError`], every problem as `file:line: reason`.

pub mod bundle;
pub mod diff;
pub mod error;
pub mod load;
pub mod names;
pub mod ruleset;
mod sharding;
pub mod spec;
pub mod views;

pub use error::{Problem, RulesError};
pub use load::{check_dir, read_files, GeneratorCheck};
pub use ruleset::{Origin, RuleSet, TableEntry};
pub use spec::{GeneratorKind, GeneratorRule, RangeRule, RuleFile, TableRule, TimeUnit};
