//! Dynamic SQL whose text is a user variable (`SET @q = 'INSERT ...';
//! PREPARE s FROM @q`, `EXECUTE IMMEDIATE @q`): idgate reads the
//! variable on the session's shard connection (where the statement will
//! run: a user variable pins the session to it) and checks the text as
//! it checks a source written as a string literal, so an INSERT into a
//! rule table (or an UPDATE of its id column) is refused the same way
//! instead of running without idgate's ids. The statement sent is the
//! client's.

use crate::frontend::session::{CmdError, Session};
use crate::sql::statement::dynamic::{from_variable, literal};

impl Session {
    /// Refuses `PREPARE s FROM @v` / `EXECUTE IMMEDIATE @v` when the text
    /// in `@v` could not run as written (as [`crate::sql::plan_query`]
    /// refuses it written as a literal).
    pub(in crate::frontend) async fn check_dynamic_source(
        &mut self,
        sql: &str,
    ) -> Result<(), CmdError> {
        // The head holds no quote: the default modes read it right.
        let Some(d) = from_variable(sql, crate::sql::lexer::Modes::default()) else {
            return Ok(());
        };
        let modes = self.sql_modes().await?;
        let text = self.first_value(&format!("SELECT {}", d.variable)).await?;
        if text.is_empty() {
            return Ok(());
        }
        let probe = format!("{} {}", d.head, literal(&text, modes.no_backslash_escapes));
        match self
            .plan(&probe, &crate::sql::plan_query, |p| match p {
                crate::sql::Plan::NeedColumns { schema, table } => {
                    Some((schema.clone(), table.clone()))
                }
                _ => None,
            })
            .await?
        {
            Err(e) => Err(CmdError::Sql(e)),
            Ok(_) => Ok(()),
        }
    }
}
