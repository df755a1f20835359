//! The embedded store: one local state file, for a single idgate process.
//!
//! Every write rewrites the whole (small) file crash-safely: write a temp file,
//! fsync it, rename it over the state file, fsync the directory. An exclusive
//! `flock` on `<path>.lock` makes a second process using the same state file
//! fail at open instead of sharing it. Versions for compare-and-swap live in
//! memory: the lock makes this process the only writer.
//!
//! Format, one entry per line: `key value` (decimal). Lines starting with `#`
//! are comments. An optional `node_id N` line sets the snowflake node id of
//! this process (default 0), for running several single-process idgates with
//! distinct node ids.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{LeaseState, NodeLease, Store, StoreError, StoreFuture, Versioned};

/// Key of the optional node id line.
const NODE_ID_KEY: &str = "node_id";

/// The in-memory copy of the state file.
#[derive(Debug, Default)]
struct State {
    /// Counters by key.
    values: BTreeMap<String, Versioned>,
    /// Last version handed out.
    revision: u64,
    /// Generation of the last snapshot handed to the writer.
    generation: u64,
}

/// Serializes file writes and drops stale snapshots (a write that timed out
/// may still be running when the next one starts).
#[derive(Debug, Default)]
struct Writer {
    /// Generation of the last snapshot written to disk.
    written: u64,
}

/// The state-file store.
#[derive(Debug)]
pub struct FileStore {
    /// The state file.
    path: PathBuf,
    /// Held open for the store's lifetime: the `flock` lives as long as it.
    _lock: File,
    /// The state; an async mutex because it is held across the file write.
    state: tokio::sync::Mutex<State>,
    /// See [`Writer`].
    writer: Arc<std::sync::Mutex<Writer>>,
    /// Bound on one write (a hung disk must not hang id requests forever).
    timeout: Duration,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Io {
        path: path.display().to_string(),
        detail: e.to_string(),
    }
}

impl FileStore {
    /// Opens (or creates) the state file and takes its lock.
    ///
    /// Errors: [`StoreError::Locked`] if another process holds it,
    /// [`StoreError::Corrupt`] (with `file:line`) for a line idgate did not
    /// write, [`StoreError::Io`] otherwise.
    pub fn open(path: &Path, timeout: Duration) -> Result<FileStore, StoreError> {
        let mut lock_path = path.as_os_str().to_owned();
        lock_path.push(".lock");
        let lock_path = PathBuf::from(lock_path);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_err(&lock_path, e))?;
        // SAFETY: flock on a file descriptor we own and keep open; no memory
        // is shared with the call.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return Err(if err.kind() == std::io::ErrorKind::WouldBlock {
                StoreError::Locked(path.display().to_string())
            } else {
                io_err(&lock_path, err)
            });
        }
        let mut state = State::default();
        match std::fs::read_to_string(path) {
            Ok(text) => {
                for (i, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    let corrupt = |detail: &str| StoreError::Corrupt {
                        key: format!("{}:{}", path.display(), i + 1),
                        detail: detail.to_string(),
                    };
                    let mut parts = line.split_whitespace();
                    let (Some(key), Some(value), None) = (parts.next(), parts.next(), parts.next())
                    else {
                        return Err(corrupt("expected `key value`"));
                    };
                    let value: u64 = value
                        .parse()
                        .map_err(|_| corrupt(&format!("value {value:?} is not a decimal u64")))?;
                    state.revision += 1;
                    let version = state.revision;
                    if state
                        .values
                        .insert(key.to_string(), Versioned { value, version })
                        .is_some()
                    {
                        return Err(corrupt(&format!("key {key:?} appears twice")));
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(path, e)),
        }
        Ok(FileStore {
            path: path.to_path_buf(),
            _lock: lock,
            state: tokio::sync::Mutex::new(state),
            writer: Arc::new(std::sync::Mutex::new(Writer::default())),
            timeout,
        })
    }

    /// Writes a snapshot of `state` durably.
    async fn persist(&self, state: &mut State) -> Result<(), StoreError> {
        state.generation += 1;
        let generation = state.generation;
        let mut text = String::from(
            "# idgate allocator state: written by idgate; edit only while it is stopped\n",
        );
        for (k, v) in &state.values {
            text.push_str(&format!("{k} {}\n", v.value));
        }
        let path = self.path.clone();
        let writer = self.writer.clone();
        let job =
            tokio::task::spawn_blocking(move || write_snapshot(&path, &writer, generation, &text));
        match tokio::time::timeout(self.timeout, job).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(io_err(&self.path, join)),
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }
}

fn write_snapshot(
    path: &Path,
    writer: &std::sync::Mutex<Writer>,
    generation: u64,
    text: &str,
) -> Result<(), StoreError> {
    let mut w = writer
        .lock()
        .map_err(|_| io_err(path, "writer lock poisoned"))?;
    if w.written >= generation {
        return Ok(()); // a newer snapshot is already on disk
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
    f.write_all(text.as_bytes()).map_err(|e| io_err(&tmp, e))?;
    f.sync_all().map_err(|e| io_err(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(&dir, e))?;
    w.written = generation;
    Ok(())
}

impl FileStore {
    /// The node id this file assigns its process (`NODE_ID_KEY`, default 0).
    async fn own_node(&self) -> u64 {
        self.state
            .lock()
            .await
            .values
            .get(NODE_ID_KEY)
            .map(|v| v.value)
            .unwrap_or(0)
    }
}

impl Store for FileStore {
    fn load<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Versioned>> {
        Box::pin(async move { Ok(self.state.lock().await.values.get(key).copied()) })
    }

    fn delete<'a>(&'a self, key: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut state = self.state.lock().await;
            let Some(previous) = state.values.remove(key) else {
                return Ok(());
            };
            if let Err(e) = self.persist(&mut state).await {
                state.values.insert(key.to_string(), previous);
                return Err(e);
            }
            Ok(())
        })
    }

    fn compare_and_set<'a>(
        &'a self,
        key: &'a str,
        expected: Option<u64>,
        value: u64,
    ) -> StoreFuture<'a, Option<u64>> {
        Box::pin(async move {
            let mut state = self.state.lock().await;
            let previous = state.values.get(key).copied();
            if previous.map(|v| v.version) != expected {
                return Ok(None);
            }
            state.revision += 1;
            let version = state.revision;
            state
                .values
                .insert(key.to_string(), Versioned { value, version });
            match self.persist(&mut state).await {
                Ok(()) => Ok(Some(version)),
                Err(e) => {
                    // Not durable: forget it. (If the write still lands later,
                    // the file holds a higher value, which only skips ids.)
                    match previous {
                        Some(p) => state.values.insert(key.to_string(), p),
                        None => state.values.remove(key),
                    };
                    Err(e)
                }
            }
        })
    }

    fn node_held<'a>(&'a self, _scope: &'a str, node: u64) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            // One process per file: the only node held is this process's.
            Ok(node == self.own_node().await)
        })
    }

    fn acquire_node<'a>(&'a self, _scope: &'a str, count: u64) -> StoreFuture<'a, NodeLease> {
        Box::pin(async move {
            let node = self.own_node().await;
            if node >= count {
                return Err(StoreError::Corrupt {
                    key: format!("{} {NODE_ID_KEY}", self.path.display()),
                    detail: format!("node id {node} does not fit the layout ({count} node ids)"),
                });
            }
            // The file lock makes this process the only user of the file,
            // so the lease never expires.
            Ok(NodeLease {
                node,
                handle: 0,
                state: LeaseState::new_valid(),
            })
        })
    }

    fn release_node<'a>(&'a self, _scope: &'a str, lease: &'a NodeLease) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            lease.state.mark_lost();
            Ok(())
        })
    }

    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn roundtrip_lock_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        // Bounds one write (fsync): far above what a loaded machine takes.
        let t = Duration::from_secs(120);
        {
            let s = FileStore::open(&path, t).unwrap();
            assert!(matches!(
                FileStore::open(&path, t),
                Err(StoreError::Locked(_))
            ));
            assert_eq!(
                s.compare_and_set("seq/a/hwm", None, 10).await.unwrap(),
                Some(1)
            );
            assert_eq!(
                s.compare_and_set("seq/a/hwm", None, 11).await.unwrap(),
                None
            );
            assert!(s
                .compare_and_set("seq/a/hwm", Some(1), 20)
                .await
                .unwrap()
                .is_some());
        }
        let s = FileStore::open(&path, t).unwrap();
        assert_eq!(
            s.load("seq/a/hwm").await.unwrap().map(|v| v.value),
            Some(20)
        );
        drop(s);
        std::fs::write(&path, "seq/a/hwm 20\nseq/b/hwm x\n").unwrap();
        let err = FileStore::open(&path, t).unwrap_err().to_string();
        assert!(err.contains(":2") && err.contains("\"x\""), "{err}");
    }
}
