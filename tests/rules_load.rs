//! The rule loader: whole-set validation with `file:line: reason` errors, and
//! the lookup the SQL planner uses.

use std::path::Path;

use idgate::rules::{check_dir, GeneratorRule, RuleSet, RulesError};

fn ok(_: &GeneratorRule) -> Result<(), String> {
    Ok(())
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn load_err(files: &[(&str, &str)]) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        write(dir.path(), name, text);
    }
    let err: RulesError = RuleSet::load_dir(dir.path(), &ok).unwrap_err();
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
    let set = RuleSet::load_dir(&dir, &ok).unwrap();
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
    let set = RuleSet::from_toml(Path::new("x.toml"), &text, &ok).unwrap();
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
    let err = RuleSet::load_dir(dir.path(), &hook).unwrap_err();
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
    let set = RuleSet::load_dir(dir.path(), &ok).unwrap();
    assert!(set.is_empty());
    let err = RuleSet::load_dir(&dir.path().join("nope"), &ok).unwrap_err();
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
    check_dir(dir.path(), &ok, &mut out).unwrap();
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
