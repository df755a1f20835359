//! What a rule reload changes, and whether it may change while idgate runs.
//!
//! [`diff`] compares the running [`RuleSet`] with a newly loaded one. Pure:
//! the checks that need the store (a table moved to another generator) are
//! the caller's ([`RuleDiff::moved`]).
//!
//! May change live: a table rule added or removed; a generator added; a
//! sequence's `batch`, `min_batch`, `max_batch`, `segment_seconds`, `max`;
//! a table's `column` and `generator` (a move, checked against the store).
//! Refused, each as `file:line: reason`: any other field of a generator
//! (`kind`, `start`, `increment`, a snowflake's layout, epoch, time unit,
//! ...); a table's `shard_key`, `sharding`, `hash`, `shards`, `ranges`,
//! `broadcast` (resharding); a change that would turn statement routing on
//! or off (the first sharded table, or the last one).

use super::error::{Problem, RulesError};
use super::ruleset::{Origin, RuleSet};
use super::spec::{GeneratorRule, TableRule};

/// The fields of a `[[generator]]` that may change while idgate runs.
pub const TUNABLE: [&str; 5] = ["batch", "min_batch", "max_batch", "segment_seconds", "max"];

/// What a reload changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleDiff {
    /// Generators only the new rules have.
    pub generators_added: Vec<String>,
    /// Generators whose tunable fields changed, with the fields.
    pub generators_tuned: Vec<(String, Vec<&'static str>)>,
    /// Generators only the old rules have (they keep running until idgate
    /// restarts: statements begun on the old rules may still use them).
    pub generators_removed: Vec<String>,
    /// Table rules only the new rules have.
    pub tables_added: Vec<String>,
    /// Table rules only the old rules have.
    pub tables_removed: Vec<String>,
    /// Table rules whose `column` or `generator` changed, with the fields.
    pub tables_changed: Vec<(String, Vec<&'static str>)>,
    /// Tables moved to another generator: (table, old, new). The new one
    /// must only issue ids above every id the old one issued.
    pub moved: Vec<(String, String, String)>,
    /// Tables a resharding cutover moved to another placement (see
    /// [`diff_resharded`]).
    pub resharded: Vec<String>,
}

/// The placement a resharding job (in phase cutover) moved a table to:
/// what the cutover's rules version may give that table, and nothing else.
/// Names as the job document has them (`reshard::protocol::Placement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resharded {
    /// `schema.table`, as the rule names it.
    pub table: String,
    /// Shard names, in the rule's order.
    pub shards: Vec<String>,
    /// `mod`, `hash`, `range`; `None` on one shard.
    pub sharding: Option<String>,
    /// The placing column; `None`: the id column (when sharded).
    pub shard_key: Option<String>,
    /// Every `[[shards]]` name in config order (a rule without `shards`
    /// is on all of them, an unsharded one on the first).
    pub config_shards: Vec<String>,
}

impl Resharded {
    /// Whether `rule` places its table exactly where the job moved it.
    fn matches(&self, rule: &TableRule) -> bool {
        if rule.name != self.table || rule.broadcast == Some(true) || rule.ranges.is_some() {
            return false;
        }
        let shards: Vec<String> = match (&rule.shards, &rule.shard_key) {
            (Some(s), _) => s.clone(),
            (None, Some(_)) => self.config_shards.clone(),
            (None, None) => self.config_shards.iter().take(1).cloned().collect(),
        };
        let key = match (&self.shard_key, &self.sharding) {
            (Some(k), _) => Some(k.clone()),
            (None, Some(_)) => Some(rule.column.clone()),
            (None, None) => None,
        };
        shards == self.shards && rule.sharding == self.sharding && rule.shard_key == key
    }
}

impl RuleDiff {
    /// Nothing changes.
    pub fn is_empty(&self) -> bool {
        *self == RuleDiff::default()
    }

    /// One line per change, for the log and the statement's result:
    /// `(what, name, detail)`.
    pub fn lines(&self) -> Vec<(&'static str, String, String)> {
        let mut out = Vec::new();
        for g in &self.generators_added {
            out.push(("generator added", g.clone(), String::new()));
        }
        for (g, f) in &self.generators_tuned {
            out.push(("generator changed", g.clone(), f.join(", ")));
        }
        for g in &self.generators_removed {
            out.push((
                "generator removed",
                g.clone(),
                "no rule uses it; it runs until idgate restarts".into(),
            ));
        }
        for t in &self.tables_added {
            out.push(("table added", t.clone(), String::new()));
        }
        for t in &self.tables_removed {
            out.push(("table removed", t.clone(), String::new()));
        }
        for t in &self.resharded {
            out.push((
                "table resharded",
                t.clone(),
                "placement changed by its resharding job's cutover".into(),
            ));
        }
        for (t, f) in &self.tables_changed {
            out.push(("table changed", t.clone(), f.join(", ")));
        }
        out
    }
}

/// Fields of `a` and `b` that differ, by name.
macro_rules! differing {
    ($a:expr, $b:expr, [$($field:ident),* $(,)?]) => {{
        let mut v: Vec<&'static str> = Vec::new();
        $(if $a.$field != $b.$field { v.push(stringify!($field)); })*
        v
    }};
}

fn generator_fields(a: &GeneratorRule, b: &GeneratorRule) -> Vec<&'static str> {
    differing!(
        a,
        b,
        [
            kind,
            batch,
            min_batch,
            max_batch,
            segment_seconds,
            refill_at,
            start,
            max,
            increment,
            format,
            prefix,
            timezone,
            scramble,
            scramble_key_file,
            scramble_key_env,
            bits,
            preset,
            epoch,
            time_unit,
            timestamp_bits,
            node_bits,
            sequence_bits,
            lead_ms,
            max_clock_skew_ms,
        ]
    )
}

fn table_fields(a: &TableRule, b: &TableRule) -> Vec<&'static str> {
    differing!(
        a,
        b,
        [column, generator, shard_key, sharding, hash, broadcast, shards, ranges]
    )
}

fn problem(origin: &Origin, reason: String) -> Problem {
    Problem {
        file: origin.file.clone(),
        line: Some(origin.line),
        reason,
    }
}

/// What going from `old` to `new` changes, or every change that may not
/// happen while idgate runs (as `file:line: reason` of the new rules).
pub fn diff(old: &RuleSet, new: &RuleSet) -> Result<RuleDiff, RulesError> {
    diff_resharded(old, new, None)
}

/// [`diff`], except that `resharded`'s table may change its placement
/// (`shards`, `sharding`, `hash`, `shard_key`) to exactly `resharded`'s:
/// the rules version a resharding job's cutover published. Any other
/// placement change, of that table or another, is refused as by [`diff`].
pub fn diff_resharded(
    old: &RuleSet,
    new: &RuleSet,
    resharded: Option<&Resharded>,
) -> Result<RuleDiff, RulesError> {
    let mut d = RuleDiff::default();
    let mut problems = Vec::new();
    for (g, origin) in new.generators().iter().zip(new.generator_origins()) {
        let Some(before) = old.generator(&g.name) else {
            d.generators_added.push(g.name.clone());
            continue;
        };
        let fields = generator_fields(before, g);
        let fixed: Vec<&str> = fields
            .iter()
            .copied()
            .filter(|f| !TUNABLE.contains(f))
            .collect();
        if !fixed.is_empty() {
            problems.push(problem(
                origin,
                format!(
                    "generator {:?}: {} cannot change while idgate runs (ids already issued depend on {}); only {} may. Give the new definition a new generator name, or restart idgate",
                    g.name,
                    fixed.join(", "),
                    if fixed.len() == 1 { "it" } else { "them" },
                    TUNABLE.join(", ")
                ),
            ));
        } else if !fields.is_empty() {
            d.generators_tuned.push((g.name.clone(), fields));
        }
    }
    for g in old.generators() {
        if new.generator(&g.name).is_none() {
            d.generators_removed.push(g.name.clone());
        }
    }
    for (t, e) in new.tables().iter().zip(new.entries()) {
        let Some(before) = old.tables().iter().find(|o| o.name == t.name) else {
            d.tables_added.push(t.name.clone());
            continue;
        };
        let fields = table_fields(before, t);
        let placement: Vec<&str> = fields
            .iter()
            .copied()
            .filter(|f| !matches!(*f, "column" | "generator"))
            .collect();
        let by_job = resharded.filter(|r| {
            r.matches(t)
                && placement
                    .iter()
                    .all(|f| matches!(*f, "shards" | "sharding" | "hash" | "shard_key"))
        });
        if !placement.is_empty() && by_job.is_some() {
            d.resharded.push(t.name.clone());
        } else if !placement.is_empty() {
            let job = match resharded {
                Some(r) if r.table == t.name => format!(
                    "; the resharding job this version names moved it to shards {:?} (sharding {:?}, shard_key {:?}), which this rule does not say",
                    r.shards, r.sharding, r.shard_key
                ),
                _ => String::new(),
            };
            problems.push(problem(
                e.origin(),
                format!(
                    "table {:?}: {} cannot change while idgate runs: rows already stored are placed by the old value (that is resharding: `idgate reshard` moves the rows, then publishes the new placement){job}",
                    t.name,
                    placement.join(", ")
                ),
            ));
            continue;
        }
        if before.generator != t.generator {
            d.moved.push((
                t.name.clone(),
                before.generator.clone(),
                t.generator.clone(),
            ));
        }
        let fields: Vec<&'static str> = fields
            .into_iter()
            .filter(|f| by_job.is_none() || !placement.contains(f))
            .collect();
        if !fields.is_empty() {
            d.tables_changed.push((t.name.clone(), fields));
        }
    }
    for t in old.tables() {
        if !new.tables().iter().any(|n| n.name == t.name) {
            d.tables_removed.push(t.name.clone());
        }
    }
    if old.is_sharded() != new.is_sharded() {
        let (origin, what) = if new.is_sharded() {
            let e = new.entries().iter().find(|e| e.placement().is_some());
            (
                e.map(|e| e.origin().clone()),
                "the first sharded or broadcast table rule",
            )
        } else {
            (None, "removing the last sharded or broadcast table rule")
        };
        let reason = format!(
            "{what} turns statement routing {} and needs a restart of idgate",
            if new.is_sharded() { "on" } else { "off" }
        );
        problems.push(match origin {
            Some(o) => problem(&o, reason),
            None => Problem {
                file: new
                    .entries()
                    .first()
                    .map(|e| e.origin().file.clone())
                    .unwrap_or_default(),
                line: None,
                reason,
            },
        });
    }
    if problems.is_empty() {
        Ok(d)
    } else {
        problems.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
        Err(RulesError { problems })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn set(text: &str) -> RuleSet {
        RuleSet::from_toml(
            Path::new("r.toml"),
            text,
            &["s0", "s1"],
            &crate::idgen::validate,
        )
        .unwrap()
    }

    const BASE: &str = r#"
[[generator]]
name = "orders"
kind = "sequence"
batch = 100

[[table]]
name = "shop.orders"
column = "id"
generator = "orders"
"#;

    #[test]
    fn nothing_changes() {
        assert!(diff(&set(BASE), &set(BASE)).unwrap().is_empty());
    }

    #[test]
    fn tables_and_generators_added_removed_and_tuned() {
        let new = BASE.replace("batch = 100", "batch = 500\nmax = 1000000")
            + r#"
[[generator]]
name = "events"
kind = "snowflake"

[[table]]
name = "shop.events"
column = "id"
generator = "events"
"#;
        let d = diff(&set(BASE), &set(&new)).unwrap();
        assert_eq!(d.generators_added, ["events"]);
        assert_eq!(
            d.generators_tuned,
            [("orders".to_string(), vec!["batch", "max"])]
        );
        assert_eq!(d.tables_added, ["shop.events"]);
        let back = diff(&set(&new), &set(BASE)).unwrap();
        assert_eq!(back.generators_removed, ["events"]);
        assert_eq!(back.tables_removed, ["shop.events"]);
        assert_eq!(back.lines().len(), 3);
    }

    #[test]
    fn a_move_to_another_generator_is_reported_for_the_store_check() {
        let two = BASE.to_string() + "[[generator]]\nname = \"other\"\nkind = \"sequence\"\n";
        let moved = two.replace("generator = \"orders\"", "generator = \"other\"");
        let d = diff(&set(&two), &set(&moved)).unwrap();
        assert_eq!(
            d.moved,
            [(
                "shop.orders".to_string(),
                "orders".to_string(),
                "other".to_string()
            )]
        );
        assert_eq!(d.tables_changed[0].1, ["generator"]);
    }

    #[test]
    fn fixed_generator_fields_are_refused_with_file_and_line() {
        for (edit, field) in [
            ("batch = 100\nstart = 5", "start"),
            ("batch = 100\nincrement = 2", "increment"),
        ] {
            let e = diff(&set(BASE), &set(&BASE.replace("batch = 100", edit)))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("r.toml:3: generator \"orders\""), "{e}");
            assert!(e.contains(field), "{e}");
        }
        let kind = BASE.replace("kind = \"sequence\"\nbatch = 100", "kind = \"snowflake\"");
        let e = diff(&set(BASE), &set(&kind)).unwrap_err().to_string();
        assert!(e.contains("kind"), "{e}");
        let snow = "[[generator]]\nname = \"e\"\nkind = \"snowflake\"\n";
        let e = diff(&set(snow), &set(&format!("{snow}node_bits = 8\n")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("node_bits"), "{e}");
    }

    #[test]
    fn placement_changes_and_routing_switches_are_refused() {
        let sharded = BASE.replace(
            "generator = \"orders\"",
            "generator = \"orders\"\nshard_key = \"id\"\nsharding = \"mod\"",
        );
        let e = diff(&set(BASE), &set(&sharded)).unwrap_err().to_string();
        assert!(e.contains("resharding"), "{e}");
        assert!(e.contains("routing on"), "{e}");
        let other_shards = sharded.replace(
            "sharding = \"mod\"",
            "sharding = \"mod\"\nshards = [\"s1\", \"s0\"]",
        );
        let e = diff(&set(&sharded), &set(&other_shards))
            .unwrap_err()
            .to_string();
        assert!(e.contains("r.toml:8: table \"shop.orders\": shards"), "{e}");
        let e = diff(&set(&sharded), &set("")).unwrap_err().to_string();
        assert!(e.contains("routing off"), "{e}");
    }

    /// The cutover's version may change exactly the moved table's
    /// placement to the job's target; any other placement is refused.
    #[test]
    fn a_resharding_cutover_may_change_exactly_its_tables_placement() {
        let two = BASE.replace(
            "generator = \"orders\"\n",
            "generator = \"orders\"\nshard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\"]\n",
        ) + "[[table]]\nname = \"shop.items\"\ncolumn = \"id\"\ngenerator = \"orders\"\nshard_key = \"id\"\nsharding = \"mod\"\n";
        let moved = two.replacen("shards = [\"s0\"]", "shards = [\"s0\", \"s1\"]", 1);
        let job = Resharded {
            table: "shop.orders".into(),
            shards: vec!["s0".into(), "s1".into()],
            sharding: Some("mod".into()),
            shard_key: None,
            config_shards: vec!["s0".into(), "s1".into()],
        };
        let d = diff_resharded(&set(&two), &set(&moved), Some(&job)).unwrap();
        assert_eq!(d.resharded, ["shop.orders"]);
        assert!(d.tables_changed.is_empty(), "{d:?}");
        assert_eq!(d.lines()[0].0, "table resharded");
        // Without the job: refused, as any placement change.
        let e = diff(&set(&two), &set(&moved)).unwrap_err().to_string();
        assert!(e.contains("table \"shop.orders\": shards"), "{e}");
        // A job for another target: refused, and the job's target said.
        let other = Resharded {
            shards: vec!["s1".into()],
            ..job.clone()
        };
        let e = diff_resharded(&set(&two), &set(&moved), Some(&other))
            .unwrap_err()
            .to_string();
        assert!(e.contains("moved it to shards [\"s1\"]"), "{e}");
        // The job's table is allowed; another table's move is not.
        let both = moved.replace(
            "name = \"shop.items\"\ncolumn = \"id\"\ngenerator = \"orders\"\nshard_key = \"id\"\nsharding = \"mod\"\n",
            "name = \"shop.items\"\ncolumn = \"id\"\ngenerator = \"orders\"\nshard_key = \"id\"\nsharding = \"hash\"\n",
        );
        let e = diff_resharded(&set(&two), &set(&both), Some(&job))
            .unwrap_err()
            .to_string();
        assert!(e.contains("table \"shop.items\": sharding"), "{e}");
        assert!(!e.contains("shop.orders"), "{e}");
    }
}
