//! Node's mysql2 as a real client (issue 12): `tests/clients/node/explicit_ids.js`
//! inserts generated and explicit ids with `query` (text) and `execute`
//! (binary; mysql2 binds a JS number as a DOUBLE), upserts and updates the
//! id, once against MariaDB directly (an AUTO_INCREMENT table) and once
//! through idgate (a rule table). Both runs must see the same: every
//! insertId, `LAST_INSERT_ID()` after every step and every stored id, with
//! generated ids compared by which statement or row they belong to (the two
//! sides' counters are not the same numbers); every generated id above
//! every id stored before it, and no statement failing (so no 1062).
//!
//! Node's `mysql` (mysqljs), which knows only mysql_native_password, logs
//! in through idgate's default config (a caching_sha2_password greeting)
//! as it does directly to MariaDB, and reports the ids idgate filled in
//! (`tests/clients/node/native_only.js`).
//!
//! The scripts need node and `tests/clients/node/node_modules`
//! (`npm ci --prefix tests/clients/node`, which `scripts/test.sh` runs).
//! Under `CI=true` a missing one fails the test; otherwise it is SKIPPED.

mod support;

use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use support::drivers::Sides;

const NODE: &str = "/usr/bin/node";
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/node");

/// Whether node and the script's dependencies are there; under `CI=true`
/// their absence is a failure, otherwise the test is skipped.
fn node_ready() -> bool {
    let missing = if !Path::new(NODE).exists() {
        Some(format!("{NODE} not installed"))
    } else if !["mysql2", "mysql"]
        .iter()
        .all(|m| Path::new(DIR).join("node_modules").join(m).is_dir())
    {
        Some(format!(
            "{DIR}/node_modules lacks mysql2 or mysql (run `npm ci --prefix tests/clients/node`)"
        ))
    } else {
        None
    };
    match missing {
        None => true,
        Some(m) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{m}"),
        Some(m) => {
            eprintln!("SKIPPED: {m}");
            false
        }
    }
}

fn text(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("a string: {v}"))
        .to_string()
}

/// One run, with each id replaced by what it names: an id the application
/// wrote stays a number (`lit:N`); a generated one becomes the step that
/// reported it or the row that holds it (`gen:...`).
#[derive(Debug, PartialEq)]
struct Seen {
    /// Per step: name, insertId, affectedRows, LAST_INSERT_ID() after, error.
    steps: Vec<(String, String, u64, String, Option<String>)>,
    /// Stored rows: k and id.
    rows: Vec<(String, String)>,
}

fn normalize(run: &Value) -> Seen {
    let steps = run["steps"].as_array().expect("steps");
    let generated: Vec<String> = run["generated"]
        .as_array()
        .expect("generated")
        .iter()
        .map(text)
        .collect();
    let rows: Vec<(String, String)> = run["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (text(&r[0]), text(&r[1])))
        .collect();
    // What a generated id names: the steps that generated ids report their
    // first generated id; rows with generated ids hold theirs (unless
    // updated since).
    let mut names: HashMap<String, String> = HashMap::new();
    for s in steps.iter().filter(|s| s["generates"] == Value::Bool(true)) {
        if let Some(id) = s["insertId"].as_str() {
            names.insert(id.to_string(), format!("gen:step {}", text(&s["name"])));
        }
    }
    for (k, id) in &rows {
        if generated.contains(k) {
            names
                .entry(id.clone())
                .or_insert_with(|| format!("gen:row {k}"));
        }
    }
    let label = |id: &str| {
        names
            .get(id)
            .cloned()
            .unwrap_or_else(|| format!("lit:{id}"))
    };
    Seen {
        steps: steps
            .iter()
            .map(|s| {
                (
                    text(&s["name"]),
                    s["insertId"].as_str().map(label).unwrap_or_default(),
                    s["affectedRows"].as_u64().unwrap_or(0),
                    label(s["lastInsertId"].as_str().expect("lastInsertId")),
                    s.get("error").map(|e| e.to_string()),
                )
            })
            .collect(),
        rows: rows.iter().map(|(k, id)| (k.clone(), label(id))).collect(),
    }
}

/// Every generated id is above every id stored before its statement.
fn check_generated_above(run: &Value, side: &str) {
    let steps = run["steps"].as_array().unwrap();
    for s in steps.iter().filter(|s| s["generates"] == Value::Bool(true)) {
        let name = text(&s["name"]);
        let before: u64 = text(&s["maxBefore"]).parse().unwrap();
        let id: u64 = text(&s["insertId"]).parse().unwrap();
        assert!(
            id > before,
            "{side}, step {name}: generated {id}, but {before} was stored before"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql2_query_and_execute_see_what_mariadb_reports() {
    let Some(tb) = support::testbed() else { return };
    if !node_ready() {
        return;
    }
    let sides = Sides::new(&tb, "cnode").await;
    let (direct, through) = sides
        .run(&tb, NODE, &format!("{DIR}/explicit_ids.js"))
        .await;

    for (side, run) in [("directly", &direct), ("through idgate", &through)] {
        for s in run["steps"].as_array().unwrap() {
            assert!(s.get("error").is_none(), "{side}: {s}");
        }
        check_generated_above(run, side);
    }
    let want = normalize(&direct);
    let got = normalize(&through);
    for (w, g) in want.steps.iter().zip(&got.steps) {
        assert_eq!(g, w, "step {}: through idgate vs directly", w.0);
    }
    assert_eq!(got.steps.len(), want.steps.len());
    assert_eq!(got.rows, want.rows, "stored ids");
    // The DOUBLE-bound ids really were converted as MariaDB does.
    let row = |k: &str| {
        got.rows
            .iter()
            .find(|r| r.0 == k)
            .map(|r| r.1.clone())
            .unwrap_or_else(|| panic!("row {k}"))
    };
    assert_eq!(row("e4"), "lit:3000", "3000.5 as DOUBLE: half to even");
    assert_eq!(row("e6"), "lit:4002", "4001.5 as DOUBLE: half to even");
    assert_eq!(row("q4"), "lit:1501", "1500.5 as text: half away from zero");

    sides.finish(&tb).await;
}

/// Node's `mysql` knows only mysql_native_password and fails an auth switch
/// to caching_sha2_password (UNSUPPORTED_AUTH_METHOD). Directly to MariaDB
/// it logs in; through idgate's default config (the greeting names
/// caching_sha2_password) it must too, without a switch (a user without
/// `auth` and a plaintext password is checked with the client's plugin),
/// and see the ids idgate filled in as `insertId` and `LAST_INSERT_ID()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysqljs_knowing_only_native_passwords_logs_in_and_sees_its_ids() {
    let Some(tb) = support::testbed() else { return };
    if !node_ready() {
        return;
    }
    let sides = Sides::new(&tb, "cnative").await;
    assert_eq!(
        sides.proxy.shared.config.server.default_auth,
        idgate::config::AuthPlugin::CachingSha2Password,
        "the default config"
    );
    let (direct, through) = sides.run(&tb, NODE, &format!("{DIR}/native_only.js")).await;
    for (side, run) in [("directly", &direct), ("through idgate", &through)] {
        assert_eq!(run["login"], Value::Null, "{side}: {run}");
        let steps = run["steps"].as_array().expect("steps");
        let rows = run["rows"].as_array().expect("rows");
        assert_eq!((steps.len(), rows.len()), (2, 2), "{side}: {run}");
        for (step, row) in steps.iter().zip(rows) {
            let id = text(&step["insertId"]);
            assert_ne!(id, "0", "{side}: an id was generated: {run}");
            assert_eq!(text(&step["lastInsertId"]), id, "{side}: {run}");
            assert_eq!(
                (text(&row[0]), text(&row[1])),
                (text(&step["k"]), id),
                "{side}: {run}"
            );
        }
    }
    assert_eq!(
        sides.proxy.shared.sha2.counts(),
        [0, 0, 0, 0],
        "no caching_sha2_password login: the native token was checked as it came"
    );
    sides.finish(&tb).await;
}
