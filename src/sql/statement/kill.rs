//! `KILL [HARD|SOFT] [CONNECTION|QUERY] n`, recognised; `frontend::kill`
//! looks the idgate session up and kills it.

use super::keyword::{contains_ignore_case, first_keyword, keyword_start};

/// A `KILL` statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kill {
    /// `KILL QUERY`: the running statement only.
    pub query: bool,
    /// The idgate connection id.
    pub id: u64,
}

/// Parses `KILL [HARD|SOFT] [CONNECTION|QUERY] n`. `None`: not a KILL;
/// `Some(Err(what))`: a form idgate does not support.
pub fn parse(sql: &[u8]) -> Option<Result<Kill, String>> {
    if &first_keyword(sql) != b"KILL\0\0\0\0" {
        // `/*!... KILL n */` runs on the shard as `KILL n`: refuse it.
        let rest = &sql[keyword_start(sql)..];
        if super::keyword::is_exec_opener(rest) && contains_ignore_case(rest, b"kill") {
            return Some(Err("KILL inside an executable comment".into()));
        }
        return None;
    }
    let sql = &*super::keyword::code(sql);
    let text = std::str::from_utf8(&sql[keyword_start(sql)..]).ok()?;
    let text = text.trim().trim_end_matches(';').trim_end();
    let mut words = text.split_ascii_whitespace();
    words.next()?;
    let mut query = false;
    let mut rest: Vec<&str> = words.collect();
    if rest
        .first()
        .is_some_and(|w| w.eq_ignore_ascii_case("HARD") || w.eq_ignore_ascii_case("SOFT"))
    {
        rest.remove(0);
    }
    match rest.first() {
        Some(w) if w.eq_ignore_ascii_case("CONNECTION") => {
            rest.remove(0);
        }
        Some(w) if w.eq_ignore_ascii_case("QUERY") => {
            query = true;
            rest.remove(0);
            if rest.first().is_some_and(|w| w.eq_ignore_ascii_case("ID")) {
                return Some(Err("KILL QUERY ID (by query id)".into()));
            }
        }
        Some(w) if w.eq_ignore_ascii_case("USER") => {
            return Some(Err("KILL USER".into()));
        }
        _ => {}
    }
    match rest[..] {
        [n] => match n.parse::<u64>() {
            Ok(id) => Some(Ok(Kill { query, id })),
            Err(_) => Some(Err(format!("KILL of {n:?} (give a connection id)"))),
        },
        _ => Some(Err("this form of KILL".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_statements() {
        let k = |query, id| Some(Ok(Kill { query, id }));
        assert_eq!(parse(b"KILL 5"), k(false, 5));
        assert_eq!(parse(b"KILL QUERY 7 /* c */"), k(true, 7));
        assert_eq!(parse(b"kill connection 5;"), k(false, 5));
        assert_eq!(parse(b"KILL QUERY 7"), k(true, 7));
        assert_eq!(parse(b"KILL HARD QUERY 7"), k(true, 7));
        assert_eq!(parse(b"KILL SOFT CONNECTION 9"), k(false, 9));
        assert!(matches!(parse(b"KILL USER app"), Some(Err(_))));
        assert!(matches!(parse(b"KILL QUERY ID 3"), Some(Err(_))));
        assert!(matches!(parse(b"KILL x"), Some(Err(_))));
        assert!(matches!(parse(b"KILL"), Some(Err(_))));
        assert_eq!(parse(b"/* why */ KILL 5"), k(false, 5));
        assert!(matches!(parse(b"/*!KILL 5*/"), Some(Err(_))));
        assert_eq!(parse(b"KILL 5 -- now"), k(false, 5));
        assert_eq!(parse(b"KILLS 5"), None);
        assert_eq!(parse(b"SELECT 1"), None);
    }
}
