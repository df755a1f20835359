//! The MySQL errors idgate's handlers answer with for statements they
//! refuse (shards' own errors are relayed as they are).

use crate::frontend::session::CmdError;
use crate::protocol::codes::ErrorCode;
use crate::sql::SqlError;

/// A statement idgate cannot route correctly (the client is told why).
pub(in crate::frontend) const ER_NOT_ROUTABLE: ErrorCode = ErrorCode {
    code: 1235,
    state: "42000",
};

/// MySQL error for an allocator failure (store down, exhausted): "Failed to
/// read auto-increment value", the error a client gets when AUTO_INCREMENT
/// cannot produce a value.
pub(in crate::frontend) const ER_AUTOINC_READ_FAILED: ErrorCode = ErrorCode {
    code: 1467,
    state: "HY000",
};

/// The MySQL error for a statement idgate refuses.
pub fn sql_error_code(e: &SqlError) -> ErrorCode {
    ErrorCode {
        code: e.code(),
        state: e.sqlstate(),
    }
}

/// A statement idgate cannot route correctly, and why (error 1235).
pub(in crate::frontend) fn refuse(message: String) -> CmdError {
    CmdError::Refused(ER_NOT_ROUTABLE, format!("idgate: {message}"))
}
