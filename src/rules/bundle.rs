//! A published rules version (`idgate rules push`): the rule files of a
//! directory, kept as their text, with who published them, when, and what
//! changed. Pure: the store it lives in is `crate::publish`'s.
//!
//! Serialized as TOML (readable with `etcdctl get`): the files stay text,
//! so the loader reports problems in them as `v<N>/<file>:<line>`, the
//! line of the file the DBA wrote.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::RulesError;
use super::load::GeneratorCheck;
use super::ruleset::RuleSet;

/// Who published a version, when, and what it changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    /// The version number (1, 2, ...).
    pub version: u64,
    /// When it was published, Unix seconds.
    pub published_at: u64,
    /// The OS user who published it.
    pub user: String,
    /// The host it was published from.
    pub host: String,
    /// What changed from the version before, one line per change
    /// (`table added shop.notes`...); empty for the first version.
    #[serde(default)]
    pub changes: Vec<String>,
    /// The older version this one publishes again (`idgate rules rollback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u64>,
    /// Random, unique to one push: tells a publisher whose reply was lost
    /// whether its own transaction is the one that was applied.
    pub nonce: String,
    /// The resharding job (its `reshard::protocol::Job::id`) whose cutover
    /// published this version: the one kind of version allowed to change
    /// a table's placement (`shards`, `sharding`, `shard_key`) while idgate
    /// runs, because the job has moved the rows before publishing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reshard_job: Option<String>,
}

impl Meta {
    /// The changes in one line, for `rules history`.
    pub fn summary(&self) -> String {
        let mut s = if self.changes.is_empty() {
            "no change".to_string()
        } else {
            self.changes.join("; ")
        };
        if let Some(v) = self.rollback_of {
            s = format!("rollback to version {v}: {s}");
        }
        s
    }
}

/// One rule file of a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleFile {
    /// Its name in the directory it was pushed from (`orders.toml`).
    pub name: String,
    /// Its text, as written.
    pub text: String,
}

/// A published rules version: its metadata and its files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// Who, when, what.
    pub meta: Meta,
    /// The files, sorted by name.
    #[serde(default, rename = "file")]
    pub files: Vec<BundleFile>,
}

impl Bundle {
    /// The files of a directory as [`super::load::read_files`] read them,
    /// by their file name.
    pub fn files_of(read: &[(PathBuf, String)]) -> Vec<BundleFile> {
        read.iter()
            .map(|(p, text)| BundleFile {
                name: p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.display().to_string()),
                text: text.clone(),
            })
            .collect()
    }

    /// The text stored for this version.
    ///
    /// # Errors
    /// Only if TOML cannot represent a value (it can represent every
    /// string, so never in practice); the message says so.
    pub fn encode(&self) -> Result<String, String> {
        toml::to_string(self).map_err(|e| format!("cannot serialize rules version: {e}"))
    }

    /// Reads a version stored at `key` (named in the error).
    ///
    /// # Errors
    /// The key and why its value is not a rules version.
    pub fn decode(key: &str, bytes: &[u8]) -> Result<Bundle, String> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| format!("{key}: not a rules version (not UTF-8: {e})"))?;
        toml::from_str(text).map_err(|e| format!("{key}: not a rules version: {}", e.message()))
    }

    /// The path a file of this version has in errors and origins:
    /// `v<N>/<name>`.
    pub fn path_of(&self, file: &BundleFile) -> PathBuf {
        Path::new(&format!("v{}", self.meta.version)).join(&file.name)
    }

    /// The rules of this version, loaded and checked as a directory is
    /// ([`RuleSet::load_files`]); errors name `v<N>/<file>:<line>`.
    ///
    /// # Errors
    /// [`RulesError`] with every problem.
    pub fn rules<S: AsRef<str>>(
        &self,
        shards: &[S],
        validate_generator: GeneratorCheck<'_>,
    ) -> Result<RuleSet, RulesError> {
        let files: Vec<(PathBuf, String)> = self
            .files
            .iter()
            .map(|f| (self.path_of(f), f.text.clone()))
            .collect();
        RuleSet::load_files(&files, shards, validate_generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(_: &crate::rules::GeneratorRule) -> Result<(), String> {
        Ok(())
    }

    fn bundle(files: Vec<(&str, &str)>) -> Bundle {
        Bundle {
            meta: Meta {
                version: 7,
                published_at: 1_790_000_000,
                user: "dba".into(),
                host: "db1".into(),
                changes: vec!["table added shop.notes".into()],
                rollback_of: None,
                nonce: "n1".into(),
                reshard_job: None,
            },
            files: files
                .into_iter()
                .map(|(n, t)| BundleFile {
                    name: n.into(),
                    text: t.into(),
                })
                .collect(),
        }
    }

    /// Text with every kind of TOML quoting survives a round trip byte for
    /// byte, so line numbers of the published file are the DBA's.
    #[test]
    fn round_trip_keeps_the_text_exact() {
        let tricky = "# a comment with ''' and \"\"\" and \\ and a tab\t\n[[generator]]\nname = \"orders\"\nkind = \"sequence\"\r\n\n\n";
        let b = bundle(vec![("a.toml", tricky), ("b.toml", "")]);
        let text = b.encode().unwrap();
        let back = Bundle::decode("k", text.as_bytes()).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.files[0].text, tricky);
        let mut rb = b.clone();
        rb.meta.rollback_of = Some(3);
        let back = Bundle::decode("k", rb.encode().unwrap().as_bytes()).unwrap();
        assert_eq!(back.meta.rollback_of, Some(3));
        assert_eq!(
            back.meta.summary(),
            "rollback to version 3: table added shop.notes"
        );
    }

    #[test]
    fn decode_names_the_key() {
        let e = Bundle::decode("/p/rules/v/3", b"meta = 1").unwrap_err();
        assert!(e.starts_with("/p/rules/v/3: not a rules version"), "{e}");
        let e = Bundle::decode("/p/rules/v/3", &[0xff, 0xfe]).unwrap_err();
        assert!(e.contains("not UTF-8"), "{e}");
    }

    /// A problem in a published file is reported at `v<N>/<file>:<line>`,
    /// the line the DBA wrote it on.
    #[test]
    fn errors_name_the_version_file_and_line() {
        let b = bundle(vec![
            (
                "a.toml",
                "[[generator]]\nname = \"orders\"\nkind = \"sequence\"\n",
            ),
            (
                "b.toml",
                "\n\n[[table]]\nname = \"shop.orders\"\ncolumn = \"id\"\ngenerator = \"nope\"\n",
            ),
        ]);
        let e = b.rules(&["s0"], &ok).unwrap_err().to_string();
        assert!(
            e.starts_with("v7/b.toml:6: table `shop.orders`: unknown generator"),
            "{e}"
        );
        let good = bundle(vec![(
            "a.toml",
            "[[generator]]\nname = \"orders\"\nkind = \"sequence\"\n\n[[table]]\nname = \"shop.orders\"\ncolumn = \"id\"\ngenerator = \"orders\"\n",
        )]);
        let set = good.rules(&["s0"], &ok).unwrap();
        assert_eq!(set.entries()[0].origin().file, Path::new("v7/a.toml"));
        assert_eq!(set.entries()[0].origin().line, 6);
    }
}
