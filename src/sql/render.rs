//! Rendering a [`QueryRewrite`]: copy the original text, splicing in ids,
//! column names and last-insert-id literals.

pub(crate) use super::digits::push_u64;
use super::edit::{Edit, EditKind, Lead, Prefix};
use super::error::SqlError;
use super::plan::{QueryRewrite, StmtInfo};
use super::rows::RowKey;
use super::upsert::{self, IdForm, LastRow, Report};

/// Appends `text` as a backquoted identifier.
pub(crate) fn push_quoted(out: &mut String, text: &str) {
    out.push('`');
    for c in text.chars() {
        if c == '`' {
            out.push('`');
        }
        out.push(c);
    }
    out.push('`');
}

impl QueryRewrite {
    /// Writes the rewritten query to `out`. `ids` are all demanded ids,
    /// concatenated in slot order ([`QueryRewrite::demands`] order). With
    /// `last_insert_id = Some(v)` (the session's current last insert id),
    /// no-argument `LAST_INSERT_ID()`, `@@identity` and `@@last_insert_id` are
    /// replaced by `v` (after a statement of this query generates ids, by its
    /// first id; after one sets the value itself, they are left alone); with
    /// `None` they are left for the backend.
    ///
    /// # Errors
    /// [`SqlError::IdCount`] if `ids` does not hold exactly
    /// [`QueryRewrite::total_ids`] ids (nothing useful is written then).
    pub fn render(
        &self,
        ids: &[u64],
        last_insert_id: Option<u64>,
        out: &mut String,
    ) -> Result<(), SqlError> {
        self.render_with(ids, last_insert_id, &|_| Report::Wrap, out)
    }

    /// [`QueryRewrite::render`], with each statement's ids written as
    /// `report(index)` says ([`Report::Wrap`] is what `render` does).
    /// Statements reported otherwise get plain ids, and tracked ones the
    /// forms and clauses of [`crate::sql::upsert`].
    ///
    /// # Errors
    /// As [`QueryRewrite::render`].
    pub fn render_with(
        &self,
        ids: &[u64],
        last_insert_id: Option<u64>,
        report: &dyn Fn(usize) -> Report,
        out: &mut String,
    ) -> Result<(), SqlError> {
        if ids.len() != self.total {
            return Err(SqlError::IdCount {
                table: self
                    .statements
                    .iter()
                    .find_map(|s| s.rule.as_ref().map(|r| r.table.clone()))
                    .unwrap_or_default(),
                needed: self.total,
                given: ids.len(),
            });
        }
        let sql = &*self.sql;
        out.reserve(sql.len() + ids.len() * 24 + 16);
        let mut last = last_insert_id;
        let mut cur = 0;
        for (index, st) in self.statements.iter().enumerate() {
            let r = report(index);
            let first = st.edits.iter().find_map(|e| match e.kind {
                EditKind::Id { slot, first, .. } if first => Some(slot),
                _ => None,
            });
            let forms = Forms::new(st, r, first, st.upsert.as_ref().map_or(1, |u| u.rows));
            let last_row = st.upsert.as_ref().map(|u| u.last);
            let injects = injections(st, r);
            let mut pending = injects.iter().peekable();
            for e in &st.edits {
                while let Some(&&(at, inj)) = pending.peek().filter(|(at, _)| *at < e.start) {
                    out.push_str(sql.get(cur..at).unwrap_or(""));
                    cur = at.max(cur);
                    push_injection(st, inj, &forms, last_row, ids, out);
                    pending.next();
                }
                out.push_str(sql.get(cur..e.start).unwrap_or(""));
                cur = e.end.max(cur);
                push_edit(sql, st, e, ids, &forms, last, out);
            }
            for &(at, inj) in pending {
                out.push_str(sql.get(cur..at).unwrap_or(""));
                cur = at.max(cur);
                push_injection(st, inj, &forms, last_row, ids, out);
            }
            if last.is_some() {
                if st.generated > 0 {
                    last = ids.get(st.first_slot).copied().or(last);
                }
                if st.changes_last_insert_id {
                    last = None;
                }
            }
        }
        out.push_str(sql.get(cur..).unwrap_or(""));
        Ok(())
    }

    /// Renders statement `index` of the query with only the rows `rows`
    /// (indexes into its [`StmtInfo::rows`], ascending): the text before the
    /// first row, those rows' texts joined by `, `, and the text after the
    /// last row, each with its splices. This is one shard's part of a
    /// multi-row INSERT whose rows go to several shards, written as
    /// `report` says: with [`Report::Wrap`], the statement's first id (in
    /// whichever part holds it) is `LAST_INSERT_ID(<id>)`; a tracked part is
    /// tracked on its own rows (its first generated row saves and starts
    /// the register, its last row closes it). Last-insert-id uses are left
    /// for the backend.
    ///
    /// # Errors
    /// [`SqlError::IdCount`] as [`QueryRewrite::render`].
    pub fn render_rows(
        &self,
        index: usize,
        rows: &[usize],
        ids: &[u64],
        report: Report,
        out: &mut String,
    ) -> Result<(), SqlError> {
        let Some(st) = self.statements.get(index) else {
            return Ok(());
        };
        let (Some(first), Some(last)) = (st.rows.first(), st.rows.last()) else {
            return Ok(());
        };
        if ids.len() != self.total {
            return Err(SqlError::IdCount {
                table: st
                    .rule
                    .as_ref()
                    .map(|r| r.table.clone())
                    .unwrap_or_default(),
                needed: self.total,
                given: ids.len(),
            });
        }
        let sql = &*self.sql;
        let key = |i: &usize| st.rows.get(*i).map(|r| r.key);
        let part_first = match report {
            Report::Wrap => st.edits.iter().find_map(|e| match e.kind {
                EditKind::Id { slot, first, .. } if first => Some(slot),
                _ => None,
            }),
            _ => rows.iter().find_map(|i| match key(i) {
                Some(RowKey::Generated(s)) => Some(s),
                _ => None,
            }),
        };
        let forms = Forms::new(st, report, part_first, rows.len());
        let last_row = rows.last().and_then(key).map(|k| match k {
            RowKey::Generated(s) => LastRow::Slot(s),
            RowKey::Explicit(v) => LastRow::Explicit(v),
            RowKey::Unknown => LastRow::Other,
        });
        let injects = injections(st, report);
        // Edits starting in `from..to` (or at `to` too, for a row: an id
        // appended to a row is inserted at its `)`).
        let piece = |from: usize, to: usize, at_end: bool, out: &mut String| {
            let mut cur = from;
            let inside = |e: &&Edit| e.start >= from && (e.start < to || (at_end && e.start == to));
            for e in st.edits.iter().filter(inside) {
                out.push_str(sql.get(cur..e.start).unwrap_or(""));
                cur = e.end.max(cur);
                push_edit(sql, st, e, ids, &forms, None, out);
            }
            for &(at, inj) in injects.iter().filter(|(at, _)| *at >= from && *at <= to) {
                out.push_str(sql.get(cur..at).unwrap_or(""));
                cur = at.max(cur);
                push_injection(st, inj, &forms, last_row, ids, out);
            }
            out.push_str(sql.get(cur..to).unwrap_or(""));
        };
        piece(st.range.start, first.open, false, out);
        for (n, &i) in rows.iter().enumerate() {
            let Some(r) = st.rows.get(i) else { continue };
            if n > 0 {
                out.push_str(", ");
            }
            // A row's text runs to its `)` included; an id appended to the
            // row is inserted at the `)`.
            piece(r.open, r.close, true, out);
            out.push(')');
        }
        piece(last.close + 1, st.range.end, true, out);
        Ok(())
    }

    /// [`QueryRewrite::render`] into a new string.
    ///
    /// # Errors
    /// As [`QueryRewrite::render`].
    pub fn render_to_string(
        &self,
        ids: &[u64],
        last_insert_id: Option<u64>,
    ) -> Result<String, SqlError> {
        let mut out = String::new();
        self.render(ids, last_insert_id, &mut out)?;
        Ok(out)
    }
}

/// How the ids of one statement (or one shard's part of it) are written.
struct Forms {
    report: Report,
    /// The slot written first: `LAST_INSERT_ID(<id>)` ([`Report::Wrap`]) or
    /// saving the session's value (tracked).
    first: Option<usize>,
    /// Later ids join the candidate register (tracked upserts of several rows).
    chained: bool,
    /// Rows in the statement (or part).
    rows: usize,
}

impl Forms {
    fn new(st: &StmtInfo, report: Report, first: Option<usize>, rows: usize) -> Forms {
        let chained = matches!(report, Report::Track | Report::Returning)
            && st.upsert.as_ref().is_some_and(|u| u.chained(rows));
        Forms {
            report,
            first,
            chained,
            rows,
        }
    }

    fn id(&self, slot: usize) -> IdForm {
        let first = self.first == Some(slot);
        match self.report {
            Report::Wrap if first => IdForm::Wrap,
            Report::Wrap | Report::Plain => IdForm::Plain,
            Report::Track | Report::Returning if first => IdForm::Save,
            Report::Track | Report::Returning if self.chained => IdForm::Chain,
            Report::Track | Report::Returning => IdForm::Plain,
        }
    }
}

/// What idgate adds to a tracked statement's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Injection {
    /// The assignment appended to `ON DUPLICATE KEY UPDATE`.
    Assignment,
    /// `` RETURNING `id` ``.
    Returning,
}

/// Where `st`, written as `report`, gets [`Injection`]s (in text order).
fn injections(st: &StmtInfo, report: Report) -> Vec<(usize, Injection)> {
    let mut out = Vec::new();
    let Some(u) = st.upsert.as_deref() else {
        return out;
    };
    if matches!(report, Report::Track | Report::Returning) {
        if let Some(at) = u.odku_end {
            out.push((at, Injection::Assignment));
        }
    }
    if report == Report::Returning {
        out.push((u.end, Injection::Returning));
    }
    out
}

fn push_injection(
    st: &StmtInfo,
    inj: Injection,
    forms: &Forms,
    last_row: Option<LastRow>,
    ids: &[u64],
    out: &mut String,
) {
    let column = st.rule.as_ref().map(|r| &*r.quoted_column).unwrap_or("");
    match inj {
        Injection::Assignment => {
            let mut last = String::new();
            match last_row {
                Some(LastRow::Slot(s)) => push_u64(&mut last, ids.get(s).copied().unwrap_or(0)),
                Some(LastRow::Explicit(v)) => push_u64(&mut last, v),
                _ => last.push_str("NULL"),
            }
            let mut first = String::new();
            match forms.first.and_then(|s| ids.get(s)) {
                Some(&v) => push_u64(&mut first, v),
                None => first.push_str("NULL"),
            }
            upsert::push_assignment(out, column, forms.rows, &first, &last);
        }
        Injection::Returning => upsert::push_returning(out, column),
    }
}

/// Writes what edit `e` of statement `st` puts in place of its bytes.
fn push_edit(
    sql: &str,
    st: &StmtInfo,
    e: &Edit,
    ids: &[u64],
    forms: &Forms,
    last: Option<u64>,
    out: &mut String,
) {
    match &e.kind {
        EditKind::Id { slot, prefix, .. } => {
            match prefix {
                Prefix::None => {}
                Prefix::Comma => out.push_str(", "),
                Prefix::Assign => {
                    out.push_str(", ");
                    if let Some(r) = &st.rule {
                        out.push_str(&r.quoted_column);
                    }
                    out.push_str(" = ");
                }
            }
            let id = ids.get(*slot).copied().unwrap_or(0);
            match forms.id(*slot) {
                IdForm::Plain => push_u64(out, id),
                IdForm::Wrap => {
                    out.push_str("LAST_INSERT_ID(");
                    push_u64(out, id);
                    out.push(')');
                }
                form => {
                    let mut v = String::with_capacity(20);
                    push_u64(&mut v, id);
                    upsert::push_id(out, form, &v);
                }
            }
        }
        EditKind::Column(lead) => {
            let col = st.rule.as_ref().map(|r| &*r.quoted_column).unwrap_or("");
            match lead {
                Lead::None => out.push_str(col),
                Lead::Comma => {
                    out.push_str(", ");
                    out.push_str(col);
                }
                Lead::Paren => {
                    out.push_str(" (");
                    out.push_str(col);
                    out.push(')');
                }
            }
        }
        EditKind::Zero => out.push('0'),
        EditKind::Capture(_) | EditKind::CaptureEnd => super::edit::push_capture(out, &e.kind),
        EditKind::CaptureHighest => {
            if let Some(r) = &st.update_id {
                super::update::push_capture(out, &r.quoted_column);
            }
        }
        EditKind::LastId { alias } => {
            let original = sql.get(e.start..e.end).unwrap_or("");
            match last {
                Some(v) => {
                    push_u64(out, v);
                    if *alias {
                        out.push_str(" AS ");
                        push_quoted(out, original);
                    }
                }
                None => out.push_str(original),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal() {
        for v in [
            0u64,
            7,
            9,
            10,
            42,
            99,
            100,
            101,
            999,
            1000,
            1234567890,
            1_000_123,
            u64::MAX,
            u64::MAX - 1,
            10u64.pow(19),
        ] {
            let mut s = String::new();
            super::push_u64(&mut s, v);
            assert_eq!(s, v.to_string());
        }
        let mut s = String::new();
        super::push_quoted(&mut s, "LAST_INSERT_ID()`x");
        assert_eq!(s, "`LAST_INSERT_ID()``x`");
    }
}
