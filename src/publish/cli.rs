//! The `idgate rules` commands that talk to the store: `check
//! --against-store`, `push`, `history`, `show`, `rollback`. Output goes to
//! `out`; errors are returned for the caller to print (exit status 1).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{check_change, push, utc, Published, PushError, Who};
use crate::config::{Config, RulesSource, StoreKind};
use crate::idgen::{Allocator, Store};
use crate::rules::RuleSet;

/// One command.
#[derive(Debug, Clone)]
pub enum Op {
    /// `rules check DIR --against-store`.
    Check(PathBuf),
    /// `rules push DIR`.
    Push(PathBuf),
    /// `rules history`.
    History,
    /// `rules show N`.
    Show(u64),
    /// `rules rollback N`.
    Rollback(u64),
}

/// Runs `op` with the store of `cfg`'s `[allocator]`; `who` publishes.
///
/// # Errors
/// What went wrong, for the user (file:line problems one per line).
pub async fn run(cfg: &Config, op: Op, who: &Who, out: &mut dyn Write) -> Result<(), String> {
    let shards: Vec<String> = cfg.shards.iter().map(|s| s.name.clone()).collect();
    let timeout = Duration::from_millis(cfg.allocator.store_timeout_ms);
    if !matches!(op, Op::Check(_)) && cfg.allocator.store != StoreKind::Etcd {
        return Err("rules are published in etcd: the config needs [allocator] store = \"etcd\" (its etcd_endpoints and etcd_prefix say where)".into());
    }
    let store: Arc<dyn Store> = Allocator::open_store(&cfg.allocator)
        .await
        .map_err(|e| e.to_string())?;
    let published = Published::new(store.clone(), timeout);
    let source = cfg.rules.as_ref().map(|r| r.source);
    let w = |out: &mut dyn Write, s: String| {
        let _ = writeln!(out, "{s}");
    };
    match op {
        Op::Check(dir) => {
            let files = crate::rules::read_files(&dir).map_err(|e| e.to_string())?;
            let new = RuleSet::load_files(&files, &shards, &crate::idgen::validate)
                .map_err(|e| e.to_string())?;
            let (old, against) = match (source, &cfg.rules) {
                (Some(RulesSource::Etcd), _) => match published.fetch_current().await? {
                    Some(b) => (
                        b.rules(&shards, &crate::idgen::validate)
                            .map_err(|e| e.to_string())?,
                        format!("published version {}", b.meta.version),
                    ),
                    None => (RuleSet::default(), "nothing published yet".into()),
                },
                (_, Some(r)) => (
                    RuleSet::load_dir(&r.dir, &shards, &crate::idgen::validate)
                        .map_err(|e| format!("the rules in force do not load:\n{e}"))?,
                    format!("rules.dir {}", r.dir.display()),
                ),
                (_, None) => (RuleSet::default(), "no [rules] in the config".into()),
            };
            let diff = check_change(&store, &old, &new, timeout).await?;
            w(
                out,
                format!(
                    "{}: OK as a change of {against} ({} generator(s), {} table rule(s))",
                    dir.display(),
                    new.generators().len(),
                    new.tables().len()
                ),
            );
            let lines = super::change_lines(&diff);
            if lines.is_empty() {
                w(out, "  no change".into());
            }
            for l in lines {
                w(out, format!("  {l}"));
            }
            Ok(())
        }
        Op::Push(dir) => {
            let files = crate::rules::read_files(&dir).map_err(|e| e.to_string())?;
            let published = publish_files(&published, &files, &shards, None, who, out).await?;
            if published && source != Some(RulesSource::Etcd) {
                w(out, "note: this config has rules.source = \"dir\": idgates with it read rules.dir, not the published versions".into());
            }
            Ok(())
        }
        Op::Rollback(n) => {
            let b = published
                .fetch(n)
                .await?
                .ok_or_else(|| format!("there is no rules version {n}"))?;
            let files: Vec<(PathBuf, String)> = b
                .files
                .iter()
                .map(|f| (b.path_of(f), f.text.clone()))
                .collect();
            publish_files(&published, &files, &shards, Some(n), who, out).await?;
            Ok(())
        }
        Op::History => {
            let current = published.current().await?.map(|c| c.0);
            let h = published.history().await?;
            if h.is_empty() {
                w(out, "no rules version published yet".into());
            }
            for m in h {
                let mark = if Some(m.version) == current { "*" } else { " " };
                w(
                    out,
                    format!(
                        "{mark}{:>5}  {} UTC  {}@{}  {}",
                        m.version,
                        utc(m.published_at),
                        m.user,
                        m.host,
                        m.summary()
                    ),
                );
            }
            Ok(())
        }
        Op::Show(n) => {
            let b = published
                .fetch(n)
                .await?
                .ok_or_else(|| format!("there is no rules version {n}"))?;
            w(
                out,
                format!(
                    "# rules version {}, published {} UTC by {}@{}: {}",
                    n,
                    utc(b.meta.published_at),
                    b.meta.user,
                    b.meta.host,
                    b.meta.summary()
                ),
            );
            for f in &b.files {
                w(out, format!("# ---- {} ----", f.name));
                let _ = out.write_all(f.text.as_bytes());
                if !f.text.ends_with('\n') && !f.text.is_empty() {
                    w(out, String::new());
                }
            }
            Ok(())
        }
    }
}

/// Publishes `files` (a push, or a rollback to `rollback_of`) and says
/// what happened; `false`: nothing to publish (the same rules are in force).
async fn publish_files(
    published: &Published,
    files: &[(PathBuf, String)],
    shards: &[String],
    rollback_of: Option<u64>,
    who: &Who,
    out: &mut dyn Write,
) -> Result<bool, String> {
    let (line, done) = match push(published, files, shards, rollback_of, who, now_unix()).await {
        Ok(meta) => (
            format!(
                "published rules version {} ({})",
                meta.version,
                meta.summary()
            ),
            true,
        ),
        Err(PushError::Unchanged(n)) => (
            format!("nothing to publish: version {n} in force has the same rules"),
            false,
        ),
        Err(e) => return Err(refusal(e)),
    };
    let _ = writeln!(out, "{line}");
    Ok(done)
}

fn refusal(e: PushError) -> String {
    match e {
        PushError::Refused(why) => format!("refused, nothing was published:\n{why}"),
        other => other.to_string(),
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
