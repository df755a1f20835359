//! `idgate.toml`: the proxy's configuration, validated on load.

use serde::Deserialize;

/// `[allocator]`: where generator state is persisted.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocatorConfig {
    /// `etcd`, or `file` (the embedded default).
    #[serde(default)]
    pub store: StoreKind,
    /// etcd client endpoints, e.g. `["http://127.0.0.1:2379"]`.
    #[serde(default)]
    pub etcd_endpoints: Vec<String>,
    /// Every key idgate writes in etcd starts with this prefix.
    #[serde(default = "default_etcd_prefix")]
    pub etcd_prefix: String,
    /// State file for `store = "file"`.
    #[serde(default = "default_file_path")]
    pub file_path: std::path::PathBuf,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            store: StoreKind::File,
            etcd_endpoints: Vec::new(),
            etcd_prefix: default_etcd_prefix(),
            file_path: default_file_path(),
        }
    }
}

/// Which store persists the allocator's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// etcd: shared by several idgate processes.
    Etcd,
    /// A local state file with an exclusive lock: one idgate process.
    #[default]
    File,
}

fn default_etcd_prefix() -> String {
    "/idgate".to_string()
}

fn default_file_path() -> std::path::PathBuf {
    "idgate-state".into()
}
