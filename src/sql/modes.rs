//! The session's `sql_mode` flags that change how idgate reads and fills
//! statements (read from the shard, `@@sql_mode`).

/// The `sql_mode` flags that change how statements are read and filled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SqlModes {
    pub no_auto_value_on_zero: bool,
    pub no_backslash_escapes: bool,
    pub ansi_quotes: bool,
}

impl SqlModes {
    /// Reads `@@sql_mode` (a comma-separated list).
    pub fn parse(sql_mode: &str) -> SqlModes {
        let has = |flag: &str| {
            sql_mode
                .split(',')
                .any(|f| f.trim().eq_ignore_ascii_case(flag))
        };
        SqlModes {
            no_auto_value_on_zero: has("NO_AUTO_VALUE_ON_ZERO"),
            no_backslash_escapes: has("NO_BACKSLASH_ESCAPES"),
            ansi_quotes: has("ANSI_QUOTES"),
        }
    }
}

impl SqlModes {
    /// What the lexer needs of them.
    pub fn lexer(self) -> super::lexer::Modes {
        super::lexer::Modes {
            no_backslash_escapes: self.no_backslash_escapes,
            ansi_quotes: self.ansi_quotes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_modes() {
        let m = SqlModes::parse("STRICT_TRANS_TABLES,NO_AUTO_VALUE_ON_ZERO,ANSI_QUOTES");
        assert!(m.no_auto_value_on_zero && m.ansi_quotes && !m.no_backslash_escapes);
        assert_eq!(SqlModes::parse(""), SqlModes::default());
    }
}
