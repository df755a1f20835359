//! Rows that reach a rule table without an INSERT: `CREATE TABLE t ...
//! SELECT`, `RENAME TABLE x TO t`, `ALTER TABLE x RENAME TO t` (a table
//! filled elsewhere, moved under a rule's name). After a DDL statement
//! that names a rule table, idgate reads the table's highest id on each
//! shard it lives on and observes it, as it observes an explicit id: the
//! generator issues nothing at or below it, before the statement's reply
//! goes out (it is held meanwhile). The statement has run by then, so a
//! read that fails is logged, with `IDGATE SET FLOOR ... FROM TABLES` as
//! the remedy, and the reply is the statement's.

use crate::frontend::session::Session;
use crate::sql::statement::keyword::{code, first_keyword, semicolon_parts};
use crate::sql::statement::mentions::Mentions;
use std::collections::BTreeSet;
use tracing::warn;

/// Whether a statement is DDL that may bring rows under a table's name
/// (`DROP` removes them: nothing to read).
fn may_adopt(sql: &[u8]) -> bool {
    matches!(
        &first_keyword(sql),
        b"CREATE\0\0" | b"ALTER\0\0\0" | b"RENAME\0\0"
    )
}

impl Session {
    /// Whether COM_QUERY text `sql` has a DDL statement that may bring
    /// rows under a rule table's name (then its reply is held until
    /// [`Session::observe_adopted_rows`] is done). Cheap: this runs for
    /// every COM_QUERY.
    pub(in crate::frontend) fn may_adopt_rows(&self, sql: &[u8]) -> bool {
        self.rules.is_some()
            && (may_adopt(sql)
                || (Mentions::semicolon_in(sql, self.mentions_of(sql))
                    && semicolon_parts(sql).any(may_adopt)))
    }

    /// After COM_QUERY `payload` ran, before its reply goes out: the rule
    /// tables it names have their highest ids observed.
    pub(in crate::frontend) async fn observe_adopted_rows(&mut self, payload: &[u8]) {
        let sql = payload.get(1..).unwrap_or_default();
        let Some(rules) = self.rules.clone() else {
            return;
        };
        let text = code(sql);
        let text = String::from_utf8_lossy(&text);
        let modes = crate::sql::lexer::Modes::default();
        // (schema, table, column, generator, shards), once each.
        let mut tables = BTreeSet::new();
        for (schema, table) in crate::sql::named_tables(&text, modes) {
            let schema = schema.or_else(|| self.schema.clone());
            let Some(e) = rules.entry(schema.as_deref(), &table) else {
                continue;
            };
            let Some(schema) = e.schema().map(str::to_string).or(schema) else {
                continue;
            };
            let shards: Vec<usize> = match e.placement() {
                Some(p) => p.shards().to_vec(),
                None => vec![0],
            };
            tables.insert((
                schema,
                e.table().to_string(),
                e.quoted_column().to_string(),
                e.generator().to_string(),
                shards,
            ));
        }
        for (schema, table, column, generator, shards) in tables {
            for shard in shards {
                let max = match self.highest_id(shard, &schema, &table, &column).await {
                    Ok(Some(max)) => max,
                    Ok(None) => continue,
                    Err(e) => {
                        warn!(conn = self.id, table = %format!("{schema}.{table}"), shard, "the highest id after a DDL statement could not be read ({e}); run IDGATE SET FLOOR {generator} FROM TABLES");
                        continue;
                    }
                };
                if let Err(e) = self.observe(&generator, &[max]).await {
                    warn!(conn = self.id, table = %format!("{schema}.{table}"), max, "generator {generator} did not take the highest id after a DDL statement ({e}); run IDGATE SET FLOOR {generator} FROM TABLES");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::may_adopt;

    #[test]
    fn ddl_that_may_bring_rows() {
        assert!(may_adopt(b"CREATE TABLE t SELECT 1 AS id"));
        assert!(may_adopt(b"rename table x to t"));
        assert!(may_adopt(b"/* c */ ALTER TABLE x RENAME TO t"));
        assert!(!may_adopt(b"DROP TABLE t"));
        assert!(!may_adopt(b"INSERT INTO t VALUES (1)"));
    }
}
