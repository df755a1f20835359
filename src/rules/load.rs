//! Loading a rules directory: parse every `*.toml`, validate the whole set,
//! report every problem as `file:line: reason`.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::error::{Problem, RulesError};
use super::names::{check_generator_name, check_ident, split_table_name};
use super::ruleset::{Origin, RuleSet};
use super::sharding::{describe, placement, RangeLines, ShardingLines};
use super::spec::{GeneratorRule, RuleFile, TableRule};

pub use super::sharding::SHARDING_KINDS;

/// The semantic check of one generator that the allocator supplies (bit
/// widths, batch sizes...). `Err` carries the reason, reported at the
/// generator's `file:line`.
pub type GeneratorCheck<'a> = &'a dyn Fn(&GeneratorRule) -> Result<(), String>;

/// A second parse of the same text that only keeps where things are.
#[derive(Deserialize)]
struct Located {
    #[serde(default)]
    generator: Vec<Spanned<LocatedGenerator>>,
    #[serde(default)]
    table: Vec<Spanned<LocatedTable>>,
}

#[derive(Deserialize)]
struct LocatedGenerator {
    name: Spanned<String>,
}

#[derive(Deserialize)]
struct LocatedTable {
    name: Spanned<String>,
    column: Spanned<String>,
    generator: Spanned<String>,
    shard_key: Option<Spanned<String>>,
    sharding: Option<Spanned<String>>,
    hash: Option<Spanned<String>>,
    shards: Option<Spanned<Vec<Spanned<String>>>>,
    ranges: Option<Spanned<Vec<Spanned<LocatedRange>>>>,
}

#[derive(Deserialize)]
struct LocatedRange {
    from: Option<Spanned<i64>>,
    to: Option<Spanned<i64>>,
    shard: Spanned<String>,
}

/// Maps byte offsets of one file to 1-based line numbers.
struct Lines {
    starts: Vec<usize>,
}

impl Lines {
    fn new(text: &str) -> Lines {
        let mut starts = vec![0];
        starts.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1));
        Lines { starts }
    }
    fn line(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset).max(1)
    }
}

/// Collects problems and parsed entries across files.
#[derive(Default)]
struct Loader {
    problems: Vec<Problem>,
    generators: Vec<(GeneratorRule, Origin)>,
    tables: Vec<(TableRule, Origin, TableLines)>,
    /// The config's shard names, in order (the first is the default shard);
    /// `None`: not known (`rules check` without a config), names unchecked.
    shards: Option<Vec<String>>,
}

/// Lines of the keys of one `[[table]]` entry.
struct TableLines {
    name: usize,
    column: usize,
    generator: usize,
    /// The sharding keys.
    sharding: ShardingLines,
}

impl Loader {
    fn problem(&mut self, file: &Path, line: Option<usize>, reason: impl Into<String>) {
        self.problems.push(Problem {
            file: file.to_path_buf(),
            line,
            reason: reason.into(),
        });
    }

    /// Parses one file; problems are recorded, entries kept for the set checks.
    fn add_file(&mut self, file: &Path, text: &str, check: GeneratorCheck<'_>) {
        let lines = Lines::new(text);
        let parsed: RuleFile = match toml::from_str(text) {
            Ok(f) => f,
            Err(e) => {
                let line = e.span().map(|s| lines.line(s.start));
                self.problem(file, line, e.message().trim_end().to_string());
                return;
            }
        };
        let located: Located = match toml::from_str(text) {
            Ok(l) => l,
            Err(e) => {
                let line = e.span().map(|s| lines.line(s.start));
                self.problem(file, line, e.message().trim_end().to_string());
                return;
            }
        };
        for (g, loc) in parsed.generator.into_iter().zip(located.generator) {
            let line = lines.line(loc.get_ref().name.span().start);
            if let Err(reason) = check_generator_name(&g.name) {
                self.problem(file, Some(line), reason);
            } else if let Err(reason) = check(&g) {
                self.problem(
                    file,
                    Some(line),
                    format!("generator `{}`: {reason}", g.name),
                );
            }
            let origin = Origin {
                file: file.to_path_buf(),
                line,
            };
            self.generators.push((g, origin));
        }
        let mut locs = located.table.into_iter();
        for t in parsed.table {
            let Some(loc) = locs.next() else { break };
            let loc = loc.into_inner();
            let at = |s: &Spanned<String>| lines.line(s.span().start);
            let at_lines = TableLines {
                name: at(&loc.name),
                column: at(&loc.column),
                generator: at(&loc.generator),
                sharding: ShardingLines {
                    name: at(&loc.name),
                    shard_key: loc.shard_key.as_ref().map(at),
                    sharding: loc.sharding.as_ref().map(at),
                    hash: loc.hash.as_ref().map(at),
                    shards: loc.shards.as_ref().map(|s| {
                        (
                            lines.line(s.span().start),
                            s.get_ref().iter().map(at).collect(),
                        )
                    }),
                    ranges: loc.ranges.as_ref().map(|r| {
                        let entries = r
                            .get_ref()
                            .iter()
                            .map(|e| {
                                let v = e.get_ref();
                                RangeLines {
                                    entry: lines.line(e.span().start),
                                    from: v.from.as_ref().map(|f| lines.line(f.span().start)),
                                    to: v.to.as_ref().map(|t| lines.line(t.span().start)),
                                    shard: at(&v.shard),
                                }
                            })
                            .collect();
                        (lines.line(r.span().start), entries)
                    }),
                },
            };
            let origin = Origin {
                file: file.to_path_buf(),
                line: at_lines.name,
            };
            self.tables.push((t, origin, at_lines));
        }
    }

    /// Checks across all files: unique generators, table rules that refer to
    /// existing generators, valid names, one rule per table, sharding keys
    /// and shard names (`sharding.rs`).
    fn finish(mut self) -> Result<RuleSet, RulesError> {
        let mut gen_seen: HashMap<String, Origin> = HashMap::new();
        let mut dup_gens = Vec::new();
        for (g, origin) in &self.generators {
            if let Some(first) = gen_seen.get(&g.name) {
                dup_gens.push((
                    origin.clone(),
                    format!(
                        "generator `{}` is already defined at {}:{}",
                        g.name,
                        first.file.display(),
                        first.line
                    ),
                ));
            } else {
                gen_seen.insert(g.name.clone(), origin.clone());
            }
        }
        for (o, reason) in dup_gens {
            self.problem(&o.file, Some(o.line), reason);
        }

        let mut table_seen: HashMap<String, Origin> = HashMap::new();
        let mut found = Vec::new();
        let mut placements = Vec::with_capacity(self.tables.len());
        let names = self.shard_names();
        for (t, origin, lines) in &self.tables {
            match split_table_name(&t.name) {
                Err(reason) => found.push((origin.file.clone(), Some(lines.name), reason)),
                Ok(_) => {
                    if let Some(first) = table_seen.get(&t.name) {
                        found.push((
                            origin.file.clone(),
                            Some(lines.name),
                            format!(
                                "table `{}` already has a rule at {}:{} (idgate fills one column per table)",
                                t.name,
                                first.file.display(),
                                first.line
                            ),
                        ));
                    } else {
                        table_seen.insert(t.name.clone(), origin.clone());
                    }
                }
            }
            if let Err(reason) = check_ident("column name", &t.column) {
                found.push((
                    origin.file.clone(),
                    Some(lines.column),
                    format!("table `{}`: {reason}", t.name),
                ));
            }
            if !gen_seen.contains_key(&t.generator) {
                found.push((
                    origin.file.clone(),
                    Some(lines.generator),
                    format!(
                        "table `{}`: unknown generator `{}` (no [[generator]] with that name in the directory)",
                        t.name, t.generator
                    ),
                ));
            }
            let (problems, placed) = placement(&names, t, &lines.sharding);
            for (line, reason) in problems {
                found.push((
                    origin.file.clone(),
                    Some(line),
                    format!("table `{}`: {reason}", t.name),
                ));
            }
            placements.push(placed);
        }
        for (file, line, reason) in found {
            self.problem(&file, line, reason);
        }

        if !self.problems.is_empty() {
            let mut problems = self.problems;
            problems.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
            return Err(RulesError { problems });
        }
        let tables = self
            .tables
            .into_iter()
            .zip(placements)
            .map(|((t, origin, _), p)| (t, origin, p))
            .collect();
        Ok(RuleSet::build(self.generators, tables, names))
    }

    /// The shard names placements index into: the config's, or (names
    /// unchecked) every name the rules mention, in order of appearance.
    fn shard_names(&self) -> Vec<String> {
        if let Some(names) = &self.shards {
            return names.clone();
        }
        let mut names: Vec<String> = Vec::new();
        for (t, _, _) in &self.tables {
            let listed = t.shards.iter().flatten();
            let ranged = t.ranges.iter().flatten().map(|r| &r.shard);
            for n in listed.chain(ranged) {
                if !names.contains(n) {
                    names.push(n.clone());
                }
            }
        }
        if names.is_empty() {
            names.push("default".into());
        }
        names
    }
}

impl RuleSet {
    /// Loads every `*.toml` file of `dir` (in name order), and validates the
    /// whole set: TOML syntax and unknown keys, generator and table names,
    /// duplicate generators, unknown generators, two rules for one table, the
    /// sharding keys (`shard_key`/`sharding`/`shards`/`ranges`/`broadcast`,
    /// shard names against `shards`), and `validate_generator` (the
    /// allocator's own checks of each generator).
    ///
    /// `shards` are the config's `[[shards]]` names in config order: the
    /// first is the default shard, and placements index into this list.
    ///
    /// # Errors
    /// [`RulesError`] listing every problem found, each as `file:line: reason`
    /// (or `dir: reason` when the directory cannot be read).
    pub fn load_dir<S: AsRef<str>>(
        dir: &Path,
        shards: &[S],
        validate_generator: GeneratorCheck<'_>,
    ) -> Result<RuleSet, RulesError> {
        Loader::load_dir(dir, Some(names(shards)), validate_generator)
    }

    /// Loads one rule file given as text; `file` names it in errors. Used by
    /// tests and tools that hold rules in memory.
    ///
    /// # Errors
    /// As [`RuleSet::load_dir`].
    pub fn from_toml<S: AsRef<str>>(
        file: &Path,
        text: &str,
        shards: &[S],
        validate_generator: GeneratorCheck<'_>,
    ) -> Result<RuleSet, RulesError> {
        let mut loader = Loader {
            shards: Some(names(shards)),
            ..Loader::default()
        };
        loader.add_file(file, text, validate_generator);
        loader.finish()
    }
}

impl RuleSet {
    /// Loads rule files given as `(name, text)`, as [`RuleSet::load_dir`]
    /// loads a directory's (same checks); each `name` is the file errors
    /// and origins name (a published version names its files
    /// `v<N>/<file>`, see [`super::bundle`]).
    ///
    /// # Errors
    /// As [`RuleSet::load_dir`].
    pub fn load_files<S: AsRef<str>>(
        files: &[(PathBuf, String)],
        shards: &[S],
        validate_generator: GeneratorCheck<'_>,
    ) -> Result<RuleSet, RulesError> {
        let mut loader = Loader {
            shards: Some(names(shards)),
            ..Loader::default()
        };
        for (file, text) in files {
            loader.add_file(file, text, validate_generator);
        }
        loader.finish()
    }
}

/// The `*.toml` files of `dir` with their text, sorted by name: what
/// [`RuleSet::load_dir`] loads (for publishing them as one version).
///
/// # Errors
/// [`RulesError`] naming each file or the directory that cannot be read.
pub fn read_files(dir: &Path) -> Result<Vec<(PathBuf, String)>, RulesError> {
    let mut loader = Loader::default();
    let files = read_dir_files(dir, &mut loader);
    if loader.problems.is_empty() {
        Ok(files)
    } else {
        Err(RulesError {
            problems: loader.problems,
        })
    }
}

fn names<S: AsRef<str>>(shards: &[S]) -> Vec<String> {
    shards.iter().map(|s| s.as_ref().to_string()).collect()
}

impl Loader {
    fn load_dir(
        dir: &Path,
        shards: Option<Vec<String>>,
        validate_generator: GeneratorCheck<'_>,
    ) -> Result<RuleSet, RulesError> {
        let mut loader = Loader {
            shards,
            ..Loader::default()
        };
        for (file, text) in read_dir_files(dir, &mut loader) {
            loader.add_file(&file, &text, validate_generator);
        }
        loader.finish()
    }
}

/// Reads the `*.toml` files of `dir`, sorted by name; unreadable entries are
/// recorded as problems.
fn read_dir_files(dir: &Path, loader: &mut Loader) -> Vec<(PathBuf, String)> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            loader.problem(dir, None, format!("cannot read rules directory: {e}"));
            return Vec::new();
        }
    };
    let mut paths = Vec::new();
    for entry in entries {
        match entry {
            Ok(e) => {
                let path = e.path();
                if path.extension().is_some_and(|x| x == "toml") && path.is_file() {
                    paths.push(path);
                }
            }
            Err(e) => loader.problem(dir, None, format!("cannot list rules directory: {e}")),
        }
    }
    paths.sort();
    let mut files = Vec::new();
    for path in paths {
        match std::fs::read_to_string(&path) {
            Ok(text) => files.push((path, text)),
            Err(e) => loader.problem(&path, None, format!("cannot read: {e}")),
        }
    }
    files
}

/// `idgate rules check DIR`: loads and validates `dir` like the server does,
/// and writes a summary (one line per generator and per table rule) to `out`.
/// The caller prints the error and exits non-zero on `Err`.
///
/// `shards`: the config's shard names (`--config`). `None` checks everything
/// but the shard names (any name is accepted; placements then index the
/// names the rules mention, in order of appearance) and says so in the
/// summary.
///
/// # Errors
/// [`RulesError`] with every problem found; nothing is written to `out` then.
pub fn check_dir(
    dir: &Path,
    shards: Option<&[String]>,
    validate_generator: GeneratorCheck<'_>,
    out: &mut dyn Write,
) -> Result<RuleSet, RulesError> {
    let set = Loader::load_dir(dir, shards.map(names), validate_generator)?;
    let _ = write_summary(&set, dir, shards.is_some(), out);
    Ok(set)
}

fn write_summary(
    set: &RuleSet,
    dir: &Path,
    shards_checked: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{}: OK, {} generator(s), {} table rule(s)",
        dir.display(),
        set.generators().len(),
        set.tables().len()
    )?;
    if !shards_checked {
        writeln!(
            out,
            "  shard names not checked (no --config): give --config idgate.toml to check them against its [[shards]]"
        )?;
    }
    for (g, o) in set.generators().iter().zip(set.generator_origins()) {
        let kind = match g.kind {
            super::GeneratorKind::Sequence => "sequence",
            super::GeneratorKind::Snowflake => "snowflake",
        };
        writeln!(
            out,
            "  generator {} ({kind})  {}:{}",
            g.name,
            o.file.display(),
            o.line
        )?;
    }
    for e in set.entries() {
        let scope = if e.schema().is_none() {
            "  (any schema)"
        } else {
            ""
        };
        let o = e.origin();
        let placed = match e.placement() {
            Some(p) => format!("  {}", describe(set.shard_names(), e.shard_key(), p)),
            None => String::new(),
        };
        writeln!(
            out,
            "  table {}.{} <- {}{scope}{placed}  {}:{}",
            e.rule().name,
            e.column(),
            e.generator(),
            o.file.display(),
            o.line
        )?;
    }
    Ok(())
}
