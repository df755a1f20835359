//! Rendering a [`QueryRewrite`]: copy the original text, splicing in ids,
//! column names and last-insert-id literals.

use super::edit::{Edit, EditKind, Lead, Prefix};
use super::error::SqlError;
use super::plan::{QueryRewrite, StmtInfo};

/// Appends `v` in decimal.
pub(crate) fn push_u64(out: &mut String, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        if let Some(b) = buf.get_mut(i) {
            *b = b'0' + (v % 10) as u8;
        }
        v /= 10;
        if v == 0 || i == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(buf.get(i..).unwrap_or(&[])).unwrap_or(""));
}

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
        self.render_with(ids, last_insert_id, &|_| false, out)
    }

    /// [`QueryRewrite::render`], except that the statements for which
    /// `plain(index)` is true get their first id as a plain literal instead
    /// of `LAST_INSERT_ID(<id>)` (the caller then reports the id itself, for
    /// statements whose rows may be ignored or turned into updates).
    ///
    /// # Errors
    /// As [`QueryRewrite::render`].
    pub fn render_with(
        &self,
        ids: &[u64],
        last_insert_id: Option<u64>,
        plain: &dyn Fn(usize) -> bool,
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
            let wrap_first = !plain(index);
            for e in &st.edits {
                out.push_str(sql.get(cur..e.start).unwrap_or(""));
                cur = e.end.max(cur);
                push_edit(sql, st, e, ids, wrap_first, last, out);
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
    /// multi-row INSERT whose rows go to several shards. `wrap_first` as in
    /// [`QueryRewrite::render_with`] (the first id of the statement, in
    /// whichever part holds it, is written `LAST_INSERT_ID(<id>)`).
    /// Last-insert-id uses are left for the backend.
    ///
    /// # Errors
    /// [`SqlError::IdCount`] as [`QueryRewrite::render`].
    pub fn render_rows(
        &self,
        index: usize,
        rows: &[usize],
        ids: &[u64],
        wrap_first: bool,
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
        // Edits starting in `from..to` (or at `to` too, for a row: an id
        // appended to a row is inserted at its `)`).
        let piece = |from: usize, to: usize, at_end: bool, out: &mut String| {
            let mut cur = from;
            let inside = |e: &&Edit| e.start >= from && (e.start < to || (at_end && e.start == to));
            for e in st.edits.iter().filter(inside) {
                out.push_str(sql.get(cur..e.start).unwrap_or(""));
                cur = e.end.max(cur);
                push_edit(sql, st, e, ids, wrap_first, None, out);
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

/// Writes what edit `e` of statement `st` puts in place of its bytes.
fn push_edit(
    sql: &str,
    st: &StmtInfo,
    e: &Edit,
    ids: &[u64],
    wrap_first: bool,
    last: Option<u64>,
    out: &mut String,
) {
    match &e.kind {
        EditKind::Id {
            slot,
            first,
            prefix,
            ..
        } => {
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
            if *first && wrap_first {
                out.push_str("LAST_INSERT_ID(");
                push_u64(out, id);
                out.push(')');
            } else {
                push_u64(out, id);
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
        for v in [0u64, 7, 10, 42, 1234567890, u64::MAX] {
            let mut s = String::new();
            super::push_u64(&mut s, v);
            assert_eq!(s, v.to_string());
        }
        let mut s = String::new();
        super::push_quoted(&mut s, "LAST_INSERT_ID()`x");
        assert_eq!(s, "`LAST_INSERT_ID()``x`");
    }
}
