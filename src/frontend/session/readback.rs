//! What one statement left to read back after it ran (ids written as
//! expressions, UPDATEs of the id column): `capture.rs` reads and observes.

/// What one statement left to read back.
pub(in crate::frontend) struct Captured<'a> {
    /// The generator that fills the table's id column.
    pub generator: &'a str,
    /// Byte offsets of the captured values (their variables).
    pub captures: &'a [usize],
    /// An UPDATE of the id column: read the highest id it stored too.
    pub highest: bool,
    /// The capture whose value the OK packet reports (the last row's id of
    /// an explicit-only statement, when captured).
    pub report_last: Option<usize>,
    /// The shards it may have run on (those without a connection are
    /// skipped).
    pub shards: Vec<usize>,
}
