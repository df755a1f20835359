//! The rule loader: whole-set validation with `file:line: reason` errors, and
//! the lookup the SQL planner uses.

use std::path::Path;

use idgate::rules::{check_dir, GeneratorRule, RuleSet, RulesError};
use idgate::shard::placement::{KeyValue, PlacementError, Sharding};

/// The config's `[[shards]]` names the tests load rules against.
const SHARDS: &[&str] = &["s0", "s1", "s2"];

fn ok(_: &GeneratorRule) -> Result<(), String> {
    Ok(())
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn names() -> Vec<String> {
    SHARDS.iter().map(|s| s.to_string()).collect()
}

fn load_err(files: &[(&str, &str)]) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        write(dir.path(), name, text);
    }
    let err: RulesError = RuleSet::load_dir(dir.path(), SHARDS, &ok).unwrap_err();
    let prefix = format!("{}/", dir.path().display());
    let lines = err
        .to_string()
        .lines()
        .map(|l| l.replace(&prefix, ""))
        .collect();
    (dir, lines)
}

const GOOD: &str = r#"
[[generator]]
name = "orders"
kind = "sequence"
batch = 1000

[[generator]]
name = "events"
kind = "snowflake"

[[table]]
name = "shop.orders"
column = "id"
generator = "orders"

[[table]]
name = "events"
column = "event_id"
generator = "events"
"#;

#[test]
fn loads_the_shipped_examples() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
    let set = RuleSet::load_dir(&dir, SHARDS, &ok).unwrap();
    assert_eq!(
        set.table(Some("shop"), "orders").unwrap().generator,
        "orders"
    );
    assert_eq!(
        set.table(Some("shop"), "events").unwrap().generator,
        "events"
    );
    assert!(set.table(None, "orders").is_none());
}

#[test]
fn lookup_exact_schema_wins_and_names_are_case_sensitive() {
    let text = format!(
        "{GOOD}\n[[table]]\nname = \"orders\"\ncolumn = \"oid\"\ngenerator = \"events\"\n\n[[table]]\nname = \"audit.events\"\ncolumn = \"id\"\ngenerator = \"orders\"\n"
    );
    let set = RuleSet::from_toml(Path::new("x.toml"), &text, SHARDS, &ok).unwrap();
    assert_eq!(set.table(Some("shop"), "orders").unwrap().column, "id");
    assert_eq!(set.table(Some("other"), "orders").unwrap().column, "oid");
    assert_eq!(set.table(None, "orders").unwrap().column, "oid");
    assert_eq!(set.table(Some("audit"), "events").unwrap().column, "id");
    assert_eq!(
        set.table(Some("shop"), "events").unwrap().column,
        "event_id"
    );
    assert!(set.table(Some("shop"), "Orders").is_none());
    assert_eq!(set.table(Some("Shop"), "orders").unwrap().column, "oid");
    assert!(set.table(Some("shop"), "missing").is_none());
    assert_eq!(set.generators().len(), 2);
    assert_eq!(set.tables().len(), 4);
    let e = set.entry(Some("shop"), "orders").unwrap();
    assert_eq!(&**e.quoted_column(), "`id`");
    assert_eq!(&**e.generator(), "orders");
}

#[test]
fn reports_every_problem_with_file_and_line() {
    let a = r#"[[generator]]
name = "orders"
kind = "sequence"

[[generator]]
name = "bad name"
kind = "sequence"

[[table]]
name = "shop.orders"
column = "id"
generator = "orders"
"#;
    let b = r#"[[generator]]
name = "orders"
kind = "snowflake"

[[table]]
name = "shop.orders"
column = "order id"
generator = "nope"

[[table]]
name = "a.b.c"
column = "id"
generator = "orders"
sharding = "random"
"#;
    let (_d, lines) = load_err(&[("a.toml", a), ("b.toml", b)]);
    assert_eq!(
        lines,
        [
            "a.toml:6: generator name `bad name` is not valid: 1 to 64 ASCII letters, digits, `_` or `-`, starting with a letter or `_`",
            "b.toml:2: generator `orders` is already defined at DIR/a.toml:2",
            "b.toml:6: table `shop.orders` already has a rule at DIR/a.toml:10 (idgate fills one column per table)",
            "b.toml:7: table `shop.orders`: column name `order id` contains ' ': use letters, digits, `_` or `$`",
            "b.toml:8: table `shop.orders`: unknown generator `nope` (no [[generator]] with that name in the directory)",
            "b.toml:11: table name `a.b.c` has more than one `.`: write `schema.table` or `table`",
            "b.toml:14: table `a.b.c`: sharding `random` is not one of mod, hash, range",
            "b.toml:14: table `a.b.c`: sharding without shard_key",
        ]
        .iter()
        .map(|l| l.replace("DIR/", &format!("{}/", _d.path().display())).replace(&format!("{}/", _d.path().display()), ""))
        .collect::<Vec<_>>()
    );
}

#[test]
fn syntax_and_unknown_keys_are_located() {
    let (_d, lines) = load_err(&[
        (
            "a.toml",
            "[[generator]]\nname = \"g\"\nkind = \"sequence\"\nbatchh = 3\n",
        ),
        ("b.toml", "[[table]]\nname = \"t\"\ncolumn = \n"),
        ("c.toml", "[[generator]]\nname = \"h\"\nkind = \"zigzag\"\n"),
        ("d.toml", "[[table]]\nname = \"t\"\ngenerator = \"g\"\n"),
    ]);
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert!(
        lines[0].starts_with("a.toml:4: unknown field `batchh`"),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with("b.toml:3: "), "{}", lines[1]);
    assert!(
        lines[2].starts_with("c.toml:3: unknown variant `zigzag`"),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].starts_with("d.toml:1: missing field `column`"),
        "{}",
        lines[3]
    );
}

#[test]
fn generator_hook_problems_are_located() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "g.toml", "# c\n\n[[generator]]\nkind = \"sequence\"\nname = \"small\"\nbatch = 0\n\n[[generator]]\nname = \"fine\"\nkind = \"sequence\"\n");
    let hook = |g: &GeneratorRule| {
        if g.batch == Some(0) {
            Err("batch must be at least 1".to_string())
        } else {
            Ok(())
        }
    };
    let err = RuleSet::load_dir(dir.path(), SHARDS, &hook).unwrap_err();
    assert_eq!(err.problems.len(), 1);
    assert_eq!(
        err.to_string(),
        format!(
            "{}: generator `small`: batch must be at least 1",
            dir.path().join("g.toml:5").display()
        )
    );
}

#[test]
fn empty_and_missing_directories() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "notes.txt", "not a rule file");
    let set = RuleSet::load_dir(dir.path(), SHARDS, &ok).unwrap();
    assert!(set.is_empty());
    let err = RuleSet::load_dir(&dir.path().join("nope"), SHARDS, &ok).unwrap_err();
    assert!(
        err.to_string().contains("cannot read rules directory"),
        "{err}"
    );
}

#[test]
fn check_dir_prints_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "shop.toml", GOOD);
    let mut out = Vec::new();
    check_dir(dir.path(), Some(&names()), &ok, &mut out).unwrap();
    let out = String::from_utf8(out)
        .unwrap()
        .replace(&format!("{}/", dir.path().display()), "");
    let first = out.lines().next().unwrap();
    assert!(
        first.ends_with(": OK, 2 generator(s), 2 table rule(s)"),
        "{out}"
    );
    assert!(
        out.contains("  generator orders (sequence)  shop.toml:3\n"),
        "{out}"
    );
    assert!(
        out.contains("  table shop.orders.id <- orders  shop.toml:12\n"),
        "{out}"
    );
    assert!(
        out.contains("  table events.event_id <- events  (any schema)  shop.toml:17\n"),
        "{out}"
    );
}

const SHARDED: &str = r#"[[generator]]
name = "g"
kind = "sequence"

[[table]]
name = "shop.users"
column = "id"
generator = "g"
shard_key = "id"
sharding = "range"
ranges = [ { to = 1000000, shard = "s0" }, { from = 1000000, to = 5000000, shard = "s1" }, { from = 5000000, shard = "s0" } ]

[[table]]
name = "orders"
column = "id"
generator = "g"
shard_key = "id"
sharding = "mod"

[[table]]
name = "shop.sessions"
column = "id"
generator = "g"
shard_key = "id"
sharding = "hash"
shards = ["s2", "s0"]

[[table]]
name = "countries"
column = "id"
generator = "g"
broadcast = true
shards = ["s1", "s2"]

[[table]]
name = "currencies"
column = "id"
generator = "g"
broadcast = true

[[table]]
name = "shop.plain"
column = "id"
generator = "g"
broadcast = false

[[table]]
name = "shop.audit"
column = "id"
generator = "g"
shard_key = "id"
sharding = "range"

[[table.ranges]]
to = 0
shard = "s2"

[[table.ranges]]
from = 0
shard = "s1"
"#;

#[test]
fn sharded_tables_get_their_placements() {
    let set = RuleSet::from_toml(Path::new("x.toml"), SHARDED, SHARDS, &ok).unwrap();
    assert!(set.is_sharded());
    assert_eq!(set.shard_names(), names());
    let int = |i: i128| KeyValue::Int(i);

    let users = set.entry(Some("shop"), "users").unwrap();
    assert_eq!(users.shard_key(), Some("id"));
    let p = users.placement().unwrap();
    assert_eq!(p.kind(), Sharding::Range);
    assert_eq!(p.shards(), &[0, 1]);
    for (k, shard) in [
        (i128::MIN, 0),
        (999_999, 0),
        (1_000_000, 1),
        (4_999_999, 1),
        (5_000_000, 0),
        (i128::from(u64::MAX), 0),
    ] {
        assert_eq!(p.shard_of(&int(k)), Ok(shard), "users key {k}");
    }

    let orders = set.entry(Some("any"), "orders").unwrap();
    assert_eq!(orders.shard_key(), Some("id"));
    let p = orders.placement().unwrap();
    assert_eq!((p.kind(), p.shards()), (Sharding::Mod, &[0, 1, 2][..]));
    assert_eq!(p.shard_of(&int(5)), Ok(2));
    assert_eq!(p.shard_of(&int(-5)), Ok(1));

    // hash over ["s2", "s0"]: CRC32('abc') % 2 = 891568578 % 2 = 0 -> s2.
    let p = set
        .entry(Some("shop"), "sessions")
        .unwrap()
        .placement()
        .unwrap();
    assert_eq!((p.kind(), p.shards()), (Sharding::Hash, &[0, 2][..]));
    assert_eq!(p.shard_of(&KeyValue::from("abc")), Ok(2));
    assert_eq!(p.shard_of(&KeyValue::Null), Err(PlacementError::Null));

    let countries = set.entry(None, "countries").unwrap();
    assert_eq!(countries.shard_key(), None);
    let p = countries.placement().unwrap();
    assert!(p.is_broadcast());
    assert_eq!((p.shards(), p.read_shard()), (&[1, 2][..], 1));
    let p = set.entry(None, "currencies").unwrap().placement().unwrap();
    assert_eq!((p.shards(), p.read_shard()), (&[0, 1, 2][..], 0));

    let plain = set.entry(Some("shop"), "plain").unwrap();
    assert!(plain.placement().is_none());
    assert_eq!(plain.shard_key(), None);

    // The [[table.ranges]] form is the same as the inline one.
    let p = set
        .entry(Some("shop"), "audit")
        .unwrap()
        .placement()
        .unwrap();
    assert_eq!(p.shard_of(&int(-1)), Ok(2));
    assert_eq!(p.shard_of(&KeyValue::from("0")), Ok(1));

    assert!(set.has_sharded_table_name("users"));
    assert!(set.has_sharded_table_name("countries"));
    assert!(!set.has_sharded_table_name("plain"));
    assert!(!set.has_sharded_table_name("missing"));

    let unsharded = RuleSet::from_toml(Path::new("x.toml"), GOOD, SHARDS, &ok).unwrap();
    assert!(!unsharded.is_sharded());
    assert!(!unsharded.has_sharded_table_name("orders"));
}

#[test]
fn sharding_problems_are_located() {
    let a = r#"[[generator]]
name = "g"
kind = "sequence"

[[table]]
name = "a"
column = "id"
generator = "g"
shard_key = "id"

[[table]]
name = "b"
column = "id"
generator = "g"
shard_key = "user id"
sharding = "hash"
shards = ["s0", "s9", "s0"]

[[table]]
name = "c"
column = "id"
generator = "g"
shard_key = "id"
sharding = "mod"
ranges = [{ shard = "s0" }]

[[table]]
name = "d"
column = "id"
generator = "g"
shard_key = "id"
sharding = "range"
ranges = [
  { to = 100, shard = "s0" },
  { from = 200, to = 300, shard = "s1" },
  { from = 250, shard = "s7" },
]

[[table]]
name = "e"
column = "id"
generator = "g"
shard_key = "id"
sharding = "range"

[[table]]
name = "f"
column = "id"
generator = "g"
broadcast = true
shard_key = "id"
sharding = "mod"

[[table]]
name = "h"
column = "id"
generator = "g"
shards = ["s1"]

[[table]]
name = "i"
column = "id"
generator = "g"
shard_key = "id"
sharding = "range"
shards = []
ranges = []
"#;
    let b = r#"[[table]]
name = "r"
column = "id"
generator = "g"
shard_key = "id"
sharding = "range"
ranges = [
  { from = 0, to = 10, shard = "s0" },
  { from = 10, to = 10, shard = "s1" },
  { to = 30, shard = "s2" },
  { from = 40, shard = "s2" },
  { from = 50, to = 60, shard = "s0" },
]
"#;
    let c = "[[table]]\nname = \"t\"\ncolumn = \"id\"\ngenerator = \"g\"\nshard_key = \"id\"\nsharding = \"range\"\nranges = [\n  { to = 5, shard = \"s0\", weight = 2 },\n]\n";
    let (_d, lines) = load_err(&[("a.toml", a), ("b.toml", b), ("c.toml", c)]);
    let shards = "(the config's shards: s0, s1, s2)";
    let mut want = vec![
        "a.toml:9: table `a`: shard_key without sharding: add sharding = \"mod\", \"hash\" or \"range\" (or remove shard_key: the table then lives on the default shard `s0`)".to_string(),
        "a.toml:15: table `b`: shard_key `user id` contains ' ': use letters, digits, `_` or `$`".into(),
        format!("a.toml:17: table `b`: unknown shard `s9` {shards}"),
        "a.toml:17: table `b`: shard `s0` is listed twice in shards".into(),
        "a.toml:25: table `c`: ranges without sharding = \"range\"".into(),
        "a.toml:35: table `d`: gap before range 2: keys 100 to 199 are in no range (each `from` must equal the previous `to`)".into(),
        "a.toml:36: table `d`: range 3 (from = 250) overlaps the previous range (to = 300): ranges must be in ascending order and each `from` must equal the previous `to`".into(),
        format!("a.toml:36: table `d`: unknown shard `s7` {shards}"),
        "a.toml:44: table `e`: sharding = \"range\" needs ranges = [ { to = ..., shard = \"...\" }, ..., { from = ..., shard = \"...\" } ]".into(),
        "a.toml:51: table `f`: a broadcast table has no shard_key".into(),
        "a.toml:52: table `f`: a broadcast table has no sharding".into(),
        "a.toml:58: table `h`: shards without sharding or broadcast = true (a table without shard_key lives on the default shard)".into(),
        "a.toml:66: table `i`: a range table names its shards in `ranges`, not in `shards`".into(),
        "a.toml:66: table `i`: shards is empty: name at least one shard".into(),
        "a.toml:67: table `i`: ranges is empty: write at least one { shard = \"...\" }".into(),
        "b.toml:8: table `r`: the first range has from = 0: leave `from` out, it starts at the smallest key".into(),
        "b.toml:9: table `r`: range 2 is empty: from = 10 is not below to = 10".into(),
        "b.toml:10: table `r`: range 3 has no `from`: only the first range starts at the smallest key".into(),
        "b.toml:11: table `r`: range 4 has no `to`: only the last range runs to the largest key".into(),
        "b.toml:11: table `r`: gap before range 4: keys 30 to 39 are in no range (each `from` must equal the previous `to`)".into(),
        "b.toml:12: table `r`: the last range has to = 60: leave `to` out, it runs to the largest key".into(),
    ];
    // c.toml: an unknown key inside a range is a syntax problem, located.
    assert_eq!(lines.len(), want.len() + 1, "{lines:#?}");
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("c.toml:8: unknown field `weight`"),
        "{last}"
    );
    want.push(last.clone());
    assert_eq!(lines, want);
}

#[test]
fn check_dir_describes_placements() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "x.toml", SHARDED);
    let mut out = Vec::new();
    check_dir(dir.path(), Some(&names()), &ok, &mut out).unwrap();
    let out = String::from_utf8(out)
        .unwrap()
        .replace(&format!("{}/", dir.path().display()), "");
    let want = [
        "  table shop.users.id <- g  range(id): ..1000000 s0, 1000000..5000000 s1, 5000000.. s0  x.toml:6",
        "  table orders.id <- g  (any schema)  mod(id) over s0, s1, s2  x.toml:14",
        "  table shop.sessions.id <- g  hash(id) over s2, s0  x.toml:21",
        "  table countries.id <- g  (any schema)  broadcast to s1, s2 (reads from s1)  x.toml:29",
        "  table shop.plain.id <- g  x.toml:42",
    ];
    for line in want {
        assert!(out.contains(&format!("{line}\n")), "{line}\n---\n{out}");
    }
    assert!(!out.contains("not checked"), "{out}");
}

#[test]
fn check_dir_without_config_checks_all_but_shard_names() {
    let dir = tempfile::tempdir().unwrap();
    let text = SHARDED.replace("\"s2\"", "\"eu-1\"");
    write(dir.path(), "x.toml", &text);
    // With the config, `eu-1` is unknown.
    let err = check_dir(dir.path(), Some(&names()), &ok, &mut Vec::new()).unwrap_err();
    assert!(err.to_string().contains("unknown shard `eu-1`"), "{err}");
    // Without, it is accepted and the output says names were not checked.
    let mut out = Vec::new();
    let set = check_dir(dir.path(), None, &ok, &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert_eq!(
        out.lines().nth(1),
        Some("  shard names not checked (no --config): give --config idgate.toml to check them against its [[shards]]"),
        "{out}"
    );
    // Placements index the names the rules mention, in order of appearance.
    assert_eq!(set.shard_names(), ["s0", "s1", "eu-1"]);
    assert!(out.contains("hash(id) over eu-1, s0"), "{out}");
    // Everything else is still checked.
    write(
        dir.path(),
        "y.toml",
        "[[table]]\nname = \"z\"\ncolumn = \"id\"\ngenerator = \"g\"\nsharding = \"mod\"\n",
    );
    let err = check_dir(dir.path(), None, &ok, &mut Vec::new()).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("y.toml:5: table `z`: sharding without shard_key"),
        "{err}"
    );
}

#[test]
fn the_shard_key_may_be_another_column_than_the_id() {
    let text = "[[generator]]\nname = \"g\"\nkind = \"sequence\"\n\n\
                [[table]]\nname = \"carts\"\ncolumn = \"id\"\ngenerator = \"g\"\n\
                shard_key = \"user_id\"\nsharding = \"mod\"\n";
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.toml", text);
    let set = RuleSet::load_dir(dir.path(), SHARDS, &ok).unwrap();
    let e = set.entry(Some("shop"), "carts").unwrap();
    assert_eq!(e.shard_key(), Some("user_id"));
    assert_eq!(e.separate_shard_key().map(|k| &**k), Some("user_id"));
    // Named like the id column, in another case: the id column itself.
    let same = text.replace("\"user_id\"", "\"ID\"");
    write(dir.path(), "a.toml", &same);
    let set = RuleSet::load_dir(dir.path(), SHARDS, &ok).unwrap();
    let e = set.entry(Some("shop"), "carts").unwrap();
    assert!(e.separate_shard_key().is_none());
    assert_eq!(e.shard_key_arc().map(|k| &**k), Some("ID"));
    // Still a valid identifier.
    let (_dir, lines) = load_err(&[("a.toml", &text.replace("user_id", "user id"))]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("a.toml:9: table `carts`: "),
        "{lines:?}"
    );
}

#[test]
fn the_hash_key_is_checked_with_its_line() {
    let a = r#"[[generator]]
name = "orders"
kind = "sequence"

[[table]]
name = "shop.a"
column = "id"
generator = "orders"
shard_key = "code"
sharding = "hash"
hash = "crc64"

[[table]]
name = "shop.b"
column = "id"
generator = "orders"
shard_key = "id"
sharding = "mod"
hash = "bytes"
"#;
    let (_d, lines) = load_err(&[("a.toml", a)]);
    assert_eq!(
        lines,
        [
            "a.toml:11: table `shop.a`: hash `crc64` is not one of collation, bytes",
            "a.toml:19: table `shop.b`: hash = \"...\" is for sharding = \"hash\" only",
        ]
    );
}
