//! idgate's collations (`src/collation/`) against a live MariaDB, character
//! by character: for every Basic Multilingual Plane character (and a sample
//! beyond it), the weights idgate computes equal the server's
//! `WEIGHT_STRING()` for the same character in the same collation; for the
//! `_bin` collations, the character's bytes in the column's character set.
//! And comparisons of strings built from the characters where collations
//! are trickiest (expansions, ignorables, spaces, accents) agree with the
//! server's `STRCMP` in that collation.

mod support;

use idgate::collation::{self, Charset, Collation};
use mysql_async::prelude::Queryable;
use std::cmp::Ordering;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// The characters checked: the BMP without surrogates, and some beyond.
fn characters() -> Vec<u32> {
    (0..0x10000u32)
        .filter(|c| !(0xd800..=0xdfff).contains(c))
        .chain([
            0x10000, 0x1d400, 0x1f600, 0x1f601, 0x20000, 0x2a6d6, 0x10ffff,
        ])
        .collect()
}

/// What the server says of each character in collation `c`: hex of its
/// weight string (for `_bin`: of its bytes in the character set).
async fn server_weights(conn: &mut mysql_async::Conn, c: &Collation) -> Vec<(u32, String)> {
    let cs = c.charset.name();
    let value = format!("CONVERT(CHAR(seq USING utf32) USING {cs})");
    let what = if c.is_binary() {
        format!("HEX({value})")
    } else {
        format!("HEX(WEIGHT_STRING({value} COLLATE {}))", c.name)
    };
    let sql = format!(
        "SELECT seq, {what} FROM seq_0_to_1114111 WHERE seq IN ({})",
        "{}"
    );
    let mut out = Vec::new();
    for chunk in characters().chunks(8192) {
        let list: Vec<String> = chunk.iter().map(u32::to_string).collect();
        let q = sql.replace("{}", &list.join(","));
        let rows: Vec<(u32, Option<String>)> = conn.query(q).await.expect("weights query");
        out.extend(rows.into_iter().map(|(cp, w)| (cp, w.unwrap_or_default())));
    }
    out
}

#[tokio::test]
async fn every_character_weighs_as_on_the_server() {
    let Some(tb) = support::testbed() else { return };
    let mut conn = mysql_async::Conn::new(support::proxy::direct_opts(&tb, 0, Some("mysql")))
        .await
        .expect("connect to shard 0");
    conn.query_drop("SET NAMES utf8mb4").await.unwrap();
    let mut checked = 0;
    for c in collation::ALL
        .iter()
        .filter(|c| c.charset != Charset::Binary)
    {
        let server = server_weights(&mut conn, c).await;
        assert!(server.len() >= 0xf800, "{}: {} rows", c.name, server.len());
        let mut wrong = Vec::new();
        for (cp, want) in &server {
            let s = char::from_u32(*cp).expect("not a surrogate").to_string();
            let mut got = Vec::new();
            c.weights(s.as_bytes(), Charset::Utf8mb4, &mut got);
            if hex(&got) != *want {
                wrong.push(format!("U+{cp:04X}: idgate {} server {want}", hex(&got)));
            }
            checked += 1;
        }
        assert!(
            wrong.is_empty(),
            "{}: {} characters differ, e.g. {:?}",
            c.name,
            wrong.len(),
            &wrong[..wrong.len().min(10)]
        );
    }
    assert!(checked > 15 * 0xf800);
    let _ = conn.disconnect().await;
}

/// Strings of characters where collations differ most.
fn tricky_strings() -> Vec<String> {
    let parts = [
        "", "a", "A", "á", "Å", "ä", "Ä", "ae", "æ", "Æ", "o", "Ö", "ø", "ss", "ß", "S", "e", "é",
        "E", "ê", " ", "  ", "\t", "\u{a0}", "\u{2002}", "\u{200b}", "-", "_", "'", "1", "9", "z",
        "Z", "þ", "ð", "€", "😀", "一", "\u{ffff}", "ı", "İ", "ǅ", "ﬁ", "fi",
    ];
    let mut out = Vec::new();
    for a in parts {
        out.push(a.to_string());
        for b in ["", "a", "ß", " ", "é", "  "] {
            out.push(format!("{a}{b}"));
            out.push(format!("{b}{a}"));
        }
    }
    out.sort();
    out.dedup();
    out
}

#[tokio::test]
async fn comparisons_agree_with_the_server() {
    let Some(tb) = support::testbed() else { return };
    let mut conn = mysql_async::Conn::new(support::proxy::direct_opts(&tb, 0, Some("mysql")))
        .await
        .expect("connect to shard 0");
    conn.query_drop("SET NAMES utf8mb4").await.unwrap();
    let strings = tricky_strings();
    // A deterministic sample of pairs, and every string against its neighbours.
    let mut pairs = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..strings.len() {
        for _ in 0..6 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            pairs.push((i, (x % strings.len() as u64) as usize));
        }
    }
    let lit = |s: &str| format!("X'{}'", hex(s.as_bytes()));
    for c in collation::ALL
        .iter()
        .filter(|c| c.charset != Charset::Binary)
    {
        let cs = c.charset.name();
        let mut mismatches = Vec::new();
        for chunk in pairs.chunks(500) {
            let exprs: Vec<String> = chunk
                .iter()
                .map(|&(i, j)| {
                    format!(
                        "STRCMP(CONVERT(CONVERT({} USING utf8mb4) USING {cs}) COLLATE {n}, CONVERT(CONVERT({} USING utf8mb4) USING {cs}) COLLATE {n})",
                        lit(&strings[i]),
                        lit(&strings[j]),
                        n = c.name
                    )
                })
                .collect();
            let q = format!("SELECT CONCAT_WS(',', {})", exprs.join(","));
            let row: Option<String> = conn.query_first(q).await.expect("strcmp");
            let row = row.unwrap_or_default();
            for (&(i, j), s) in chunk.iter().zip(row.split(',')) {
                let want = match s {
                    "-1" => Ordering::Less,
                    "0" => Ordering::Equal,
                    _ => Ordering::Greater,
                };
                let (a, b) = (&strings[i], &strings[j]);
                let got = c.compare(
                    a.as_bytes(),
                    Charset::Utf8mb4,
                    b.as_bytes(),
                    Charset::Utf8mb4,
                );
                if got != want {
                    mismatches.push(format!("{a:?} vs {b:?}: idgate {got:?} server {want:?}"));
                }
            }
        }
        assert!(
            mismatches.is_empty(),
            "{}: {:?}",
            c.name,
            &mismatches[..mismatches.len().min(10)]
        );
    }
    let _ = conn.disconnect().await;
}
