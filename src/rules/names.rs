//! Which names a rule file may use for generators, tables and columns.

/// Longest MySQL identifier (table, schema and column names).
pub const MAX_IDENT_LEN: usize = 64;

/// Checks a MySQL identifier as written *unquoted* in a rule file: 1 to 64
/// characters, each an ASCII letter, digit, `_` or `$`, or a non-ASCII
/// character (U+0080 and up, as MySQL allows), and not only digits. Names that
/// need backquotes in SQL (spaces, dots, backquotes) cannot be used in rules.
pub fn check_ident(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if name.chars().count() > MAX_IDENT_LEN {
        return Err(format!(
            "{what} `{name}` is longer than {MAX_IDENT_LEN} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || c == '_' || c == '$' || !c.is_ascii()))
    {
        return Err(format!(
            "{what} `{name}` contains {c:?}: use letters, digits, `_` or `$`"
        ));
    }
    if name.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} `{name}` is only digits"));
    }
    Ok(())
}

/// Checks a generator name: 1 to 64 of ASCII letters, digits, `_` and `-`,
/// starting with a letter or `_`. (It names keys in the store, so it is kept
/// to characters that need no escaping anywhere.)
pub fn check_generator_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_IDENT_LEN
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "generator name `{name}` is not valid: 1 to {MAX_IDENT_LEN} ASCII letters, digits, `_` or `-`, starting with a letter or `_`"
        ))
    }
}

/// Splits a `[[table]] name` into (schema, table), checking both parts.
pub fn split_table_name(name: &str) -> Result<(Option<&str>, &str), String> {
    let mut parts = name.split('.');
    let (schema, table) = match (parts.next(), parts.next(), parts.next()) {
        (Some(t), None, _) => (None, t),
        (Some(s), Some(t), None) => (Some(s), t),
        _ => {
            return Err(format!(
                "table name `{name}` has more than one `.`: write `schema.table` or `table`"
            ))
        }
    };
    if let Some(s) = schema {
        check_ident("schema name", s)?;
    }
    check_ident("table name", table)?;
    Ok((schema, table))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idents() {
        assert!(check_ident("t", "orders").is_ok());
        assert!(check_ident("t", "order_2$").is_ok());
        assert!(check_ident("t", "été").is_ok());
        assert!(check_ident("t", "1abc").is_ok());
        assert!(check_ident("t", "123").is_err());
        assert!(check_ident("t", "").is_err());
        assert!(check_ident("t", "a b").is_err());
        assert!(check_ident("t", "a`b").is_err());
        assert!(check_ident("t", &"x".repeat(65)).is_err());
    }

    #[test]
    fn generator_names() {
        assert!(check_generator_name("orders-v2_x").is_ok());
        assert!(check_generator_name("2orders").is_err());
        assert!(check_generator_name("a/b").is_err());
        assert!(check_generator_name("").is_err());
    }

    #[test]
    fn table_names() {
        assert_eq!(
            split_table_name("shop.orders"),
            Ok((Some("shop"), "orders"))
        );
        assert_eq!(split_table_name("orders"), Ok((None, "orders")));
        assert!(split_table_name("a.b.c").is_err());
        assert!(split_table_name(".b").is_err());
        assert!(split_table_name("a.").is_err());
    }
}
