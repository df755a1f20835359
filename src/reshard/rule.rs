//! The table's rule before and after the move: the placement a job starts
//! from (read from the rules in force), the edited rule files the cutover
//! publishes, and the target placement built from those files exactly as
//! every idgate builds it ([`crate::rules`] -> [`crate::shard::placement`]),
//! so rows land where idgate will look for them. Pure.

use super::protocol::Placement as Want;
use crate::rules::bundle::{Bundle, BundleFile};
use crate::rules::{RuleSet, TableEntry};
use crate::shard::placement::{KeyValue, Placement};

/// A rule table's placement as the rules say it.
#[derive(Debug, Clone)]
pub struct Side {
    /// What the job records.
    pub want: Want,
    /// Shard indices (config order) the table has rows on.
    pub shards: Vec<usize>,
    /// `None`: one shard, `shards[0]`.
    pub placement: Option<Placement>,
    /// The column rows are placed by.
    pub key: String,
    /// The id column idgate fills.
    pub id_column: String,
}

impl Side {
    /// Where a row whose key is `key` lives.
    ///
    /// # Errors
    /// The placement's refusal (a NULL key...), as text.
    pub fn shard_of(&self, key: i128) -> Result<usize, String> {
        match &self.placement {
            None => Ok(self.shards.first().copied().unwrap_or(0)),
            Some(p) => p.shard_of(&KeyValue::Int(key)).map_err(|e| e.to_string()),
        }
    }
}

/// `schema.table` split; a bare name is refused (the mover moves one
/// table of one schema).
pub fn split_table(name: &str) -> Result<(String, String), String> {
    match name.split_once('.') {
        Some((s, t)) if !s.is_empty() && !t.is_empty() && !t.contains('.') => {
            Ok((s.to_string(), t.to_string()))
        }
        _ => Err(format!(
            "--table {name:?}: give the table as schema.table, as its rule names it"
        )),
    }
}

/// The placement of `table` in `rules`, whose shards are `shard_names`.
///
/// # Errors
/// No rule for the table, a rule by bare name (it would move that table
/// in every schema), or a broadcast table.
pub fn side_of(rules: &RuleSet, table: &str, shard_names: &[String]) -> Result<Side, String> {
    let (schema, t) = split_table(table)?;
    let entry: &TableEntry = rules.entry(Some(&schema), &t).ok_or_else(|| {
        format!("no [[table]] rule names {table} in the rules in force: idgate reshard moves a rule table")
    })?;
    let rule = entry.rule();
    if rule.name != table {
        return Err(format!(
            "{}:{}: the rule for {table} is named {:?} (any schema): name it {table:?} before moving it",
            entry.origin().file.display(),
            entry.origin().line,
            rule.name
        ));
    }
    let name = |i: usize| {
        shard_names
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("#{i}"))
    };
    match entry.placement() {
        None => Ok(Side {
            want: Want {
                shards: vec![name(0)],
                sharding: None,
                shard_key: None,
            },
            shards: vec![0],
            placement: None,
            key: rule.column.clone(),
            id_column: rule.column.clone(),
        }),
        Some(p) if p.is_broadcast() => Err(format!(
            "{}:{}: {table} is a broadcast table (a copy on every shard): there is nothing to reshard",
            entry.origin().file.display(),
            entry.origin().line
        )),
        Some(p) => {
            // A range rule's list repeats shards; mod/hash lists are in rule order.
            let list: Vec<usize> = match p.kind() {
                crate::shard::placement::Sharding::Range => p.shards().to_vec(),
                _ => p.list().to_vec(),
            };
            Ok(Side {
                want: Want {
                    shards: list.iter().map(|&i| name(i)).collect(),
                    sharding: Some(p.kind().to_string()),
                    shard_key: entry.shard_key().map(str::to_string),
                },
                shards: p.shards().to_vec(),
                placement: Some(p.clone()),
                key: entry
                    .shard_key()
                    .map_or_else(|| rule.column.clone(), str::to_string),
                id_column: rule.column.clone(),
            })
        }
    }
}

/// The placement asked for on the command line, normalised: one shard
/// that is the default shard is an unsharded rule; any other placement
/// names its sharding (`mod` by default) and its key (the id column by
/// default).
///
/// # Errors
/// No shard, a shard the config does not have, a repeated one, or an
/// unknown sharding.
pub fn wanted(
    shards: &[String],
    sharding: Option<&str>,
    shard_key: Option<&str>,
    id_column: &str,
    shard_names: &[String],
) -> Result<Want, String> {
    if shards.is_empty() {
        return Err("--shards: name at least one shard".into());
    }
    for (i, s) in shards.iter().enumerate() {
        if !shard_names.contains(s) {
            return Err(format!(
                "--shards: {s:?} is not a [[shards]] name of the config ({})",
                shard_names.join(", ")
            ));
        }
        if shards[..i].contains(s) {
            return Err(format!("--shards: {s:?} is named twice"));
        }
    }
    if let Some(s) = sharding {
        if s != "mod" && s != "hash" {
            return Err(format!("--sharding {s:?}: use mod or hash"));
        }
    }
    if shards.len() == 1 && shard_names.first() == shards.first() && shard_key.is_none() {
        return Ok(Want {
            shards: shards.to_vec(),
            sharding: None,
            shard_key: None,
        });
    }
    Ok(Want {
        shards: shards.to_vec(),
        sharding: Some(sharding.unwrap_or("mod").to_string()),
        shard_key: Some(shard_key.unwrap_or(id_column).to_string()),
    })
}

/// The rule files with `table`'s rule placed as `to` says: its placement
/// keys replaced, everything else of every file (other keys, comments,
/// layout) as it was, so a DBA's rule files stay theirs after a move.
///
/// # Errors
/// No file has a `[[table]]` named `table`, or a file does not parse.
pub fn edit_files(files: &[BundleFile], table: &str, to: &Want) -> Result<Vec<BundleFile>, String> {
    let mut out = Vec::with_capacity(files.len());
    let mut found = false;
    for f in files {
        let mut doc: toml_edit::DocumentMut = f
            .text
            .parse()
            .map_err(|e: toml_edit::TomlError| format!("{}: {}", f.name, e.message()))?;
        let mut edited = false;
        match doc.get_mut("table") {
            Some(toml_edit::Item::ArrayOfTables(tables)) => {
                for t in tables.iter_mut() {
                    if t.get("name").and_then(toml_edit::Item::as_str) == Some(table) {
                        place(t, to);
                        edited = true;
                    }
                }
            }
            Some(toml_edit::Item::Value(toml_edit::Value::Array(tables))) => {
                // `table = [{ name = ..., ... }]`: inline tables.
                for v in tables.iter_mut() {
                    let toml_edit::Value::InlineTable(t) = v else {
                        continue;
                    };
                    if t.get("name").and_then(toml_edit::Value::as_str) == Some(table) {
                        place(t, to);
                        edited = true;
                    }
                }
            }
            _ => {}
        }
        if edited {
            found = true;
            out.push(BundleFile {
                name: f.name.clone(),
                text: doc.to_string(),
            });
        } else {
            out.push(f.clone());
        }
    }
    if !found {
        return Err(format!("no rule file has a [[table]] named {table:?}"));
    }
    Ok(out)
}

/// Replaces a `[[table]]`'s placement keys with `to`'s (none: unsharded).
fn place(t: &mut dyn toml_edit::TableLike, to: &Want) {
    for k in ["shard_key", "sharding", "shards", "hash", "ranges"] {
        t.remove(k);
    }
    if let (Some(sharding), Some(key)) = (&to.sharding, &to.shard_key) {
        t.insert("shard_key", toml_edit::value(key.as_str()));
        t.insert("sharding", toml_edit::value(sharding.as_str()));
        let shards: toml_edit::Array = to.shards.iter().map(String::as_str).collect();
        t.insert("shards", toml_edit::value(shards));
    }
}

/// The target side: the edited files loaded as every idgate loads a
/// version, and the table's placement in them.
///
/// # Errors
/// The edited rules do not load (every reason), or the table's rule is
/// not where [`side_of`] looks.
pub fn target(
    current: &Bundle,
    table: &str,
    to: &Want,
    shard_names: &[String],
) -> Result<(Vec<BundleFile>, Side), String> {
    let files = edit_files(&current.files, table, to)?;
    let b = Bundle {
        meta: current.meta.clone(),
        files: files.clone(),
    };
    let rules = b
        .rules(shard_names, &crate::idgen::validate)
        .map_err(|e| format!("the rules with {table} moved do not load:\n{e}"))?;
    let side = side_of(&rules, table, shard_names)?;
    Ok((files, side))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::bundle::Meta;

    fn names() -> Vec<String> {
        vec!["s0".into(), "s1".into(), "s2".into()]
    }

    fn bundle(table_extra: &str) -> Bundle {
        Bundle {
            meta: Meta {
                version: 3,
                published_at: 0,
                user: "u".into(),
                host: "h".into(),
                changes: vec![],
                rollback_of: None,
                nonce: "n".into(),
                reshard_job: None,
            },
            files: vec![
                BundleFile {
                    name: "a.toml".into(),
                    text: "# ids\n[[generator]]\nname = \"g\"\nkind = \"sequence\"\n\n[[table]]\nname = \"shop.notes\"\ncolumn = \"id\"\ngenerator = \"g\"\n".into(),
                },
                BundleFile {
                    name: "b.toml".into(),
                    text: format!("[[table]]\nname = \"shop.orders\"\ncolumn = \"id\"\ngenerator = \"g\"\n{table_extra}"),
                },
            ],
        }
    }

    #[test]
    fn unsharded_to_two_shards_places_rows_as_idgate_does() {
        let b = bundle("");
        let rules = b.rules(&names(), &crate::idgen::validate).unwrap();
        let from = side_of(&rules, "shop.orders", &names()).unwrap();
        assert_eq!(from.shards, vec![0]);
        assert_eq!(from.want.sharding, None);
        assert_eq!(from.shard_of(77).unwrap(), 0);
        let to = wanted(&["s0".into(), "s1".into()], None, None, "id", &names()).unwrap();
        assert_eq!(to.sharding.as_deref(), Some("mod"));
        assert_eq!(to.shard_key.as_deref(), Some("id"));
        let (files, side) = target(&b, "shop.orders", &to, &names()).unwrap();
        // The other file is untouched, comments and all.
        assert_eq!(files[0], b.files[0]);
        assert!(
            files[1].text.contains("sharding = \"mod\""),
            "{}",
            files[1].text
        );
        assert_eq!(side.shards, vec![0, 1]);
        assert_eq!(side.shard_of(10).unwrap(), 0);
        assert_eq!(side.shard_of(11).unwrap(), 1);
        // The edited version is what an idgate would load.
        let again = Bundle {
            meta: b.meta.clone(),
            files,
        }
        .rules(&names(), &crate::idgen::validate)
        .unwrap();
        let p = again
            .entry(Some("shop"), "orders")
            .unwrap()
            .placement()
            .unwrap();
        assert_eq!(p.shard_of(&KeyValue::Int(11)).unwrap(), 1);
    }

    /// `orders` on s0, s1 and s2 by `id` modulo 3.
    fn three_by_mod() -> Want {
        wanted(
            &["s0".into(), "s1".into(), "s2".into()],
            Some("mod"),
            None,
            "id",
            &names(),
        )
        .unwrap()
    }

    #[test]
    fn the_edited_file_keeps_its_comments_and_layout() {
        let text = "# Orders: sharded by id since March.\n\
                    [[table]]\n\
                    name = \"shop.orders\"   # the shop's orders\n\
                    column = \"id\"\n\
                    generator = \"g\"\n\
                    shard_key = \"id\"\n\
                    sharding = \"mod\"\n\
                    shards = [\"s0\", \"s1\"]\n\
                    \n\
                    # Notes stay where they are.\n\
                    [[table]]\n\
                    name = \"shop.notes\"\n\
                    column = \"id\"\n\
                    generator = \"g\"\n";
        let files = [BundleFile {
            name: "orders.toml".into(),
            text: text.into(),
        }];
        let to = three_by_mod();
        let out = edit_files(&files, "shop.orders", &to).unwrap();
        let t = &out[0].text;
        for kept in [
            "# Orders: sharded by id since March.\n",
            "name = \"shop.orders\"   # the shop's orders\n",
            "\n# Notes stay where they are.\n[[table]]\nname = \"shop.notes\"\n",
        ] {
            assert!(t.contains(kept), "{kept:?} lost:\n{t}");
        }
        assert!(t.contains("shards = [\"s0\", \"s1\", \"s2\"]"), "{t}");
        // Inline tables are edited in place too.
        let inline = [BundleFile {
            name: "i.toml".into(),
            text:
                "table = [{ name = \"shop.orders\", column = \"id\", generator = \"g\" }] # one\n"
                    .into(),
        }];
        let out = edit_files(&inline, "shop.orders", &to).unwrap();
        assert!(
            out[0].text.contains("sharding = \"mod\""),
            "{}",
            out[0].text
        );
        assert!(out[0].text.ends_with("# one\n"), "{}", out[0].text);
    }

    #[test]
    fn two_to_three_shards_and_back_to_one() {
        let b = bundle("shard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n");
        let rules = b.rules(&names(), &crate::idgen::validate).unwrap();
        let from = side_of(&rules, "shop.orders", &names()).unwrap();
        assert_eq!(from.want.shards, vec!["s0", "s1"]);
        assert_eq!(from.want.sharding.as_deref(), Some("mod"));
        let to = three_by_mod();
        let (_, side) = target(&b, "shop.orders", &to, &names()).unwrap();
        assert_eq!(
            (0..6)
                .map(|k| side.shard_of(k).unwrap())
                .collect::<Vec<_>>(),
            vec![0, 1, 2, 0, 1, 2]
        );
        // Back onto the default shard: an unsharded rule.
        let one = wanted(&["s0".into()], None, None, "id", &names()).unwrap();
        assert_eq!(one.sharding, None);
        let (files, side) = target(&b, "shop.orders", &one, &names()).unwrap();
        assert!(!files[1].text.contains("shard"), "{}", files[1].text);
        assert!(side.placement.is_none());
        assert_eq!(side.shard_of(5).unwrap(), 0);
        // Onto another single shard: a one-shard placement.
        let s2 = wanted(&["s2".into()], None, None, "id", &names()).unwrap();
        let (_, side) = target(&b, "shop.orders", &s2, &names()).unwrap();
        assert_eq!(side.shard_of(5).unwrap(), 2);
        // Hash placement is idgate's hash.
        let h = wanted(
            &["s1".into(), "s2".into()],
            Some("hash"),
            None,
            "id",
            &names(),
        )
        .unwrap();
        let (_, side) = target(&b, "shop.orders", &h, &names()).unwrap();
        let p = Placement::hash(vec![1, 2]).unwrap();
        for k in 0..50 {
            assert_eq!(
                side.shard_of(k).unwrap(),
                p.shard_of(&KeyValue::Int(k)).unwrap()
            );
        }
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        assert!(split_table("orders").unwrap_err().contains("schema.table"));
        let e = wanted(&["s9".into()], None, None, "id", &names()).unwrap_err();
        assert!(e.contains("\"s9\""), "{e}");
        let e = wanted(&["s1".into(), "s1".into()], None, None, "id", &names()).unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let e = wanted(&["s1".into()], Some("range"), None, "id", &names()).unwrap_err();
        assert!(e.contains("mod or hash"), "{e}");
        let b = bundle("");
        let rules = b.rules(&names(), &crate::idgen::validate).unwrap();
        let e = side_of(&rules, "shop.nothing", &names()).unwrap_err();
        assert!(e.contains("shop.nothing"), "{e}");
        let e = edit_files(
            &b.files,
            "shop.nothing",
            &wanted(&["s0".into()], None, None, "id", &names()).unwrap(),
        )
        .unwrap_err();
        assert!(e.contains("shop.nothing"), "{e}");
    }
}
