//! The rules an idgate with `[rules] source = "etcd"` starts with: the
//! version published now, or, when etcd cannot be read, the cache file's
//! copy of the version it applied last (it says so, and catches up once
//! etcd answers). Without either it does not start: serving with no rules
//! would forward INSERTs without their ids.

use std::path::Path;

use super::{cache, Published};
use crate::rules::bundle::Bundle;
use crate::rules::RuleSet;

/// Where start-up found its rules.
#[derive(Debug)]
pub struct Initial {
    /// The rules (empty when nothing is published yet).
    pub rules: RuleSet,
    /// Their published version (0: nothing published yet).
    pub version: u64,
    /// The version itself (`None`: nothing published yet), for the cache.
    pub bundle: Option<Bundle>,
    /// Set when the rules come from the cache file (etcd unreachable): why
    /// and from where, for the log and `SHOW IDGATE STATUS`.
    pub from_cache: Option<String>,
}

/// Reads the rules to start with (see the module doc). `shards`: the
/// config's shard names.
///
/// # Errors
/// Why idgate cannot start: the published version is refused here
/// (`v<N>/<file>:<line>: reason`), or etcd is unreachable and there is no
/// usable cache file.
pub async fn initial(
    published: &Published,
    cache_file: Option<&Path>,
    shards: &[String],
) -> Result<Initial, String> {
    let load = |b: &Bundle| {
        b.rules(shards, &crate::idgen::validate).map_err(|e| {
            format!(
                "published rules version {} cannot be used with this config:\n{e}",
                b.meta.version
            )
        })
    };
    match published.fetch_current().await {
        Ok(Some(b)) => Ok(Initial {
            rules: load(&b)?,
            version: b.meta.version,
            bundle: Some(b),
            from_cache: None,
        }),
        Ok(None) => Ok(Initial {
            rules: RuleSet::default(),
            version: 0,
            bundle: None,
            from_cache: None,
        }),
        Err(e) => {
            let Some(path) = cache_file else {
                return Err(format!(
                    "cannot read the published rules ({e}), and [rules] cache_file is not set: with rules.source = \"etcd\" idgate starts from etcd, or from its cache file while etcd is down"
                ));
            };
            match cache::read(path) {
                Ok(Some(b)) => Ok(Initial {
                    rules: load(&b)?,
                    version: b.meta.version,
                    from_cache: Some(format!(
                        "cache file {} (version {}), etcd being unreachable at start: {e}",
                        path.display(),
                        b.meta.version
                    )),
                    bundle: Some(b),
                }),
                Ok(None) => Err(format!(
                    "cannot read the published rules ({e}), and the cache file {} does not exist (idgate writes it once it has applied a version from etcd)",
                    path.display()
                )),
                Err(c) => Err(format!(
                    "cannot read the published rules ({e}), nor the cache file: {c}"
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idgen::{Fault, MemoryStore, Store};
    use crate::publish::Who;
    use crate::rules::bundle::BundleFile;
    use std::sync::Arc;
    use std::time::Duration;

    const RULE: &str = "[[generator]]\nname = \"g\"\nkind = \"sequence\"\n\n[[table]]\nname = \"s.t\"\ncolumn = \"id\"\ngenerator = \"g\"\n";

    #[tokio::test]
    async fn etcd_first_then_the_cache_file_else_refused() {
        let m = MemoryStore::new();
        let store: Arc<dyn Store> = m.clone();
        let p = Published::new(store, Duration::from_secs(5));
        let shards = vec!["s0".to_string()];
        let dir = tempfile::tempdir().unwrap();
        let cache_path = dir.path().join("cache");
        // Nothing published: empty rules, version 0.
        let i = initial(&p, Some(&cache_path), &shards).await.unwrap();
        assert_eq!((i.version, i.rules.tables().len()), (0, 0));
        let who = Who {
            user: "u".into(),
            host: "h".into(),
        };
        let files = vec![BundleFile {
            name: "a.toml".into(),
            text: RULE.into(),
        }];
        p.publish(None, files, vec![], None, &who, 0).await.unwrap();
        let i = initial(&p, Some(&cache_path), &shards).await.unwrap();
        assert_eq!((i.version, i.rules.tables().len()), (1, 1));
        assert!(i.from_cache.is_none());
        // etcd unreachable, no cache file: refused, saying why.
        m.set_fault(Fault::Fail);
        let e = initial(&p, Some(&cache_path), &shards).await.unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        let e = initial(&p, None, &shards).await.unwrap_err();
        assert!(e.contains("cache_file is not set"), "{e}");
        // With the cache file: from it, saying so.
        cache::write(&cache_path, i.bundle.as_ref().unwrap()).unwrap();
        let c = initial(&p, Some(&cache_path), &shards).await.unwrap();
        assert_eq!((c.version, c.rules.tables().len()), (1, 1));
        assert!(
            c.from_cache
                .as_deref()
                .is_some_and(|f| f.starts_with("cache file ") && f.contains("(version 1)")),
            "{:?}",
            c.from_cache
        );
        // A published version that names a shard this config lacks: refused.
        m.set_fault(Fault::None);
        let sharded = vec![BundleFile {
            name: "a.toml".into(),
            text: format!("{RULE}shard_key = \"id\"\nshards = [\"s0\", \"s9\"]\n"),
        }];
        let cur = p.current().await.unwrap();
        p.publish(cur, sharded, vec![], None, &who, 0)
            .await
            .unwrap();
        let e = initial(&p, Some(&cache_path), &shards).await.unwrap_err();
        assert!(
            e.starts_with("published rules version 2 cannot be used with this config:\nv2/a.toml:"),
            "{e}"
        );
    }
}
