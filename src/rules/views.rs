//! Views over rule tables. An INSERT through an updatable view reaches the
//! table underneath without idgate seeing a rule table: no id filled (the
//! shard's AUTO_INCREMENT or the column's default stores one the generator
//! never issued), an explicit id not observed. So the front end reads the
//! shards' views (`information_schema.VIEWS`, `frontend/views.rs`) into a
//! [`ViewCatalog`], and every rule set in force knows which views are
//! *guarded*: updatable, and selecting from a rule table or from another
//! guarded view. The SQL planner refuses writes of ids through them. It
//! also knows every view (updatable or not) over a *sharded* rule table:
//! each shard's copy sees that shard's rows only, so routing refuses it.
//!
//! What a view reads is taken from its definition as MariaDB stores it,
//! every name qualified (`` select `shop`.`orders`.`id` AS `id` ... from
//! `shop`.`orders` ``): each `a.b` and `a.b.c` names table `a.b` (read
//! conservatively: `alias.column` may also match, which can only guard a
//! view too many). Its id columns are the items of its select list that
//! are a plain reference to a rule table's id column (`` `o`.`id` AS
//! `order_id` ``), or to a guarded view's.

use super::ruleset::RuleSet;
use std::borrow::Cow;
use std::collections::HashMap;

/// One view as read from a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewDef {
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub name: String,
    /// `IS_UPDATABLE = 'YES'`.
    pub updatable: bool,
    /// The `(schema, table)` pairs its definition may read.
    pub tables: Vec<(String, String)>,
    /// Its select list's plain column references: `(alias, column)`.
    pub columns: Vec<(String, String)>,
}

/// The views of every shard (a name defined on several shards once, the
/// first read; views over sharded tables are created on each shard alike).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViewCatalog {
    views: Vec<ViewDef>,
}

impl ViewCatalog {
    /// A catalog of `views`.
    pub fn new(mut views: Vec<ViewDef>) -> ViewCatalog {
        views.sort_by(|a, b| (&a.schema, &a.name).cmp(&(&b.schema, &b.name)));
        views.dedup_by(|a, b| a.schema == b.schema && a.name == b.name);
        ViewCatalog { views }
    }

    /// The views, sorted by schema and name.
    pub fn views(&self) -> &[ViewDef] {
        &self.views
    }

    /// No views at all.
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }
}

/// An updatable view that reaches a rule table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardedView {
    /// `schema.view`, for messages.
    pub view: String,
    /// The rule table underneath, as its rule names it.
    pub table: String,
    /// The rule table's id column.
    pub column: String,
    /// The view's columns that show the id column (perhaps renamed).
    pub id_columns: Vec<String>,
}

/// Views by name, then schema: looked up with the statement's `&str`s
/// without allocating (names in lower case when the shards fold them).
#[derive(Debug, Clone)]
struct NameMap<V> {
    by_name: HashMap<String, Vec<(String, V)>>,
    fold: bool,
}

impl<V> NameMap<V> {
    fn new(fold: bool) -> NameMap<V> {
        NameMap {
            by_name: HashMap::new(),
            fold,
        }
    }

    fn get(&self, schema: &str, name: &str) -> Option<&V> {
        let (schema, name) = self.folded(schema, name);
        self.by_name
            .get(&*name)?
            .iter()
            .find(|(s, _)| *s == *schema)
            .map(|(_, v)| v)
    }

    /// Sets `schema.name` to `v`; whether that changed it.
    fn set(&mut self, schema: &str, name: &str, v: V) -> bool
    where
        V: PartialEq,
    {
        let (schema, name) = self.folded(schema, name);
        let slot = self.by_name.entry(name.into_owned()).or_default();
        match slot.iter_mut().find(|(s, _)| *s == *schema) {
            Some((_, old)) if *old == v => false,
            Some((_, old)) => {
                *old = v;
                true
            }
            None => {
                slot.push((schema.into_owned(), v));
                true
            }
        }
    }

    fn has_name(&self, name: &str) -> bool {
        !self.by_name.is_empty() && self.by_name.contains_key(&*self.folded("", name).1)
    }

    fn values(&self) -> impl Iterator<Item = &V> {
        self.by_name.values().flatten().map(|(_, v)| v)
    }

    fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    fn folded<'a>(&self, schema: &'a str, name: &'a str) -> (Cow<'a, str>, Cow<'a, str>) {
        if self.fold {
            (schema.to_lowercase().into(), name.to_lowercase().into())
        } else {
            (schema.into(), name.into())
        }
    }
}

/// The guarded views of a catalog under one rule set, and the views over
/// sharded tables.
#[derive(Debug, Clone)]
pub struct ViewGuards {
    guarded: NameMap<GuardedView>,
    /// Every view (updatable or not) that reads a sharded rule table,
    /// directly or through views: `(view, table)` as shown. On one shard
    /// it sees that shard's rows only, so idgate cannot answer it.
    over_sharded: NameMap<(String, String)>,
}

impl Default for ViewGuards {
    fn default() -> ViewGuards {
        ViewGuards {
            guarded: NameMap::new(false),
            over_sharded: NameMap::new(false),
        }
    }
}

impl ViewGuards {
    /// Which of `catalog`'s views reach a rule table of `rules` (directly
    /// or through other views), to a fixed point: each view is worked out
    /// again from what is known until nothing changes (what is known only
    /// grows, so this ends).
    pub fn build(catalog: &ViewCatalog, rules: &RuleSet) -> ViewGuards {
        let fold = rules.folds_names();
        let mut guarded: NameMap<GuardedView> = NameMap::new(fold);
        let mut over_sharded: NameMap<(String, String)> = NameMap::new(fold);
        loop {
            let mut changed = false;
            for v in &catalog.views {
                if v.updatable {
                    if let Some(g) = guard(v, rules, &guarded) {
                        changed |= guarded.set(&v.schema, &v.name, g);
                    }
                }
                if let Some(table) = sharded_under(v, rules, &over_sharded) {
                    let shown = (format!("{}.{}", v.schema, v.name), table);
                    changed |= over_sharded.set(&v.schema, &v.name, shown);
                }
            }
            if !changed {
                break;
            }
        }
        ViewGuards {
            guarded,
            over_sharded,
        }
    }

    /// The view `schema.name` when it reads a sharded rule table:
    /// `(view, table)`.
    pub fn over_sharded(&self, schema: Option<&str>, name: &str) -> Option<&(String, String)> {
        if self.over_sharded.is_empty() {
            return None;
        }
        self.over_sharded.get(schema?, name)
    }

    /// Whether some view that reads a sharded rule table is called `name`
    /// (in any schema): a cheap pre-check.
    pub fn has_sharded_name(&self, name: &str) -> bool {
        self.over_sharded.has_name(name)
    }

    /// No guarded view: the planner's checks cost nothing.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.guarded.is_empty()
    }

    /// The guarded view `schema.name` (`schema`: the statement's or the
    /// session's; a view always has one).
    pub fn get(&self, schema: Option<&str>, name: &str) -> Option<&GuardedView> {
        if self.guarded.is_empty() {
            return None;
        }
        self.guarded.get(schema?, name)
    }

    /// Whether some guarded view is called `name` (in any schema): a cheap
    /// pre-check.
    pub fn has_name(&self, name: &str) -> bool {
        self.guarded.has_name(name)
    }

    /// The guarded views, by name.
    pub fn iter(&self) -> impl Iterator<Item = &GuardedView> {
        let mut v: Vec<&GuardedView> = self.guarded.values().collect();
        v.sort_by(|a, b| a.view.cmp(&b.view));
        v.into_iter()
    }

    /// How many views are guarded.
    pub fn len(&self) -> usize {
        self.guarded.values().count()
    }
}

/// `v` as a guarded view, from the rule tables and guarded views it reads:
/// the first one's table, and every column of `v` that shows an id.
fn guard(v: &ViewDef, rules: &RuleSet, guarded: &NameMap<GuardedView>) -> Option<GuardedView> {
    let mut under: Option<(String, String)> = None;
    let mut id_sources: Vec<&str> = Vec::new();
    for (s, t) in &v.tables {
        if let Some(e) = rules.entry(Some(s), t) {
            under.get_or_insert_with(|| (e.rule().name.clone(), e.column().into()));
            id_sources.push(e.column());
        } else if let Some(g) = guarded.get(s, t) {
            under.get_or_insert_with(|| (g.table.clone(), g.column.clone()));
            id_sources.extend(g.id_columns.iter().map(String::as_str));
        }
    }
    let (table, column) = under?;
    let id_columns = v
        .columns
        .iter()
        .filter(|(_, c)| id_sources.iter().any(|s| s.eq_ignore_ascii_case(c)))
        .map(|(alias, _)| alias.clone())
        .collect();
    Some(GuardedView {
        view: format!("{}.{}", v.schema, v.name),
        table,
        column,
        id_columns,
    })
}

/// The sharded rule table `v` reads, directly or through views known to.
fn sharded_under(
    v: &ViewDef,
    rules: &RuleSet,
    over_sharded: &NameMap<(String, String)>,
) -> Option<String> {
    v.tables
        .iter()
        .find_map(|(s, t)| match rules.entry(Some(s), t) {
            Some(e) if e.placement().is_some_and(|p| !p.is_broadcast()) => {
                Some(e.rule().name.clone())
            }
            Some(_) => None,
            None => over_sharded.get(s, t).map(|(_, t)| t.clone()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const RULES: &str = "[[generator]]\nname = \"g\"\nkind = \"sequence\"\n\n\
        [[table]]\nname = \"shop.orders\"\ncolumn = \"id\"\ngenerator = \"g\"\n";

    fn view(
        schema: &str,
        name: &str,
        tables: &[(&str, &str)],
        columns: &[(&str, &str)],
    ) -> ViewDef {
        ViewDef {
            schema: schema.into(),
            name: name.into(),
            updatable: true,
            tables: tables
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            columns: columns
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        }
    }

    #[test]
    fn guards_reach_through_views_to_a_fixed_point() {
        let rules = RuleSet::from_toml(Path::new("t.toml"), RULES, &["s0"], &|_| Ok(())).unwrap();
        // Listed so that each view comes before the one it reads.
        let catalog = ViewCatalog::new(vec![
            view("shop", "a3", &[("shop", "a2")], &[("x", "mid")]),
            view(
                "shop",
                "a2",
                &[("shop", "a1")],
                &[("mid", "ID"), ("k", "k")],
            ),
            view(
                "shop",
                "a1",
                &[("shop", "orders")],
                &[("id", "id"), ("k", "k")],
            ),
            view("shop", "plain", &[("shop", "other")], &[("id", "id")]),
            ViewDef {
                updatable: false,
                ..view("shop", "ro", &[("shop", "orders")], &[("id", "id")])
            },
        ]);
        let g = ViewGuards::build(&catalog, &rules);
        assert_eq!(g.len(), 3);
        for (name, ids) in [("a1", vec!["id"]), ("a2", vec!["mid"]), ("a3", vec!["x"])] {
            let v = g
                .get(Some("shop"), name)
                .unwrap_or_else(|| panic!("{name} guarded"));
            assert_eq!(v.table, "shop.orders");
            assert_eq!(v.column, "id");
            assert_eq!(v.id_columns, ids, "{name}");
        }
        assert!(g.get(Some("shop"), "plain").is_none());
        // A view that reads the table and, through a view sorted after
        // it, the id again under another name: both names found.
        let catalog2 = ViewCatalog::new(vec![
            view(
                "shop",
                "b0",
                &[("shop", "orders"), ("shop", "c9")],
                &[("id", "id"), ("x", "cid")],
            ),
            view("shop", "c9", &[("shop", "orders")], &[("cid", "id")]),
        ]);
        let g2 = ViewGuards::build(&catalog2, &rules);
        assert_eq!(g2.get(Some("shop"), "b0").unwrap().id_columns, ["id", "x"]);
        assert!(g.get(Some("shop"), "ro").is_none());
        assert!(g.get(None, "a1").is_none(), "a view always has a schema");
        assert!(g.get(Some("Shop"), "A1").is_none(), "case-sensitive");
        assert!(g.has_name("a1") && !g.has_name("A1"));
        // On shards that fold names.
        let mut folded = rules.clone();
        folded.fold_names(true);
        folded.attach_views(std::sync::Arc::new(catalog));
        assert!(folded.views().get(Some("SHOP"), "A1").is_some());
        assert!(folded.views().has_name("A3"));
    }

    #[test]
    fn views_over_sharded_tables_whatever_they_are() {
        let rules = RuleSet::from_toml(
            Path::new("t.toml"),
            &format!("{RULES}shard_key = \"id\"\nsharding = \"mod\"\n"),
            &["s0", "s1"],
            &|_| Ok(()),
        )
        .unwrap();
        let catalog = ViewCatalog::new(vec![
            ViewDef {
                updatable: false,
                ..view("shop", "agg", &[("shop", "orders")], &[])
            },
            view("shop", "top", &[("shop", "agg")], &[]),
            view("shop", "plain", &[("shop", "other")], &[]),
        ]);
        let g = ViewGuards::build(&catalog, &rules);
        let over = |n: &str| g.over_sharded(Some("shop"), n).cloned();
        assert_eq!(over("agg"), Some(("shop.agg".into(), "shop.orders".into())));
        assert_eq!(over("top"), Some(("shop.top".into(), "shop.orders".into())));
        assert_eq!(over("plain"), None);
        assert!(g.has_sharded_name("top") && !g.has_sharded_name("plain"));
        // Not updatable: no writes to guard, reads still refused.
        assert!(g.get(Some("shop"), "agg").is_none());
    }

    #[test]
    fn a_catalog_keeps_one_view_per_name() {
        let c = ViewCatalog::new(vec![
            view("s", "b", &[], &[]),
            view("s", "a", &[], &[]),
            view("s", "b", &[("x", "y")], &[]),
        ]);
        let names: Vec<&str> = c.views().iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(!c.is_empty() && ViewCatalog::default().is_empty());
    }
}
