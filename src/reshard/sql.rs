//! The SQL the mover sends: chunk reads by primary key, the change log and
//! its triggers, the shadow table's CREATE, checksums and the swap. Pure:
//! text in, text out; every identifier backquoted, every string literal
//! escaped.

use super::protocol::{log_table, old_table, shadow_table};
use crate::sql::insel::quote_ident;

/// `name` backquoted.
pub fn q(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    quote_ident(name, &mut s);
    s
}

/// `schema`.`table`, backquoted.
pub fn qualified(schema: &str, table: &str) -> String {
    format!("{}.{}", q(schema), q(table))
}

/// A string literal (quotes and backslashes escaped).
pub fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// The column list `a`, `b`.
pub fn column_list(cols: &[String]) -> String {
    cols.iter().map(|c| q(c)).collect::<Vec<_>>().join(", ")
}

/// The condition "primary key `pk` is after `last`" (literals, one per
/// column), written as a disjunction so that every column's index range
/// is usable: `(a > 1) OR (a = 1 AND b > 2)`. No `last`: true.
pub fn after_key(pk: &[String], last: &[String]) -> String {
    if last.is_empty() || last.len() != pk.len() {
        return "1".into();
    }
    let mut terms = Vec::with_capacity(pk.len());
    for i in 0..pk.len() {
        let mut t: Vec<String> = (0..i)
            .map(|j| format!("{} = {}", q(&pk[j]), last[j]))
            .collect();
        t.push(format!("{} > {}", q(&pk[i]), last[i]));
        terms.push(format!("({})", t.join(" AND ")));
    }
    terms.join(" OR ")
}

/// The condition "primary key in (`lo`, `hi`]" (either end open when
/// empty).
pub fn key_range(pk: &[String], lo: &[String], hi: &[String]) -> String {
    let mut c = after_key(pk, lo);
    if !hi.is_empty() {
        c = format!("({c}) AND NOT ({})", after_key(pk, hi));
    }
    c
}

/// The condition "primary key is one of `keys`".
pub fn key_in(pk: &[String], keys: &[Vec<String>]) -> String {
    if keys.is_empty() {
        return "0".into();
    }
    if pk.len() == 1 {
        let list: Vec<&str> = keys
            .iter()
            .filter_map(|k| k.first().map(String::as_str))
            .collect();
        return format!("{} IN ({})", q(&pk[0]), list.join(", "));
    }
    let list: Vec<String> = keys.iter().map(|k| format!("({})", k.join(", "))).collect();
    format!("({}) IN ({})", column_list(pk), list.join(", "))
}

/// The next chunk of `limit` rows after `last`, in primary-key order.
pub fn chunk_select(
    schema: &str,
    table: &str,
    cols: &[String],
    pk: &[String],
    last: &[String],
    end: &[String],
    limit: usize,
) -> String {
    format!(
        "SELECT {} FROM {} WHERE {} ORDER BY {} LIMIT {limit}",
        column_list(cols),
        qualified(schema, table),
        key_range(pk, last, end),
        column_list(pk)
    )
}

/// The largest primary key of the table (the copy's end on a source: rows
/// above it were written after the triggers began logging, so the
/// catch-up copies them; without the end a copy throttled below the
/// table's insert rate would never finish).
pub fn last_key_select(schema: &str, table: &str, pk: &[String]) -> String {
    let desc: Vec<String> = pk.iter().map(|c| format!("{} DESC", q(c))).collect();
    format!(
        "SELECT {} FROM {} ORDER BY {} LIMIT 1",
        column_list(pk),
        qualified(schema, table),
        desc.join(", ")
    )
}

/// The rows of `keys` (the catch-up's re-read).
pub fn rows_of_keys(
    schema: &str,
    table: &str,
    cols: &[String],
    pk: &[String],
    keys: &[Vec<String>],
) -> String {
    format!(
        "SELECT {} FROM {} WHERE {}",
        column_list(cols),
        qualified(schema, table),
        key_in(pk, keys)
    )
}

/// The change log of `table`: one row per primary key a committed change
/// touched, in `seq` order. `pk` is each primary-key column with its
/// `COLUMN_TYPE`.
pub fn log_create(schema: &str, table: &str, pk: &[(String, String)]) -> String {
    let cols: Vec<String> = pk
        .iter()
        .map(|(c, ty)| format!("{} {ty} NULL", q(c)))
        .collect();
    format!(
        "CREATE TABLE IF NOT EXISTS {} (`_idgate_seq` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, {}) ENGINE=InnoDB",
        qualified(schema, &log_table(table)),
        cols.join(", ")
    )
}

/// The names of the three triggers (insert, update, delete).
pub fn trigger_names(table: &str) -> [String; 3] {
    ["ai", "au", "ad"].map(|k| format!("_idgate_{k}_{table}"))
}

/// The triggers that log the primary keys every committed change touches
/// (OLD and NEW of an update, NEW only when it differs).
pub fn trigger_creates(schema: &str, table: &str, pk: &[String]) -> Vec<String> {
    let log = qualified(schema, &log_table(table));
    let t = qualified(schema, table);
    let cols = column_list(pk);
    let vals = |side: &str| -> String {
        pk.iter()
            .map(|c| format!("{side}.{}", q(c)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let same = pk
        .iter()
        .map(|c| format!("OLD.{0} <=> NEW.{0}", q(c)))
        .collect::<Vec<_>>()
        .join(" AND ");
    let [ai, au, ad] = trigger_names(table);
    vec![
        format!(
            "CREATE TRIGGER {} AFTER INSERT ON {t} FOR EACH ROW INSERT INTO {log} ({cols}) VALUES ({})",
            qualified(schema, &ai),
            vals("NEW")
        ),
        format!(
            "CREATE TRIGGER {} AFTER UPDATE ON {t} FOR EACH ROW BEGIN INSERT INTO {log} ({cols}) VALUES ({}); IF NOT ({same}) THEN INSERT INTO {log} ({cols}) VALUES ({}); END IF; END",
            qualified(schema, &au),
            vals("OLD"),
            vals("NEW")
        ),
        format!(
            "CREATE TRIGGER {} AFTER DELETE ON {t} FOR EACH ROW INSERT INTO {log} ({cols}) VALUES ({})",
            qualified(schema, &ad),
            vals("OLD")
        ),
    ]
}

/// `DROP TRIGGER IF EXISTS` for each of the three.
pub fn trigger_drops(schema: &str, table: &str) -> Vec<String> {
    trigger_names(table)
        .iter()
        .map(|n| format!("DROP TRIGGER IF EXISTS {}", qualified(schema, n)))
        .collect()
}

/// The shadow table's CREATE from the source's `SHOW CREATE TABLE` text:
/// the same definition under the shadow's name.
///
/// # Errors
/// The text does not start with `CREATE TABLE` and a backquoted name.
pub fn shadow_create(show_create: &str, schema: &str, table: &str) -> Result<String, String> {
    let rest = show_create.strip_prefix("CREATE TABLE `").ok_or_else(|| {
        format!("SHOW CREATE TABLE {table}: unexpected text (not CREATE TABLE `...`)")
    })?;
    let b = rest.as_bytes();
    let mut i = 0;
    let end = loop {
        match b.get(i) {
            Some(b'`') if b.get(i + 1) == Some(&b'`') => i += 2,
            Some(b'`') => break i,
            Some(_) => i += 1,
            None => return Err(format!("SHOW CREATE TABLE {table}: the name never ends")),
        }
    };
    Ok(format!(
        "CREATE TABLE IF NOT EXISTS {}{}",
        qualified(schema, &shadow_table(table)),
        rest.get(end + 1..).unwrap_or_default()
    ))
}

/// Each row's checksum: every column, NULL-safe (CONCAT_WS skips NULLs,
/// so a map of which columns are NULL is appended).
pub fn row_crc(cols: &[String]) -> String {
    let nulls: Vec<String> = cols.iter().map(|c| format!("ISNULL({})", q(c))).collect();
    format!(
        "CRC32(CONCAT_WS('#', {}, CONCAT({})))",
        column_list(cols),
        nulls.join(", ")
    )
}

/// Source side of a verified chunk: each row's placement key and checksum.
pub fn crc_rows(schema: &str, table: &str, key: &str, cols: &[String], cond: &str) -> String {
    format!(
        "SELECT {}, {} FROM {} WHERE {cond}",
        q(key),
        row_crc(cols),
        qualified(schema, table)
    )
}

/// Target side: count and XOR of the checksums of the shadow's rows.
pub fn crc_sum(schema: &str, table: &str, cols: &[String], cond: &str) -> String {
    format!(
        "SELECT COUNT(*), COALESCE(BIT_XOR({}), 0) FROM {} WHERE {cond}",
        row_crc(cols),
        qualified(schema, &shadow_table(table))
    )
}

/// The swap on one shard, given which of the table and the shadow exist
/// there: one `RENAME TABLE` (atomic) when both do.
pub fn swap(schema: &str, table: &str, has_table: bool, has_shadow: bool) -> Option<String> {
    let t = qualified(schema, table);
    let old = qualified(schema, &old_table(table));
    let new = qualified(schema, &shadow_table(table));
    match (has_table, has_shadow) {
        (true, true) => Some(format!("RENAME TABLE {t} TO {old}, {new} TO {t}")),
        (true, false) => Some(format!("RENAME TABLE {t} TO {old}")),
        (false, true) => Some(format!("RENAME TABLE {new} TO {t}")),
        (false, false) => None,
    }
}

/// Batched `REPLACE INTO` the shadow: `rows` are `(v1, v2, ...)` texts.
pub fn replace_rows(schema: &str, table: &str, cols: &[String], rows: &[String]) -> String {
    format!(
        "REPLACE INTO {} ({}) VALUES {}",
        qualified(schema, &shadow_table(table)),
        column_list(cols),
        rows.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn chunk_reads_continue_after_the_last_key() {
        let pk = s(&["id"]);
        assert_eq!(
            chunk_select("shop", "orders", &s(&["id", "v"]), &pk, &[], &[], 500),
            "SELECT `id`, `v` FROM `shop`.`orders` WHERE 1 ORDER BY `id` LIMIT 500"
        );
        assert_eq!(
            chunk_select("shop", "orders", &s(&["id", "v"]), &pk, &s(&["41"]), &s(&["90"]), 500),
            "SELECT `id`, `v` FROM `shop`.`orders` WHERE ((`id` > 41)) AND NOT ((`id` > 90)) ORDER BY `id` LIMIT 500"
        );
        assert_eq!(
            last_key_select("shop", "orders", &s(&["a", "b"])),
            "SELECT `a`, `b` FROM `shop`.`orders` ORDER BY `a` DESC, `b` DESC LIMIT 1"
        );
        let pk2 = s(&["a", "b`x"]);
        assert_eq!(
            after_key(&pk2, &s(&["1", "'q'"])),
            "(`a` > 1) OR (`a` = 1 AND `b``x` > 'q')"
        );
        assert_eq!(
            key_range(&pk, &s(&["1"]), &s(&["9"])),
            "((`id` > 1)) AND NOT ((`id` > 9))"
        );
        assert_eq!(key_range(&pk, &[], &[]), "1");
        assert_eq!(key_in(&pk, &[s(&["1"]), s(&["2"])]), "`id` IN (1, 2)");
        assert_eq!(key_in(&pk2, &[s(&["1", "2"])]), "(`a`, `b``x`) IN ((1, 2))");
        assert_eq!(key_in(&pk, &[]), "0");
    }

    #[test]
    fn log_and_triggers() {
        let c = log_create(
            "shop",
            "orders",
            &[("id".into(), "bigint(20) unsigned".into())],
        );
        assert_eq!(c, "CREATE TABLE IF NOT EXISTS `shop`.`_idgate_log_orders` (`_idgate_seq` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, `id` bigint(20) unsigned NULL) ENGINE=InnoDB");
        let t = trigger_creates("shop", "orders", &s(&["id"]));
        assert_eq!(t.len(), 3);
        assert!(t[0].starts_with("CREATE TRIGGER `shop`.`_idgate_ai_orders` AFTER INSERT ON `shop`.`orders` FOR EACH ROW INSERT INTO `shop`.`_idgate_log_orders` (`id`) VALUES (NEW.`id`)"), "{}", t[0]);
        assert!(
            t[1].contains("IF NOT (OLD.`id` <=> NEW.`id`) THEN"),
            "{}",
            t[1]
        );
        assert!(t[2].ends_with("VALUES (OLD.`id`)"), "{}", t[2]);
        assert_eq!(
            trigger_drops("shop", "orders")[1],
            "DROP TRIGGER IF EXISTS `shop`.`_idgate_au_orders`"
        );
    }

    #[test]
    fn shadow_is_the_source_definition_renamed() {
        let show = "CREATE TABLE `ord``ers` (\n  `id` bigint(20) NOT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB";
        assert_eq!(
            shadow_create(show, "shop", "ord`ers").unwrap(),
            "CREATE TABLE IF NOT EXISTS `shop`.`_idgate_new_ord``ers` (\n  `id` bigint(20) NOT NULL,\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB"
        );
        assert!(shadow_create("CREATE VIEW `v` AS", "shop", "v").is_err());
        assert!(shadow_create("CREATE TABLE `never", "shop", "v").is_err());
    }

    #[test]
    fn checksums_and_swaps() {
        assert_eq!(
            row_crc(&s(&["id", "v"])),
            "CRC32(CONCAT_WS('#', `id`, `v`, CONCAT(ISNULL(`id`), ISNULL(`v`))))"
        );
        assert_eq!(
            swap("shop", "orders", true, true).unwrap(),
            "RENAME TABLE `shop`.`orders` TO `shop`.`_idgate_old_orders`, `shop`.`_idgate_new_orders` TO `shop`.`orders`"
        );
        assert_eq!(
            swap("shop", "orders", false, true).unwrap(),
            "RENAME TABLE `shop`.`_idgate_new_orders` TO `shop`.`orders`"
        );
        assert_eq!(swap("shop", "orders", false, false), None);
        assert_eq!(lit("a'b\\c"), "'a''b\\\\c'");
    }
}
