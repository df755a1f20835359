//! Dynamic SQL whose text is not a literal (`SET @q = 'INSERT ...';
//! PREPARE s FROM @q`, `EXECUTE IMMEDIATE CONCAT(...)`): idgate reads the
//! text on the session's shard connection (where the statement will run:
//! a user variable pins the session to it) and checks it as it checks a
//! source written as a string literal, so an INSERT into a rule table (or
//! an UPDATE of its id column) is refused the same way instead of running
//! without idgate's ids. The statement sent is the client's.
//!
//! An expression is evaluated a second time to read it, so only one that
//! cannot change anything is (`sql::statement::dynamic::PURE_FUNCTIONS`);
//! any other is refused with the way around it: set a user variable to it
//! and prepare from the variable.

use crate::frontend::session::{CmdError, Session};
use crate::sql::lexer::{Lexer, Modes};
use crate::sql::statement::dynamic::{self, literal, Source};
use crate::sql::statement::keyword;
use crate::sql::SqlError;

impl Session {
    /// Refuses `PREPARE s FROM <source>` / `EXECUTE IMMEDIATE <source>`
    /// (also under `SET STATEMENT ... FOR`, or in an executable comment)
    /// when the text of a variable or expression source could not run as
    /// written (as [`crate::sql::plan_query`] refuses it written as a
    /// literal), or when an expression cannot be read without running
    /// something again.
    pub(in crate::frontend) async fn check_dynamic_source(
        &mut self,
        sql: &str,
    ) -> Result<(), CmdError> {
        let executed = keyword::executed(sql.as_bytes());
        let body = keyword::set_statement_body(&executed);
        let text = String::from_utf8_lossy(body.as_deref().unwrap_or(&executed));
        // The head holds no quote: the default modes find it.
        if source_of(&text, Modes::default()).is_none() {
            return Ok(());
        }
        let modes = self.sql_modes().await?;
        let lexer_modes = Modes {
            no_backslash_escapes: modes.no_backslash_escapes,
            ansi_quotes: modes.ansi_quotes,
        };
        let Some(d) = source_of(&text, lexer_modes) else {
            return Ok(());
        };
        match d.kind {
            Source::Literal(_) => return Ok(()),
            Source::Variable | Source::Expression { pure: true } => {}
            Source::Expression { pure: false } => {
                return Err(CmdError::Sql(SqlError::DynamicSource {
                    what: d.what().into(),
                    why: "from an expression that is not only literals, user variables and string functions (idgate would have to run it twice to read the statement while id rules are configured)".into(),
                    remedy: format!(
                        "set a user variable to it first (SET @q = ...) and use {} @q",
                        if d.prepare { "PREPARE ... FROM" } else { "EXECUTE IMMEDIATE" }
                    ),
                }));
            }
        }
        let source = text.get(d.source.clone()).unwrap_or_default();
        let value = self.first_value(&format!("SELECT {source}")).await?;
        if value.is_empty() {
            return Ok(());
        }
        let head = text.get(d.head.clone()).unwrap_or_default();
        let probe = format!("{head} {}", literal(&value, modes.no_backslash_escapes));
        match self
            .plan(
                &probe,
                &crate::sql::plan_query,
                crate::sql::Plan::columns_needed,
            )
            .await?
        {
            Err(e) => Err(CmdError::Sql(e)),
            Ok(_) => Ok(()),
        }
    }
}

/// The query's first statement, when it is dynamic SQL.
fn source_of(text: &str, modes: Modes) -> Option<dynamic::Dynamic> {
    let first = Lexer::new(text, 0, modes).next_token()?;
    dynamic::parse(text, first.start, text.len(), modes, false)
}
