//! A view's definition as `information_schema.VIEWS` shows it, read for
//! what [`crate::rules::views`] needs: the tables it may read and its
//! select list's plain column references.
//!
//! MariaDB stores the definition canonically, every table qualified by
//! its schema and every column by its table (or the table's alias):
//! `` select `o`.`id` AS `oid`,`o`.`note` AS `note` from `shop`.`orders` `o` ``.
//! Every dotted name `a.b` or `a.b.c` is taken as table `a.b`: an alias
//! and a column may pair up too, which only ever guards a view too many.

use super::fast;
use super::lexer::{Kind, Lexer, Modes, Token};
use crate::rules::views::ViewDef;

/// Reads view `schema.name`'s `definition`.
pub fn read(schema: &str, name: &str, definition: &str, updatable: bool) -> ViewDef {
    let sql = definition;
    let mut lx = Lexer::new(sql, 0, Modes::default());
    let mut tables: Vec<(String, String)> = Vec::new();
    let mut columns: Vec<(String, String)> = Vec::new();
    // The current dotted chain of names.
    let mut chain: Vec<String> = Vec::new();
    let mut after_dot = false;
    // The select list of the outermost SELECT: one item's tokens at a
    // time, at parenthesis depth 0.
    let mut depth = 0usize;
    let mut in_list = false;
    let mut item: Vec<Token> = Vec::new();
    let mut flush = |chain: &mut Vec<String>| {
        if chain.len() >= 2 {
            let t = (chain[0].clone(), chain[1].clone());
            if !tables.contains(&t) {
                tables.push(t);
            }
        }
        chain.clear();
    };
    while let Some(t) = lx.next_token() {
        if t.kind == Kind::Unterminated {
            break;
        }
        // Dotted names: a name after a `.` extends the chain, any other
        // name starts one, anything else ends it.
        match fast::ident(sql, &t) {
            Some(n) if after_dot => chain.push(n.into_owned()),
            Some(n) => {
                flush(&mut chain);
                chain.push(n.into_owned());
            }
            None if t.is(b'.') && !chain.is_empty() => {}
            None => flush(&mut chain),
        }
        after_dot = t.is(b'.') && !chain.is_empty();
        // The select list.
        match t.kind {
            Kind::Punct(b'(') => depth += 1,
            Kind::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && t.is_word(sql, "SELECT") && columns.is_empty() && item.is_empty() {
            in_list = true;
            continue;
        }
        if in_list && depth == 0 && (t.is(b',') || t.is_word(sql, "FROM")) {
            if let Some(c) = plain_column(sql, &item) {
                columns.push(c);
            }
            item.clear();
            in_list = !t.is_word(sql, "FROM");
            continue;
        }
        if in_list {
            item.push(t);
        }
    }
    flush(&mut chain);
    if in_list {
        if let Some(c) = plain_column(sql, &item) {
            columns.push(c);
        }
    }
    ViewDef {
        schema: schema.to_string(),
        name: name.to_string(),
        updatable,
        tables,
        columns,
    }
}

/// `[[a .] b .] c [AS] alias` (or a bare `c`): `(alias, c)`.
fn plain_column(sql: &str, item: &[Token]) -> Option<(String, String)> {
    let names: Vec<&Token> = item.iter().collect();
    // Cut at AS, or take the last token as the alias after a name.
    let (expr, alias) = match names.iter().position(|t| t.is_word(sql, "AS")) {
        Some(i) => (&names[..i], names.get(i + 1..)?),
        None => (&names[..], &names[names.len()..]),
    };
    // The expression: names separated by dots, nothing else.
    if expr.is_empty() || expr.len() % 2 == 0 {
        return None;
    }
    for (i, t) in expr.iter().enumerate() {
        let ok = if i % 2 == 1 {
            t.is(b'.')
        } else {
            fast::ident(sql, t).is_some()
        };
        if !ok {
            return None;
        }
    }
    let column = fast::ident(sql, expr.last()?)?.into_owned();
    let alias = match alias {
        [a] => fast::ident(sql, a)?.into_owned(),
        [] => column.clone(),
        _ => return None,
    };
    Some((alias, column))
}

#[cfg(test)]
mod tests {
    use super::read;
    use proptest::prelude::*;

    /// Definition-like text: MariaDB's pieces, shuffled.
    fn definitions() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("select "),
                Just("`s`"),
                Just("`o`"),
                Just("`id`"),
                Just("."),
                Just(" AS "),
                Just("`a``b`"),
                Just(","),
                Just(" from "),
                Just("("),
                Just(")"),
                Just("'x"),
                Just("'"),
                Just(" join "),
                Just("id"),
                Just("/*"),
                Just("é"),
            ],
            0..30,
        )
        .prop_map(|v| v.concat())
    }

    proptest! {
        /// Whatever a shard sends as a definition: no panic, every table
        /// named is a pair of names from the text, every column's alias too.
        #[test]
        fn any_definition_reads_without_panic(d in definitions(), updatable in any::<bool>()) {
            let v = read("s", "v", &d, updatable);
            // A name: quoted, or a word of the text (keywords too: they
            // can only guard a view too many).
            let lower = d.to_lowercase().replace("``", "`");
            let from_text = |n: &str| !n.is_empty() && lower.contains(&n.to_lowercase());
            for (a, b) in &v.tables {
                prop_assert!(from_text(a) && from_text(b), "{a}.{b} from {d}");
            }
            for (alias, col) in &v.columns {
                prop_assert!(from_text(alias) && from_text(col), "{alias} {col} from {d}");
            }
            prop_assert_eq!(v.updatable, updatable);
        }
    }

    #[test]
    fn canonical_definitions() {
        let v = read(
            "shop",
            "v",
            "select `shop`.`orders`.`id` AS `id`,`shop`.`orders`.`note` AS `note` from `shop`.`orders`",
            true,
        );
        assert_eq!(v.tables, vec![("shop".into(), "orders".into())]);
        assert_eq!(
            v.columns,
            vec![("id".into(), "id".into()), ("note".into(), "note".into())]
        );
        let v = read(
            "shop",
            "v2",
            "select `o`.`id` AS `oid`,concat(`o`.`note`,'x') AS `n`,`o`.`id` + 1 AS `next` from `shop`.`orders` `o` where `o`.`id` > 5",
            true,
        );
        assert!(v.tables.contains(&("shop".into(), "orders".into())));
        assert_eq!(v.columns, vec![("oid".into(), "id".into())]);
    }

    #[test]
    fn joins_subqueries_and_unquoted_names() {
        let v = read(
            "a",
            "j",
            "select `x`.`id` AS `id` from (`a`.`t1` `x` join `b`.`orders` `y` on(`x`.`k` = `y`.`k`)) where `y`.`id` in (select `c`.`u`.`id` from `c`.`u`)",
            true,
        );
        for t in [("a", "t1"), ("b", "orders"), ("c", "u")] {
            assert!(
                v.tables.contains(&(t.0.into(), t.1.into())),
                "{t:?} in {:?}",
                v.tables
            );
        }
        assert_eq!(v.columns, vec![("id".into(), "id".into())]);
        let v = read("s", "u", "select id, note from shop.orders", true);
        assert!(v.tables.contains(&("shop".into(), "orders".into())));
        assert_eq!(
            v.columns,
            vec![("id".into(), "id".into()), ("note".into(), "note".into())]
        );
    }
}
