//! [`RouteError`]: why a statement could not be analyzed for routing. Each
//! maps to the MySQL error code and SQLSTATE the client receives.

use crate::sql::error::{ER_NOT_SUPPORTED_YET, ER_PARSE_ERROR};

/// A statement whose routing could not be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The statement could not be parsed (sqlparser's message, or the
    /// lexer's: an unclosed quote or comment, an empty statement, more than
    /// one statement).
    #[error("idgate: cannot parse the statement to route it to shards ({reason})")]
    Syntax {
        /// What the parser said.
        reason: String,
    },
    /// A form the analysis does not handle (named for the message).
    #[error("idgate: {what} is not supported on sharded tables")]
    Unsupported {
        /// What was attempted.
        what: String,
    },
}

impl RouteError {
    pub(super) fn syntax(reason: impl Into<String>) -> RouteError {
        RouteError::Syntax {
            reason: reason.into(),
        }
    }

    /// The MySQL error code sent to the client.
    pub fn code(&self) -> u16 {
        match self {
            RouteError::Syntax { .. } => ER_PARSE_ERROR,
            RouteError::Unsupported { .. } => ER_NOT_SUPPORTED_YET,
        }
    }

    /// The SQLSTATE sent with [`RouteError::code`].
    pub fn sqlstate(&self) -> &'static str {
        "42000"
    }
}
