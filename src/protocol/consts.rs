//! Protocol constants: capability flags, status flags, command bytes.

/// Capability flags (`CLIENT_*`).
pub mod cap {
    pub const LONG_PASSWORD: u32 = 1;
    pub const FOUND_ROWS: u32 = 1 << 1;
    pub const LONG_FLAG: u32 = 1 << 2;
    pub const CONNECT_WITH_DB: u32 = 1 << 3;
    pub const NO_SCHEMA: u32 = 1 << 4;
    pub const COMPRESS: u32 = 1 << 5;
    pub const ODBC: u32 = 1 << 6;
    pub const LOCAL_FILES: u32 = 1 << 7;
    pub const IGNORE_SPACE: u32 = 1 << 8;
    pub const PROTOCOL_41: u32 = 1 << 9;
    pub const INTERACTIVE: u32 = 1 << 10;
    pub const SSL: u32 = 1 << 11;
    pub const IGNORE_SIGPIPE: u32 = 1 << 12;
    pub const TRANSACTIONS: u32 = 1 << 13;
    pub const RESERVED: u32 = 1 << 14;
    pub const SECURE_CONNECTION: u32 = 1 << 15;
    pub const MULTI_STATEMENTS: u32 = 1 << 16;
    pub const MULTI_RESULTS: u32 = 1 << 17;
    pub const PS_MULTI_RESULTS: u32 = 1 << 18;
    pub const PLUGIN_AUTH: u32 = 1 << 19;
    pub const CONNECT_ATTRS: u32 = 1 << 20;
    pub const PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 1 << 21;
    pub const CAN_HANDLE_EXPIRED_PASSWORDS: u32 = 1 << 22;
    pub const SESSION_TRACK: u32 = 1 << 23;
    pub const DEPRECATE_EOF: u32 = 1 << 24;

    /// MariaDB extended capability: column definitions carry extended type
    /// info (`json`, `inet6`, ...). It changes only column definition bytes,
    /// which idgate relays as they are.
    pub const EXT_EXTENDED_METADATA: u32 = 1 << 3;

    /// The MariaDB extended capabilities idgate passes on. Not the others:
    /// progress reports, bulk execute and metadata caching change the
    /// packet flow idgate follows.
    pub const EXT_SUPPORTED: u32 = EXT_EXTENDED_METADATA;

    /// What idgate can relay faithfully. Notably absent: COMPRESS and SSL (not
    /// implemented). LONG_PASSWORD (MariaDB's `CLIENT_MYSQL`) is offered as the
    /// shard offers it: without it MariaDB peers exchange extended capabilities.
    pub const SUPPORTED: u32 = LONG_PASSWORD
        | FOUND_ROWS
        | LONG_FLAG
        | CONNECT_WITH_DB
        | NO_SCHEMA
        | ODBC
        | LOCAL_FILES
        | IGNORE_SPACE
        | PROTOCOL_41
        | INTERACTIVE
        | IGNORE_SIGPIPE
        | TRANSACTIONS
        | RESERVED
        | SECURE_CONNECTION
        | MULTI_STATEMENTS
        | MULTI_RESULTS
        | PS_MULTI_RESULTS
        | PLUGIN_AUTH
        | CONNECT_ATTRS
        | PLUGIN_AUTH_LENENC_CLIENT_DATA
        | SESSION_TRACK
        | DEPRECATE_EOF;

    /// Capabilities a client must have for idgate to talk to it.
    pub const REQUIRED: u32 = PROTOCOL_41 | SECURE_CONNECTION;
}

/// Server status flags (`SERVER_STATUS_*`), found in OK and EOF packets.
pub mod status {
    pub const IN_TRANS: u16 = 1;
    pub const AUTOCOMMIT: u16 = 1 << 1;
    pub const MORE_RESULTS_EXISTS: u16 = 1 << 3;
    pub const CURSOR_EXISTS: u16 = 1 << 6;
    pub const LAST_ROW_SENT: u16 = 1 << 7;
    pub const NO_BACKSLASH_ESCAPES: u16 = 1 << 9;
    pub const IN_TRANS_READONLY: u16 = 1 << 13;
    pub const SESSION_STATE_CHANGED: u16 = 1 << 14;
}

/// Command bytes (`COM_*`), the first byte of every command packet.
pub mod cmd {
    pub const SLEEP: u8 = 0x00;
    pub const QUIT: u8 = 0x01;
    pub const INIT_DB: u8 = 0x02;
    pub const QUERY: u8 = 0x03;
    pub const FIELD_LIST: u8 = 0x04;
    pub const CREATE_DB: u8 = 0x05;
    pub const DROP_DB: u8 = 0x06;
    pub const REFRESH: u8 = 0x07;
    pub const SHUTDOWN: u8 = 0x08;
    pub const STATISTICS: u8 = 0x09;
    pub const PROCESS_INFO: u8 = 0x0a;
    pub const CONNECT: u8 = 0x0b;
    pub const PROCESS_KILL: u8 = 0x0c;
    pub const DEBUG: u8 = 0x0d;
    pub const PING: u8 = 0x0e;
    pub const CHANGE_USER: u8 = 0x11;
    pub const BINLOG_DUMP: u8 = 0x12;
    pub const STMT_PREPARE: u8 = 0x16;
    pub const STMT_EXECUTE: u8 = 0x17;
    pub const STMT_SEND_LONG_DATA: u8 = 0x18;
    pub const STMT_CLOSE: u8 = 0x19;
    pub const STMT_RESET: u8 = 0x1a;
    pub const SET_OPTION: u8 = 0x1b;
    pub const STMT_FETCH: u8 = 0x1c;
    pub const RESET_CONNECTION: u8 = 0x1f;

    /// The command's name as SHOW PROCESSLIST writes it (`Sleep` for
    /// none: any byte without a name).
    pub fn name(command: u8) -> &'static str {
        match command {
            QUIT => "Quit",
            INIT_DB => "Init DB",
            QUERY => "Query",
            FIELD_LIST => "Field List",
            STATISTICS => "Statistics",
            PROCESS_KILL => "Kill",
            PING => "Ping",
            CHANGE_USER => "Change user",
            STMT_PREPARE => "Prepare",
            STMT_EXECUTE => "Execute",
            STMT_SEND_LONG_DATA => "Long Data",
            STMT_CLOSE => "Close stmt",
            STMT_RESET => "Reset stmt",
            SET_OPTION => "Set option",
            STMT_FETCH => "Fetch",
            RESET_CONNECTION => "Reset connection",
            _ => "Sleep",
        }
    }
}

/// Character set id of utf8mb4_general_ci, used when nothing else is known.
pub const DEFAULT_CHARSET: u8 = 45;

/// Largest payload of one physical packet; a payload this long continues in the next packet.
pub const MAX_PAYLOAD: usize = 0xff_ffff;
