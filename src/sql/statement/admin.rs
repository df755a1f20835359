//! idgate's own statements (`SHOW IDGATE GENERATORS`, `IDGATE SET FLOOR`,
//! `IDGATE RESERVE`), recognised; `frontend::admin` runs them.

/// An admin command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admin {
    ShowGenerators,
    /// `SHOW IDGATE RULES`: the table rules in force.
    ShowRules,
    /// `SHOW IDGATE STATUS`: version, rules version, uptime, store, sessions.
    ShowStatus,
    /// `SHOW IDGATE SESSIONS`: idgate's client sessions.
    ShowSessions,
    /// `SHOW IDGATE POOLS`: the shard connection pools.
    ShowPools,
    /// `SHOW IDGATE VIEWS`: the guarded views (updatable, over a rule
    /// table), through which writes of ids are refused.
    ShowViews,
    /// `SHOW IDGATE RESHARD` (or `IDGATE SHOW RESHARD`): the resharding
    /// jobs, and this idgate's pause.
    ShowReshard,
    /// `IDGATE RELOAD RULES`: read the rules directory again.
    ReloadRules,
    SetFloor {
        generator: String,
        value: u64,
    },
    SetFloorFromTables {
        generator: String,
    },
    Reserve {
        generator: String,
        count: u64,
    },
}

impl Admin {
    /// The statement's name when it changes state (it needs the admin
    /// privilege); `None` for the ones that only show.
    pub fn changes_state(&self) -> Option<&'static str> {
        match self {
            Admin::ShowGenerators
            | Admin::ShowRules
            | Admin::ShowStatus
            | Admin::ShowSessions
            | Admin::ShowPools
            | Admin::ShowViews
            | Admin::ShowReshard => None,
            Admin::ReloadRules => Some("IDGATE RELOAD RULES"),
            Admin::SetFloor { .. } | Admin::SetFloorFromTables { .. } => Some("IDGATE SET FLOOR"),
            Admin::Reserve { .. } => Some("IDGATE RESERVE"),
        }
    }
}

/// Why an admin statement was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("idgate: {0}; the admin statements are SHOW IDGATE GENERATORS, SHOW IDGATE RULES, SHOW IDGATE STATUS, SHOW IDGATE SESSIONS, SHOW IDGATE POOLS, SHOW IDGATE VIEWS, SHOW IDGATE RESHARD, IDGATE SET FLOOR <generator> <value>, IDGATE SET FLOOR <generator> FROM TABLES, IDGATE RESERVE <generator> <count>, IDGATE RELOAD RULES")]
pub struct AdminError(pub String);

/// Recognises an admin statement: `None` for any other statement (the cost
/// for those is a look at the first bytes).
pub fn parse(sql: &[u8]) -> Option<Result<Admin, AdminError>> {
    let start = sql.iter().position(|b| !b.is_ascii_whitespace())?;
    let head = sql.get(start..start + 6)?;
    let is_idgate = head.eq_ignore_ascii_case(b"idgate");
    let is_show = head[..4].eq_ignore_ascii_case(b"show")
        && sql
            .get(start + 4..)
            .map(|r| {
                let r = r.trim_ascii_start();
                r.len() >= 6 && r[..6].eq_ignore_ascii_case(b"idgate")
            })
            .unwrap_or(false);
    if !is_idgate && !is_show {
        return None;
    }
    let text = String::from_utf8_lossy(sql);
    let words: Vec<&str> = text
        .trim()
        .trim_end_matches(';')
        .split_ascii_whitespace()
        .collect();
    let kw = |i: usize, k: &str| words.get(i).is_some_and(|w| w.eq_ignore_ascii_case(k));
    let name = |i: usize| -> Result<String, AdminError> {
        words
            .get(i)
            .map(|w| w.trim_matches('`').to_string())
            .ok_or_else(|| AdminError("a generator name is missing".into()))
    };
    let number = |i: usize, what: &str| -> Result<u64, AdminError> {
        words
            .get(i)
            .ok_or_else(|| AdminError(format!("{what} is missing")))?
            .parse()
            .map_err(|_| AdminError(format!("{what} must be a non-negative integer")))
    };
    Some(
        if kw(0, "show") && kw(1, "idgate") && kw(2, "generators") && words.len() == 3 {
            Ok(Admin::ShowGenerators)
        } else if kw(0, "show") && kw(1, "idgate") && kw(2, "rules") && words.len() == 3 {
            Ok(Admin::ShowRules)
        } else if kw(0, "show") && kw(1, "idgate") && kw(2, "status") && words.len() == 3 {
            Ok(Admin::ShowStatus)
        } else if kw(0, "show") && kw(1, "idgate") && kw(2, "sessions") && words.len() == 3 {
            Ok(Admin::ShowSessions)
        } else if kw(0, "show") && kw(1, "idgate") && kw(2, "pools") && words.len() == 3 {
            Ok(Admin::ShowPools)
        } else if kw(0, "show") && kw(1, "idgate") && kw(2, "views") && words.len() == 3 {
            Ok(Admin::ShowViews)
        } else if ((kw(0, "show") && kw(1, "idgate")) || (kw(0, "idgate") && kw(1, "show")))
            && kw(2, "reshard")
            && words.len() == 3
        {
            Ok(Admin::ShowReshard)
        } else if kw(0, "idgate") && kw(1, "reload") && kw(2, "rules") && words.len() == 3 {
            Ok(Admin::ReloadRules)
        } else if kw(0, "idgate") && kw(1, "set") && kw(2, "floor") {
            name(3).and_then(|generator| {
                if kw(4, "from") && kw(5, "tables") && words.len() == 6 {
                    Ok(Admin::SetFloorFromTables { generator })
                } else if words.len() == 5 {
                    Ok(Admin::SetFloor {
                        generator,
                        value: number(4, "the floor value")?,
                    })
                } else {
                    Err(AdminError("unexpected words after IDGATE SET FLOOR".into()))
                }
            })
        } else if kw(0, "idgate") && kw(1, "reserve") && words.len() == 4 {
            name(2).and_then(|generator| {
                Ok(Admin::Reserve {
                    generator,
                    count: number(3, "the count")?,
                })
            })
        } else {
            Err(AdminError(format!("unknown statement {:?}", text.trim())))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_admin_statements() {
        assert_eq!(
            parse(b"show idgate generators;"),
            Some(Ok(Admin::ShowGenerators))
        );
        assert_eq!(
            parse(b"IDGATE SET FLOOR orders 1000"),
            Some(Ok(Admin::SetFloor {
                generator: "orders".into(),
                value: 1000
            }))
        );
        assert_eq!(
            parse(b" idgate set floor `orders` from tables"),
            Some(Ok(Admin::SetFloorFromTables {
                generator: "orders".into()
            }))
        );
        assert_eq!(parse(b"idgate reload rules;"), Some(Ok(Admin::ReloadRules)));
        assert_eq!(parse(b"SHOW IDGATE RULES"), Some(Ok(Admin::ShowRules)));
        assert_eq!(parse(b"show idgate status"), Some(Ok(Admin::ShowStatus)));
        assert_eq!(
            parse(b"SHOW IDGATE SESSIONS"),
            Some(Ok(Admin::ShowSessions))
        );
        assert_eq!(parse(b"show  idgate pools;"), Some(Ok(Admin::ShowPools)));
        assert_eq!(parse(b"SHOW IDGATE RESHARD"), Some(Ok(Admin::ShowReshard)));
        assert_eq!(parse(b"show idgate views;"), Some(Ok(Admin::ShowViews)));
        assert_eq!(parse(b"idgate show reshard;"), Some(Ok(Admin::ShowReshard)));
        assert!(Admin::ReloadRules.changes_state().is_some());
        assert!(Admin::ShowRules.changes_state().is_none());
        assert_eq!(
            parse(b"IDGATE RESERVE orders 500"),
            Some(Ok(Admin::Reserve {
                generator: "orders".into(),
                count: 500
            }))
        );
    }

    #[test]
    fn other_statements_are_not_admin_and_bad_ones_are_errors() {
        assert_eq!(parse(b"SELECT 1"), None);
        assert_eq!(parse(b"SHOW TABLES"), None);
        assert_eq!(parse(b"show"), None);
        assert_eq!(parse(b"idgat"), None);
        assert!(matches!(parse(b"IDGATE RESERVE orders -1"), Some(Err(_))));
        assert!(matches!(parse(b"IDGATE SET FLOOR"), Some(Err(_))));
        assert!(matches!(parse(b"SHOW IDGATE NODES"), Some(Err(_))));
    }
}
