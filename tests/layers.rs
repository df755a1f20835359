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
//!
//! A second check: no import cycle between the files of `src/frontend`,
//! `src/sql` and `src/shard` (dependencies point one way). A file depends
//! on another when its code (tests and comments left out) names something
//! the other defines: a `crate::...` or `super::...` path, an item of a
//! `use ...::{...}` group, or, in a `mod.rs`, a path through one of its
//! child modules. A name a `mod.rs` only re-exports (`pub use
//! child::Item`) counts as the child's, so a facade does not look like a
//! circle. Every strongly connected set of files is named.

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
        .expect("read the source folder")
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

// ---- No import cycles ----

type Module = Vec<String>;

/// The module a file under `src` defines (`sql/route/mod.rs` -> sql::route).
fn module_of(rel: &str) -> Module {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// The code of a file: up to its test module, without comments.
fn code(src: &str) -> String {
    let src = src.split("\n#[cfg(test)]").next().unwrap_or(src);
    src.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The paths written at `s` (after a `crate::`, `super::`, ... prefix):
/// `a::b::C`, or a group `a::{b, c::D}` expanded into one path per item.
fn paths_at(s: &str) -> Vec<Vec<String>> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut head = Vec::new();
    loop {
        let start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        if i == start {
            if b.get(i) == Some(&b'{') {
                let mut depth = 0usize;
                let mut end = i;
                for (j, &c) in b.iter().enumerate().skip(i) {
                    match c {
                        b'{' => depth += 1,
                        b'}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = j;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let inner = &s[i + 1..end];
                let mut out = Vec::new();
                for item in split_top(inner) {
                    let item = item.trim();
                    if item.is_empty() || item == "self" {
                        out.push(head.clone());
                        continue;
                    }
                    for mut p in paths_at(item) {
                        let mut full = head.clone();
                        full.append(&mut p);
                        out.push(full);
                    }
                }
                return out;
            }
            return vec![head];
        }
        head.push(s[start..i].to_string());
        if s[i..].starts_with("::") {
            i += 2;
        } else {
            return vec![head];
        }
    }
}

/// Splits a `use` group's inside at its top-level commas.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut last = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[last..i]);
                last = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[last..]);
    out
}

/// Every `prefix` in `code` at the start of a path (not inside another
/// path or identifier), with the text after it.
fn after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    code.match_indices(prefix)
        .filter(|(i, _)| {
            let before = &code.as_bytes()[..*i];
            !before
                .last()
                .is_some_and(|&c| is_ident(c) || c == b':' || c == b'$')
        })
        .map(|(i, _)| &code[i + prefix.len()..])
        .collect()
}

struct Crate {
    modules: BTreeSet<Module>,
    /// (module, name it re-exports) -> the module that defines it.
    reexports: BTreeMap<(Module, String), Module>,
}

impl Crate {
    /// The longest module prefix of `path`, then through re-exports.
    fn resolve(&self, path: &[String]) -> Option<Module> {
        let n = (1..=path.len())
            .rev()
            .find(|&n| self.modules.contains(&path[..n]))?;
        let mut m = path[..n].to_vec();
        let mut rest = &path[n..];
        while let Some(name) = rest.first() {
            match self.reexports.get(&(m.clone(), name.clone())) {
                Some(t) if *t != m => {
                    m = t.clone();
                    rest = &rest[1..];
                }
                _ => break,
            }
        }
        Some(m)
    }

    /// Absolute paths named in `code` of module `m`: `crate::`, `super::`.
    fn named(&self, m: &Module, code: &str) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for rest in after(code, "crate::") {
            out.extend(paths_at(rest));
        }
        for rest in after(code, "super::") {
            let mut n = 1;
            let mut r = rest;
            while let Some(t) = r.strip_prefix("super::") {
                n += 1;
                r = t;
            }
            let base = &m[..m.len().saturating_sub(n)];
            for p in paths_at(r) {
                let mut full = base.to_vec();
                full.extend(p);
                out.push(full);
            }
        }
        out
    }
}

/// `pub use` / `pub(crate) use` statements of a file: (their text, where).
fn reexport_stmts(code: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for prefix in ["pub use ", "pub(crate) use ", "pub(super) use "] {
        for (i, _) in code.match_indices(prefix) {
            let end = code[i..].find(';').map_or(code.len(), |e| i + e);
            out.push((i, end));
        }
    }
    out
}

fn build(root: &Path) -> (Crate, BTreeMap<Module, String>) {
    let mut paths = Vec::new();
    files(root, &mut paths);
    let mut sources = BTreeMap::new();
    for p in &paths {
        let rel = p.strip_prefix(root).expect("under src");
        let rel = rel.to_string_lossy().replace('\\', "/");
        let src = std::fs::read_to_string(p).expect("read source");
        sources.insert(module_of(&rel), code(&src));
    }
    let mut krate = Crate {
        modules: sources.keys().cloned().collect(),
        reexports: BTreeMap::new(),
    };
    // Re-exports, resolved in a few rounds (a re-export of a re-export).
    for _ in 0..3 {
        for (m, code) in &sources {
            for (s, e) in reexport_stmts(code) {
                let stmt = &code[s..e];
                let body = stmt.split_once("use ").map_or("", |x| x.1).trim();
                let (base, body): (Module, &str) = if let Some(r) = body.strip_prefix("crate::") {
                    (Vec::new(), r)
                } else if let Some(r) = body.strip_prefix("self::") {
                    (m.clone(), r)
                } else if body.starts_with("super::") {
                    continue;
                } else {
                    (m.clone(), body)
                };
                for p in paths_at(body) {
                    let Some(name) = p.last() else { continue };
                    let alias = stmt
                        .split(" as ")
                        .nth(1)
                        .map(|a| a.trim().trim_end_matches(['}', ',']).trim().to_string())
                        .filter(|_| !stmt.contains('{'))
                        .unwrap_or_else(|| name.clone());
                    let mut full = base.clone();
                    full.extend(p.iter().cloned());
                    if let Some(t) = krate.resolve(&full) {
                        if t != *m {
                            krate.reexports.insert((m.clone(), alias), t);
                        }
                    }
                }
            }
        }
    }
    (krate, sources)
}

fn edges(krate: &Crate, sources: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, code) in sources {
        let mut to = BTreeSet::new();
        for p in krate.named(m, code) {
            if let Some(t) = krate.resolve(&p) {
                to.insert(t);
            }
        }
        // A parent naming its children (re-exports aside).
        let mut own = code.clone();
        for (s, e) in reexport_stmts(code).into_iter().rev() {
            own.replace_range(s..e, "");
        }
        for child in krate
            .modules
            .iter()
            .filter(|c| c.len() == m.len() + 1 && c.starts_with(m))
        {
            let name = format!("{}::", child[m.len()]);
            if !after(&own, &name).is_empty() {
                for p in paths_at(&own[own.find(&name).unwrap_or(0)..]) {
                    let mut full = m.clone();
                    full.extend(p);
                    if let Some(t) = krate.resolve(&full) {
                        to.insert(t);
                    }
                }
                to.insert(child.clone());
            }
        }
        to.remove(m);
        out.insert(m.clone(), to);
    }
    out
}

/// Strongly connected sets of more than one module within `nodes`.
fn cycles(
    graph: &BTreeMap<Module, BTreeSet<Module>>,
    nodes: &BTreeSet<Module>,
) -> Vec<Vec<Module>> {
    struct T<'a> {
        graph: &'a BTreeMap<Module, BTreeSet<Module>>,
        nodes: &'a BTreeSet<Module>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Module) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.graph.get(v).into_iter().flatten() {
            if !t.nodes.contains(w) {
                continue;
            }
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        graph,
        nodes,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in nodes {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_import_cycle_in_frontend_sql_or_shard() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (krate, sources) = build(&root);
    let graph = edges(&krate, &sources);
    // The scan sees real dependencies (it would pass vacuously otherwise).
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Module>();
    assert!(
        graph[&m("sql::plan")].contains(&m("sql::lexer"))
            && graph[&m("frontend::live")].contains(&m("frontend::shared")),
        "the scan no longer finds known dependencies"
    );
    let mut found = Vec::new();
    for top in ["frontend", "sql", "shard"] {
        let nodes: BTreeSet<Module> = krate
            .modules
            .iter()
            .filter(|x| x.first().is_some_and(|f| f == top))
            .cloned()
            .collect();
        assert!(nodes.len() > 5, "found only {nodes:?} under src/{top}");
        for comp in cycles(&graph, &nodes) {
            let names: Vec<String> = comp.iter().map(|c| c.join("::")).collect();
            let detail: Vec<String> = comp
                .iter()
                .map(|c| {
                    let to: Vec<String> = graph[c]
                        .iter()
                        .filter(|t| comp.contains(t))
                        .map(|t| t.join("::"))
                        .collect();
                    format!("  {} -> {}", c.join("::"), to.join(", "))
                })
                .collect();
            found.push(format!("{}:\n{}", names.join(", "), detail.join("\n")));
        }
    }
    assert!(
        found.is_empty(),
        "import cycles (dependencies must point one way):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_itself() {
    let p = paths_at("a::{b, c::{D, e::F}, self}::rest");
    assert_eq!(
        p,
        vec![
            vec!["a", "b"],
            vec!["a", "c", "D"],
            vec!["a", "c", "e", "F"],
            vec!["a"],
        ]
        .into_iter()
        .map(|v| v.into_iter().map(String::from).collect::<Vec<_>>())
        .collect::<Vec<_>>()
    );
    assert_eq!(module_of("sql/route/mod.rs"), vec!["sql", "route"]);
    assert_eq!(code("a // b\nc\n#[cfg(test)]\nd"), "a \nc");
    assert_eq!(after("x::crate::a crate::b", "crate::"), vec!["b"]);
}
