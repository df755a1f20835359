//! The frontend's layering, checked on its source so a change that breaks
//! it fails CI instead of growing a new cycle.
//!
//! `src/frontend` is in three layers (see its module doc):
//! - the core: `session/`, `txn/` and the files at the top of the folder
//!   (`shared.rs`, `shardkey.rs`, `oks.rs`, ...);
//! - the handlers: `write/`, `route/`, `admin/`, side by side;
//! - the engine: `engine/`, on top.
//!
//! Handlers are `impl Session` methods spread over the folders, so an import
//! check alone does not see them calling each other: this test reads every
//! `impl Session` block, notes where each method is defined, and checks
//! every `self.method(` call and every `use crate::frontend::...` against
//! the rule: a file may use what its own folder defines, and what a lower
//! layer defines; handlers never use each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const HANDLERS: [&str; 3] = ["write", "route", "admin"];

/// The group of a file under `src/frontend`: its folder, or "core" for a
/// file at the top of the folder, `session/` and `txn/`.
fn group(rel: &str) -> &str {
    match rel.split_once('/') {
        Some((dir, _)) if HANDLERS.contains(&dir) || dir == "engine" => dir,
        _ => "core",
    }
}

fn rank(group: &str) -> u8 {
    match group {
        "core" => 0,
        "engine" => 2,
        _ => 1,
    }
}

/// Whether code in group `from` may use what group `to` defines.
fn allowed(from: &str, to: &str) -> bool {
    from == to || rank(to) < rank(from)
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src/frontend")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The text of every `impl Session {` block in `src` (test modules, whose
/// helpers are not part of the layering, stop the scan).
fn session_impls(src: &str) -> Vec<&str> {
    let src = src.split("\n#[cfg(test)]").next().unwrap_or(src);
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("impl Session {") {
        let body = &rest[i + "impl Session {".len()..];
        let mut depth = 1usize;
        let mut end = body.len();
        for (j, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push(&body[..end]);
        rest = &body[end..];
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Method names defined (`fn name`) in `block`.
fn defined(block: &str) -> Vec<&str> {
    block
        .match_indices("fn ")
        .filter(|(i, _)| {
            *i == 0
                || !block.as_bytes()[i - 1].is_ascii_alphanumeric()
                    && block.as_bytes()[i - 1] != b'_'
        })
        .map(|(i, _)| ident_at(&block[i + 3..]))
        .filter(|n| !n.is_empty())
        .collect()
}

/// Method names called as `self.name(` (or `self\n.name(`) in `text`.
fn called(text: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("self") {
        let after = text[i + 4..].trim_start();
        let Some(after) = after.strip_prefix('.') else {
            continue;
        };
        let name = ident_at(after);
        if !name.is_empty() && after[name.len()..].starts_with('(') {
            out.insert(name);
        }
    }
    out
}

#[test]
fn handlers_do_not_reach_into_each_other_and_nothing_calls_up() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/frontend");
    let mut paths = Vec::new();
    files(&root, &mut paths);
    assert!(
        paths.len() > 20,
        "found only {} files in {root:?}",
        paths.len()
    );
    let sources: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).expect("under root");
            (
                rel.to_string_lossy().replace('\\', "/"),
                std::fs::read_to_string(p).expect("read source"),
            )
        })
        .collect();

    // Where each `impl Session` method is defined.
    let mut home: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (rel, src) in &sources {
        for block in session_impls(src) {
            for name in defined(block) {
                home.entry(name).or_default().insert(group(rel));
            }
        }
    }
    assert!(
        home.get("forward").is_some_and(|g| g.contains("core"))
            && home
                .get("query_routed")
                .is_some_and(|g| g.contains("route")),
        "the scan no longer finds the session's methods: {home:?}"
    );

    let mut broken = Vec::new();
    for (rel, src) in &sources {
        let from = group(rel);
        for block in session_impls(src) {
            for name in called(block) {
                for to in home.get(name).into_iter().flatten() {
                    if !allowed(from, to) {
                        broken.push(format!("{rel} ({from}) calls `{name}` of {to}"));
                    }
                }
            }
        }
        let code = src.split("\n#[cfg(test)]").next().unwrap_or(src);
        for (i, _) in code.match_indices("crate::frontend::") {
            let module = ident_at(&code[i + "crate::frontend::".len()..]);
            let to = match module {
                m if HANDLERS.contains(&m) || m == "engine" => m,
                _ => "core",
            };
            if !allowed(from, to) {
                broken.push(format!("{rel} ({from}) uses crate::frontend::{module}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "layering broken (core < write | route | admin < engine):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_rule_itself() {
    assert!(allowed("write", "core"));
    assert!(allowed("engine", "route"));
    assert!(allowed("route", "route"));
    assert!(!allowed("route", "write"));
    assert!(!allowed("core", "admin"));
    assert!(!allowed("write", "engine"));
    assert_eq!(group("session/mod.rs"), "core");
    assert_eq!(group("txn/xa.rs"), "core");
    assert_eq!(group("shardkey.rs"), "core");
    assert_eq!(group("route/scatter.rs"), "route");
    assert_eq!(group("engine/multi.rs"), "engine");
    assert_eq!(
        called("self.a(1); self\n    .b(2); self.c; x.self_d(3)"),
        ["a", "b"].into_iter().collect()
    );
    assert_eq!(
        defined("fn a() {} pub async fn b_2(&self) {} fn_c"),
        ["a", "b_2"]
    );
}
