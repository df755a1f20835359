//! `[rules] cache_file`: the rules version an idgate applied last, kept on
//! its own disk so that it can start while etcd is down (from that
//! version, catching up once etcd answers).
//!
//! Written whole to a temporary file beside it (mode 0600: the rules name
//! the schema), synced, then renamed over the old one: a crash leaves the
//! old copy or the new one, never half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::rules::bundle::Bundle;

/// Writes `bundle` to `path` atomically (tmp + fsync + rename, 0600).
///
/// # Errors
/// The file involved and the OS's message.
pub fn write(path: &Path, bundle: &Bundle) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let text = bundle.encode()?;
    let tmp = tmp_path(path);
    let fail = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| fail("cannot create", &tmp, e))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| fail("cannot write", &tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| fail("cannot rename to", path, e))?;
    // The rename itself survives a crash once the directory is synced.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Reads the cached version; `Ok(None)` when there is no cache file.
///
/// # Errors
/// The file and why it cannot be used (unreadable, not a rules version).
pub fn read(path: &Path) -> Result<Option<Bundle>, String> {
    match std::fs::read(path) {
        Ok(raw) => Bundle::decode(&path.display().to_string(), &raw).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::bundle::{BundleFile, Meta};

    #[test]
    fn written_owner_only_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rules-cache");
        assert_eq!(read(&path).unwrap(), None);
        let b = Bundle {
            meta: Meta {
                version: 4,
                published_at: 1,
                user: "u".into(),
                host: "h".into(),
                changes: vec![],
                rollback_of: None,
                nonce: "x".into(),
                reshard_job: None,
            },
            files: vec![BundleFile {
                name: "a.toml".into(),
                text: "# a\n".into(),
            }],
        };
        write(&path, &b).unwrap();
        assert_eq!(read(&path).unwrap(), Some(b.clone()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!tmp_path(&path).exists());
        // A second write replaces the first whole.
        let mut b2 = b;
        b2.meta.version = 5;
        write(&path, &b2).unwrap();
        assert_eq!(read(&path).unwrap().unwrap().meta.version, 5);
        std::fs::write(&path, "garbage = [").unwrap();
        assert!(read(&path).unwrap_err().contains("rules-cache"));
    }
}
