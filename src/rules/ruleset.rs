//! [`RuleSet`]: the validated rules of a directory, indexed for the hot path.
//!
//! # Matching tables
//! Table and schema names are compared **case-sensitively**, byte for byte,
//! like MariaDB on Linux with its default `lower_case_table_names = 0`: a rule
//! for `shop.orders` does not match `INSERT INTO Shop.Orders`. On shards that
//! fold names (`lower_case_table_names` 1 or 2, read at start-up,
//! [`RuleSet::fold_names`]) they are compared case-insensitively, as the
//! shards do. Column names are compared case-insensitively by the SQL
//! planner, as MySQL does.
//!
//! A rule named `schema.table` matches only that table. A bare `table` rule
//! matches a table of that name in any schema. Both may exist for the same
//! table name: the exact `schema.table` rule wins for its schema, and the bare
//! rule applies to every other schema (that is how a DBA overrides the generic
//! rule for one schema). Two rules with the same name (both bare or both for
//! the same schema) are an error, even for different columns: idgate fills one
//! column per table.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::spec::{GeneratorRule, TableRule};
use super::views::{ViewCatalog, ViewGuards};
use crate::shard::placement::Placement;

/// Where a rule was written (for summaries and error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The rule file.
    pub file: std::path::PathBuf,
    /// 1-based line of the entry's `name` key.
    pub line: usize,
}

/// One table rule, compiled for the hot path.
#[derive(Debug, Clone)]
pub struct TableEntry {
    rule: TableRule,
    schema: Option<Box<str>>,
    table: Box<str>,
    generator: Arc<str>,
    column: Arc<str>,
    quoted_column: Arc<str>,
    /// The shard key column when the table is sharded (not broadcast).
    shard_key: Option<Arc<str>>,
    /// `shard_key` names another column than `column` (compared as MySQL
    /// compares column names: case-insensitively).
    separate_key: bool,
    origin: Origin,
    placement: Option<Placement>,
}

impl TableEntry {
    /// The rule as written.
    pub fn rule(&self) -> &TableRule {
        &self.rule
    }
    /// The schema part of the rule's name; `None` for a bare table rule.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }
    /// The table part of the rule's name.
    pub fn table(&self) -> &str {
        &self.table
    }
    /// The column idgate fills.
    pub fn column(&self) -> &str {
        &self.rule.column
    }
    /// The column idgate fills, shared (plans hold it cheaply).
    pub fn column_arc(&self) -> &Arc<str> {
        &self.column
    }
    /// The column in backquotes, ready to splice into SQL.
    pub fn quoted_column(&self) -> &Arc<str> {
        &self.quoted_column
    }
    /// Name of the generator (shared, so plans can hold it cheaply).
    pub fn generator(&self) -> &Arc<str> {
        &self.generator
    }
    /// Where the rule was written.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
    /// Where the table's rows live: `None` when the table is not sharded (no
    /// `shard_key`, not broadcast): it lives on the default shard, index 0.
    pub fn placement(&self) -> Option<&Placement> {
        self.placement.as_ref()
    }
    /// The column whose value picks the shard (`None`: not sharded, or
    /// broadcast).
    pub fn shard_key(&self) -> Option<&str> {
        self.rule.shard_key.as_deref()
    }
    /// The shard key column of a sharded (not broadcast) table, shared.
    pub fn shard_key_arc(&self) -> Option<&Arc<str>> {
        self.shard_key.as_ref()
    }
    /// The shard key column when it is not the id column: each inserted row
    /// is placed by the value it gives that column, not by its id.
    pub fn separate_shard_key(&self) -> Option<&Arc<str>> {
        self.shard_key.as_ref().filter(|_| self.separate_key)
    }
}

/// Index entry for one bare table name.
#[derive(Debug, Default, Clone)]
struct Slot {
    /// The bare rule (any schema), as an index into `entries`.
    any: Option<usize>,
    /// `schema.table` rules for this table name: (schema, index into `entries`).
    by_schema: Vec<(Box<str>, usize)>,
    /// Some rule for this table name (any schema) has a placement.
    sharded: bool,
}

/// FNV-1a over a table name. The index is looked up for every INSERT and
/// every statement naming a table; SipHash was 10-13% of planning a
/// statement on a table without a rule. The keys are fixed by the rule
/// files, so a client choosing the names it looks up cannot flood a bucket.
#[derive(Debug, Clone, Copy)]
pub struct NameHasher(u64);

impl Default for NameHasher {
    fn default() -> Self {
        NameHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for NameHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The validated rules of a rules directory. Built by
/// [`RuleSet::load_dir`] or [`RuleSet::from_toml`]; immutable afterwards (a
/// reload builds a new one).
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    generators: Vec<GeneratorRule>,
    generator_origins: Vec<Origin>,
    tables: Vec<TableRule>,
    entries: Vec<TableEntry>,
    index: HashMap<Box<str>, Slot, BuildHasherDefault<NameHasher>>,
    /// The same index with table and schema names in lower case, for
    /// shards that fold names (`lower_case_table_names` 1 or 2).
    folded: HashMap<Box<str>, Slot, BuildHasherDefault<NameHasher>>,
    /// Names match case-insensitively ([`RuleSet::fold_names`]).
    fold: bool,
    /// The shard names placements index into (the config's, in order).
    shard_names: Vec<String>,
    /// Some table has a placement.
    sharded: bool,
    /// The shards' views ([`RuleSet::attach_views`]) and those of them
    /// that reach a rule table.
    catalog: Option<Arc<ViewCatalog>>,
    guards: Arc<ViewGuards>,
}

impl RuleSet {
    /// Builds the index. The caller has validated names and uniqueness.
    pub(crate) fn build(
        generators: Vec<(GeneratorRule, Origin)>,
        tables: Vec<(TableRule, Origin, Option<Placement>)>,
        shard_names: Vec<String>,
    ) -> RuleSet {
        let mut set = RuleSet {
            shard_names,
            ..RuleSet::default()
        };
        for (g, o) in generators {
            set.generators.push(g);
            set.generator_origins.push(o);
        }
        for (rule, origin, placement) in tables {
            let (schema, table) = match rule.name.split_once('.') {
                Some((s, t)) => (Some(Box::<str>::from(s)), Box::<str>::from(t)),
                None => (None, Box::<str>::from(rule.name.as_str())),
            };
            let i = set.entries.len();
            let slot = set.index.entry(table.clone()).or_default();
            match &schema {
                Some(s) => slot.by_schema.push((s.clone(), i)),
                None => slot.any = Some(i),
            }
            slot.sharded |= placement.is_some();
            // Folded: the first of two rules that differ only in case wins.
            let slot = set.folded.entry(table.to_lowercase().into()).or_default();
            match &schema {
                Some(s) => slot.by_schema.push((s.to_lowercase().into(), i)),
                None => {
                    slot.any.get_or_insert(i);
                }
            }
            slot.sharded |= placement.is_some();
            set.sharded |= placement.is_some();
            set.entries.push(TableEntry {
                generator: Arc::from(rule.generator.as_str()),
                column: Arc::from(rule.column.as_str()),
                quoted_column: Arc::from(format!("`{}`", rule.column.replace('`', "``"))),
                shard_key: match (&placement, &rule.shard_key) {
                    (Some(p), Some(k)) if !p.is_broadcast() => Some(Arc::from(k.as_str())),
                    _ => None,
                },
                separate_key: rule.shard_key.as_deref().is_some_and(|k| {
                    !(k.eq_ignore_ascii_case(&rule.column)
                        || k.to_lowercase() == rule.column.to_lowercase())
                }),
                schema,
                table,
                origin,
                placement,
                rule: rule.clone(),
            });
            set.tables.push(rule);
        }
        set
    }

    /// The rule for `table` in `schema` (the statement's explicit schema, or
    /// the session's current database; `None` when there is neither). An exact
    /// `schema.table` rule wins over a bare `table` rule. Case-sensitive, see
    /// the module doc.
    pub fn table(&self, schema: Option<&str>, table: &str) -> Option<&TableRule> {
        self.entry(schema, table).map(TableEntry::rule)
    }

    /// Like [`RuleSet::table`], with the compiled entry the SQL planner uses.
    pub fn entry(&self, schema: Option<&str>, table: &str) -> Option<&TableEntry> {
        if self.fold {
            return self.entry_folded(schema, table);
        }
        let slot = self.index.get(table)?;
        let i = schema
            .and_then(|s| {
                slot.by_schema
                    .iter()
                    .find(|(rs, _)| &**rs == s)
                    .map(|&(_, i)| i)
            })
            .or(slot.any)?;
        self.entries.get(i)
    }

    /// [`RuleSet::entry`] on shards that fold names: `Shop.Orders` is the
    /// table of rule `shop.orders`.
    fn entry_folded(&self, schema: Option<&str>, table: &str) -> Option<&TableEntry> {
        let slot = self.folded.get(&*table.to_lowercase())?;
        let i = schema
            .and_then(|s| {
                let s = s.to_lowercase();
                slot.by_schema
                    .iter()
                    .find(|(rs, _)| **rs == *s)
                    .map(|&(_, i)| i)
            })
            .or(slot.any)?;
        self.entries.get(i)
    }

    /// The shards compare table and schema names case-insensitively
    /// (`lower_case_table_names` 1 or 2): so do the rules from now on.
    pub fn fold_names(&mut self, fold: bool) {
        self.fold = fold;
        if let Some(c) = self.catalog.clone() {
            self.attach_views(c);
        }
    }

    /// The shards' views as last read: the guarded ones
    /// ([`RuleSet::views`]) are found against these rules.
    pub fn attach_views(&mut self, catalog: Arc<ViewCatalog>) {
        self.guards = Arc::new(ViewGuards::build(&catalog, self));
        self.catalog = Some(catalog);
    }

    /// The updatable views that reach a rule table (empty until
    /// [`RuleSet::attach_views`]).
    #[inline]
    pub fn views(&self) -> &ViewGuards {
        &self.guards
    }

    /// Whether names match case-insensitively ([`RuleSet::fold_names`]).
    pub fn folds_names(&self) -> bool {
        self.fold
    }

    /// True if some rule names `table` (in any schema): a cheap pre-check.
    pub fn has_table_name(&self, table: &str) -> bool {
        if self.fold {
            return self.folded.contains_key(&*table.to_lowercase());
        }
        self.index.contains_key(table)
    }

    /// True if some table rule has a placement (sharded or broadcast): the
    /// session then has to route; otherwise everything is on the default shard.
    pub fn is_sharded(&self) -> bool {
        self.sharded
    }

    /// True if some rule for a table called `table` (in any schema) has a
    /// placement: a cheap pre-check, like [`RuleSet::has_table_name`].
    pub fn has_sharded_table_name(&self, table: &str) -> bool {
        if self.fold {
            return self
                .folded
                .get(&*table.to_lowercase())
                .is_some_and(|s| s.sharded);
        }
        self.index.get(table).is_some_and(|s| s.sharded)
    }

    /// The shard names placements index into: the config's `[[shards]]`
    /// names in order (index 0 is the default shard). Loaded without a config
    /// (`rules check` without `--config`): the names the rules mention.
    pub fn shard_names(&self) -> &[String] {
        &self.shard_names
    }

    /// All generators, in file order.
    pub fn generators(&self) -> &[GeneratorRule] {
        &self.generators
    }

    /// The generator named `name`.
    pub fn generator(&self, name: &str) -> Option<&GeneratorRule> {
        self.generators.iter().find(|g| g.name == name)
    }

    /// All table rules, in file order.
    pub fn tables(&self) -> &[TableRule] {
        &self.tables
    }

    /// All compiled table entries, in file order (parallel to [`RuleSet::tables`]).
    pub fn entries(&self) -> &[TableEntry] {
        &self.entries
    }

    /// Where each generator was written (parallel to [`RuleSet::generators`]).
    pub fn generator_origins(&self) -> &[Origin] {
        &self.generator_origins
    }

    /// True when there are no table rules (every statement passes through).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::RuleSet;
    use std::path::Path;

    const RULES: &str = "[[generator]]\nname = \"g\"\nkind = \"sequence\"\n\n\
        [[table]]\nname = \"shop.orders\"\ncolumn = \"id\"\ngenerator = \"g\"\n\n\
        [[table]]\nname = \"Items\"\ncolumn = \"id\"\ngenerator = \"g\"\n";

    #[test]
    fn names_match_in_any_case_only_when_folded() {
        let mut r = RuleSet::from_toml(Path::new("t.toml"), RULES, &["s0"], &|_| Ok(())).unwrap();
        assert!(r.entry(Some("shop"), "orders").is_some());
        assert!(r.entry(Some("Shop"), "ORDERS").is_none());
        assert!(r.entry(Some("x"), "items").is_none());
        assert!(!r.has_table_name("ORDERS"));
        r.fold_names(true);
        assert!(r.entry(Some("Shop"), "ORDERS").is_some());
        assert!(r.entry(Some("SHOP"), "Orders").is_some());
        assert!(r.entry(Some("other"), "orders").is_none());
        assert!(r.entry(Some("x"), "items").is_some());
        assert!(r.entry(None, "ITEMS").is_some());
        assert!(r.has_table_name("ORDERS"));
        assert!(!r.has_sharded_table_name("ORDERS"));
    }
}
