//! Where one execute of a prepared INSERT into a routed table goes.

/// Where one execute of a prepared INSERT into a routed table goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::frontend) enum InsertTargets {
    /// These shards: one, or every copy of a broadcast table.
    Shards(Vec<usize>),
    /// Its rows go to several shards: it runs as its text, split by row
    /// (`inline.rs`).
    Split,
}
