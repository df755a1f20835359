//! Planning one INSERT/REPLACE into a rule table from its [`Shape`]: which
//! slots get generated ids, which explicit ids to observe, and the edits.

use super::edit::{Edit, EditKind, IdOrigin, Lead, Prefix};
use super::error::SqlError;
use super::shape::{Body, Shape, Value, ValueClass};

/// Text (COM_QUERY) or prepared (COM_STMT_PREPARE) planning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Ids are literals spliced in at render time.
    Text,
    /// Ids are `?` parameters filled at each execute.
    Prepare,
}

/// What a row contributes to the id column (prepared statements decide
/// `Slot` ones at execute time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowId {
    /// A slot (local index) that may get a generated id.
    Slot(usize),
    /// An explicit integer id written in the statement.
    Explicit(u64),
    /// An expression or other literal: neither generated nor observed.
    Kept,
}

/// Whether a slot is always generated or depends on a client parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// Always generated (column omitted, or NULL/DEFAULT/0 written).
    Always,
    /// The client's parameter number `n` decides at execute time.
    Client(usize),
}

/// The plan of one INSERT/REPLACE.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Planned {
    /// Edits, sorted by position.
    pub edits: Vec<Edit>,
    /// Slots (local order).
    pub slots: Vec<SlotKind>,
    /// Explicit integer ids, in row order.
    pub explicit: Vec<u64>,
    /// Per row, in order (prepared statements use it at execute; empty in
    /// text mode).
    pub rows: Vec<RowId>,
    /// Number of slots (`slots` is only filled in prepared mode).
    pub slot_count: usize,
    /// Id values idgate cannot convert before sending, captured in session
    /// variables ([`EditKind::Capture`]): their byte offsets, in row order.
    pub captures: Vec<usize>,
    /// The last row's id is captured (its value is what an explicit-only
    /// statement reports): its byte offset.
    pub last_captured: Option<usize>,
}

/// Names for error messages.
pub struct Names<'a> {
    /// `schema.table` or `table`.
    pub table: &'a str,
    /// The id column.
    pub column: &'a str,
}

struct Builder<'a> {
    out: Planned,
    mode: Mode,
    no_auto_value_on_zero: bool,
    slot_base: usize,
    /// Byte offsets of the client's `?`s (prepared mode), to number them.
    params: &'a [usize],
    any_always: bool,
    any_client: bool,
    /// The last id value seen is captured (its offset).
    last_captured: Option<usize>,
    /// An id value that cannot be captured (its position is unknown).
    uncaptured: bool,
}

impl Builder<'_> {
    /// A new always-generated slot; returns (global slot, statically first).
    fn always(&mut self) -> (usize, bool) {
        self.last_captured = None;
        let local = self.out.slot_count;
        self.out.slot_count += 1;
        if self.mode == Mode::Prepare {
            self.out.slots.push(SlotKind::Always);
            self.out.rows.push(RowId::Slot(local));
        }
        let first = local == 0;
        self.any_always = true;
        (self.slot_base + local, first)
    }

    fn added(&mut self, at: usize, prefix: Prefix) {
        let (slot, first) = self.always();
        self.out.edits.push(Edit {
            start: at,
            end: at,
            kind: EditKind::Id {
                slot,
                first,
                prefix,
                origin: IdOrigin::Added,
            },
        });
    }

    /// Handles the id column's value `v`.
    fn value(&mut self, v: &Value) {
        let generated = match v.class {
            // Under NO_AUTO_VALUE_ON_ZERO, MariaDB stores 0 for DEFAULT in
            // an AUTO_INCREMENT column: an explicit 0, written as such.
            ValueClass::Default if self.no_auto_value_on_zero => {
                self.explicit(0);
                self.out.edits.push(Edit {
                    start: v.start,
                    end: v.end,
                    kind: EditKind::Zero,
                });
                return;
            }
            ValueClass::Null | ValueClass::Default => true,
            ValueClass::Int(0) => !self.no_auto_value_on_zero,
            ValueClass::Int(n) => {
                self.explicit(n);
                return;
            }
            ValueClass::Param if self.mode == Mode::Prepare => {
                let n = self.params.partition_point(|&p| p < v.start);
                let local = self.out.slot_count;
                self.out.slot_count += 1;
                self.out.slots.push(SlotKind::Client(n));
                self.out.rows.push(RowId::Slot(local));
                self.last_captured = None;
                self.any_client = true;
                self.out.edits.push(Edit {
                    start: v.start,
                    end: v.end,
                    kind: EditKind::Id {
                        slot: self.slot_base + local,
                        // "May be first": no always-generated slot before it.
                        first: !self.any_always,
                        prefix: Prefix::None,
                        origin: IdOrigin::ClientParam(n),
                    },
                });
                return;
            }
            ValueClass::Param | ValueClass::Other => false,
        };
        if !generated {
            if let ValueClass::Int(n) = v.class {
                self.explicit(n);
                return;
            }
            if self.mode == Mode::Prepare {
                self.out.rows.push(RowId::Kept);
            }
            // Its value is known only once stored: captured and read back.
            if v.start < v.end {
                self.out.captures.push(v.start);
                self.out.edits.push(Edit {
                    start: v.start,
                    end: v.start,
                    kind: EditKind::Capture(v.start),
                });
                self.out.edits.push(Edit {
                    start: v.end,
                    end: v.end,
                    kind: EditKind::CaptureEnd,
                });
                self.last_captured = Some(v.start);
            } else {
                self.uncaptured = true;
            }
            return;
        }
        // Statically first only if no slot (of any kind) came before.
        let dynamic = self.any_client && !self.any_always;
        let (slot, first) = self.always();
        self.out.edits.push(Edit {
            start: v.start,
            end: v.end,
            kind: EditKind::Id {
                slot,
                first,
                prefix: Prefix::None,
                origin: if dynamic && self.mode == Mode::Prepare {
                    IdOrigin::Literal
                } else {
                    IdOrigin::Added
                },
            },
        });
    }

    fn explicit(&mut self, n: u64) {
        self.last_captured = None;
        self.out.explicit.push(n);
        if self.mode == Mode::Prepare {
            self.out.rows.push(RowId::Explicit(n));
        }
    }

    fn column(&mut self, at: usize, lead: Lead) {
        self.out.edits.push(Edit {
            start: at,
            end: at,
            kind: EditKind::Column(lead),
        });
    }
}

/// Plans one statement. `table_columns` is the table's column count when the
/// statement has no column list (the caller resolved the id column's index
/// into the shape already). `params` are the byte offsets of the client's `?`
/// (prepared mode).
pub fn plan(
    shape: &Shape,
    names: &Names<'_>,
    table_columns: Option<usize>,
    no_auto_value_on_zero: bool,
    slot_base: usize,
    mode: Mode,
    params: &[usize],
) -> Result<Planned, SqlError> {
    let mut b = Builder {
        out: Planned::default(),
        mode,
        no_auto_value_on_zero,
        slot_base,
        params,
        any_always: false,
        any_client: false,
        last_captured: None,
        uncaptured: false,
    };
    let missing_id = || SqlError::Syntax {
        table: names.table.to_string(),
        column: names.column.to_string(),
        reason: "a row has no value for the id column".to_string(),
    };
    let count_err = |row: usize| SqlError::ColumnCount {
        table: names.table.to_string(),
        row,
    };
    match (&shape.columns, &shape.body) {
        (Some(cl), Body::Values(rows)) => {
            if let Some(i) = rows.iter().position(|r| r.count != cl.count) {
                return Err(count_err(i + 1));
            }
            match cl.id_index {
                Some(_) => {
                    for r in rows {
                        b.value(r.id.as_ref().ok_or_else(missing_id)?);
                    }
                }
                None => {
                    b.column(
                        cl.close,
                        if cl.count == 0 {
                            Lead::None
                        } else {
                            Lead::Comma
                        },
                    );
                    for r in rows {
                        b.added(
                            r.close,
                            if r.count == 0 {
                                Prefix::None
                            } else {
                                Prefix::Comma
                            },
                        );
                    }
                    if let Some(ac) = &shape.alias_columns {
                        if ac.has_id_name {
                            return Err(SqlError::Unsupported {
                                what: "a row alias column list that names the id column while the INSERT omits it".into(),
                                table: names.table.to_string(),
                                column: names.column.to_string(),
                            });
                        }
                        b.column(ac.close, Lead::Comma);
                    }
                }
            }
        }
        (None, Body::Values(rows)) => {
            let n = table_columns.unwrap_or(0);
            if rows.iter().all(|r| r.count == 0) {
                b.column(shape.after_table, Lead::Paren);
                for r in rows {
                    b.added(r.close, Prefix::None);
                }
            } else {
                if let Some(i) = rows.iter().position(|r| r.count != n) {
                    return Err(count_err(i + 1));
                }
                for r in rows {
                    b.value(r.id.as_ref().ok_or_else(missing_id)?);
                }
            }
        }
        (None, Body::Set { id, end }) => match id {
            Some(v) => b.value(v),
            None => b.added(*end, Prefix::Assign),
        },
        (Some(_), Body::Set { .. }) => {
            return Err(SqlError::Syntax {
                table: names.table.to_string(),
                column: names.column.to_string(),
                reason: "a column list before SET".to_string(),
            })
        }
    }
    // Text mode: exactly the first generated slot is written as LAST_INSERT_ID(id).
    if mode == Mode::Text {
        let mut seen = false;
        for e in &mut b.out.edits {
            if let EditKind::Id { first, .. } = &mut e.kind {
                *first = !seen;
                seen = true;
            }
        }
    }
    if b.uncaptured {
        return Err(SqlError::Unsupported {
            what: "an id written as an expression idgate cannot locate in the statement (idgate must read back the id it stores); write the id as a literal".into(),
            table: names.table.to_string(),
            column: names.column.to_string(),
        });
    }
    b.out.last_captured = b.last_captured;
    b.out.edits.sort_by_key(|e| e.start);
    Ok(b.out)
}
