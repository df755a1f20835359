//! Server error codes and SQLSTATEs that idgate itself sends.
//!
//! Errors from a shard are relayed as they are; these are for what idgate
//! decides on its own (authentication, limits, refused statements, a shard
//! that cannot be reached).

/// An error idgate reports to a client: code, SQLSTATE and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorCode {
    /// MySQL error number.
    pub code: u16,
    /// Five-character SQLSTATE.
    pub state: &'static str,
}

macro_rules! codes {
    ($($(#[$m:meta])* $name:ident = ($code:expr, $state:expr);)*) => {
        $($(#[$m])* pub const $name: ErrorCode = ErrorCode { code: $code, state: $state };)*
    };
}

codes! {
    /// Too many connections.
    ER_CON_COUNT_ERROR = (1040, "08004");
    /// Bad handshake / malformed packet.
    ER_HANDSHAKE_ERROR = (1043, "08S01");
    /// Access denied for user.
    ER_ACCESS_DENIED_ERROR = (1045, "28000");
    /// Connections using insecure transport are prohibited (`require_tls`).
    ER_SECURE_TRANSPORT_REQUIRED = (3159, "HY000");
    /// No database selected.
    ER_NO_DB_ERROR = (1046, "3D000");
    /// Unknown command.
    ER_UNKNOWN_COM_ERROR = (1047, "08S01");
    /// Server shutdown in progress.
    ER_SERVER_SHUTDOWN = (1053, "08S01");
    /// Got packets out of order.
    ER_NET_PACKETS_OUT_OF_ORDER = (1156, "08S01");
    /// Got a packet bigger than max_allowed_packet.
    ER_NET_PACKET_TOO_LARGE = (1153, "08S01");
    /// A user's `max_connections` (MariaDB: max_user_connections) reached.
    ER_TOO_MANY_USER_CONNECTIONS = (1203, "42000");
    /// Malformed packet.
    ER_MALFORMED_PACKET = (1835, "HY000");
    /// Unknown column (an ORDER BY idgate cannot resolve).
    ER_BAD_FIELD_ERROR = (1054, "42S22");
    /// Value out of range (a sum over shards that no longer fits its type).
    ER_DATA_OUT_OF_RANGE = (1690, "22003");
    /// Unknown prepared statement handler.
    ER_UNKNOWN_STMT_HANDLER = (1243, "HY000");
    /// This version doesn't yet support it.
    ER_NOT_SUPPORTED_YET = (1235, "42000");
    /// Incorrect arguments (a floor idgate refuses to set).
    ER_WRONG_ARGUMENTS = (1210, "HY000");
    /// A statement needs a privilege the account lacks (idgate: `admin`).
    ER_SPECIFIC_ACCESS_DENIED_ERROR = (1227, "42000");
    /// A command denied on a table (idgate: a generator the user has no
    /// grant for, named as the table `idgate`.`g`, as MariaDB names a
    /// sequence a user may not use).
    ER_TABLEACCESS_DENIED_ERROR = (1142, "42000");
    /// Unknown SEQUENCE (MariaDB's error for `NEXTVAL` of a sequence that
    /// does not exist; idgate: a generator not in the rules in force).
    ER_UNKNOWN_SEQUENCES = (4091, "42S02");
    /// Unknown error.
    ER_UNKNOWN_ERROR = (1105, "HY000");
    /// Out of sort memory: MariaDB's error for a sort that does not fit its
    /// buffer; idgate's for a scattered statement over `max_result_buffer`.
    ER_OUT_OF_SORTMEMORY = (1038, "HY001");
    /// Unknown thread id (KILL of a session that does not exist).
    ER_NO_SUCH_THREAD = (1094, "HY000");
    /// You are not owner of thread (KILL of another user's session).
    ER_KILL_DENIED_ERROR = (1095, "HY000");
    /// Got error during COMMIT (a commit decision that could not be recorded).
    ER_ERROR_DURING_COMMIT = (1180, "HY000");
    /// Lock wait timeout exceeded (also: a statement held for a
    /// resharding cutover past its deadline).
    ER_LOCK_WAIT_TIMEOUT = (1205, "HY000");
    /// Deadlock found when trying to get lock (the transaction was rolled back).
    ER_LOCK_DEADLOCK = (1213, "40001");
    /// Query execution was interrupted (KILL QUERY).
    ER_QUERY_INTERRUPTED = (1317, "70100");
    /// Connection was killed (KILL).
    ER_CONNECTION_KILLED = (1927, "70100");
    /// Can't connect to the server (a shard is unreachable).
    CR_CONN_HOST_ERROR = (2003, "HY000");
    /// Lost connection to the server during query (a shard went away).
    CR_SERVER_LOST = (2013, "HY000");
}
