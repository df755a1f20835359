//! Values pinned from MariaDB 10.11 (`SELECT HEX(WEIGHT_STRING(...))` and
//! comparisons); `tests/collation_server.rs` checks every character
//! against a live server.

use super::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

fn ws(name: &str, s: &str) -> String {
    let mut out = Vec::new();
    by_name(name)
        .unwrap()
        .weights(s.as_bytes(), Utf8mb4, &mut out);
    hex(&out)
}

fn key(name: &str, s: &[u8], cs: Charset) -> Vec<u8> {
    let mut out = Vec::new();
    by_name(name).unwrap().key(s, cs, &mut out);
    out
}

fn cmp(name: &str, a: &str, b: &str) -> Ordering {
    by_name(name)
        .unwrap()
        .compare(a.as_bytes(), Utf8mb4, b.as_bytes(), Utf8mb4)
}

#[test]
fn weight_strings_match_the_server() {
    assert_eq!(
        ws("utf8mb4_unicode_ci", "Straße é"),
        "0FEA10020FC00E330FEA0FEA0E8B02090E8B"
    );
    assert_eq!(
        ws("utf8mb4_general_ci", "Straße é"),
        "00530054005200410053004500200045"
    );
    // The latin1 column's value arrives as UTF-8 and is converted (€ is 0x80).
    assert_eq!(ws("latin1_swedish_ci", "Straße é€"), "53545241DF45204580");
    assert_eq!(ws("utf8mb4_general_ci", "😀"), "FFFD");
    assert_eq!(ws("utf8mb4_unicode_ci", "😁"), "FFFD");
    assert_eq!(ws("utf8mb4_unicode_ci", "一"), "FB40CE00");
    assert_eq!(ws("utf8mb4_unicode_ci", "\u{3400}"), "FB80B400");
    assert_eq!(ws("utf8mb4_unicode_ci", "\u{0378}"), "FBC08378");
    // A zero-width space is ignorable.
    assert_eq!(ws("utf8mb4_unicode_ci", "\u{200B}"), "");
    assert_eq!(ws("utf8mb4_general_ci", "a  "), "004100200020");
}

#[test]
fn comparisons_match_the_server() {
    use Ordering::*;
    assert_eq!(cmp("utf8mb4_general_ci", "a\t", "a"), Less);
    assert_eq!(cmp("utf8mb4_unicode_ci", "a\t", "a"), Less);
    assert_eq!(cmp("utf8mb4_general_ci", "Å", "a"), Equal);
    assert_eq!(cmp("utf8mb4_general_ci", "Ö", "o"), Equal);
    assert_eq!(cmp("latin1_swedish_ci", "ö", "o"), Greater);
    assert_eq!(cmp("utf8mb4_unicode_ci", "ß", "ss"), Equal);
    assert_eq!(cmp("utf8mb4_general_ci", "ß", "s"), Equal);
    assert_eq!(cmp("utf8mb4_nopad_bin", "a", "a "), Less);
    assert_eq!(cmp("utf8mb4_bin", "a", "a "), Equal);
    assert_eq!(cmp("utf8mb4_bin", "a", "B"), Greater);
    assert_eq!(cmp("utf8mb4_general_ci", "a", "B"), Less);
    assert_eq!(cmp("utf8mb4_general_ci", "éclair", "Eclair  "), Equal);
    assert_eq!(cmp("utf8mb4_general_nopad_ci", "x", "X "), Less);
    assert_eq!(cmp("binary", "a", "a "), Less);
}

#[test]
fn keys_are_equal_exactly_for_equal_strings() {
    let k = |s: &str| key("utf8mb4_general_ci", s.as_bytes(), Utf8mb4);
    assert_eq!(k("bob@x.io"), k("Bob@X.io   "));
    assert_ne!(k("bob@x.io"), k("bob@x.io\t"));
    assert_eq!(k(""), k("   "));
    let u = |s: &str| key("utf8mb4_unicode_ci", s.as_bytes(), Utf8mb4);
    // U+2002 EN SPACE weighs as a space in UCA: trailing, it does not count.
    assert_eq!(u("a"), u("a\u{2002} "));
    assert_eq!(u("Straße"), u("STRASSE"));
    // The same latin1 string given as UTF-8 or as latin1 bytes.
    assert_eq!(
        key("latin1_swedish_ci", "Åke ".as_bytes(), Utf8mb4),
        key("latin1_swedish_ci", b"\xc5KE", Latin1)
    );
    // `_bin` keys are the column charset's bytes without trailing spaces.
    assert_eq!(
        key("utf8mb4_bin", "é  ".as_bytes(), Utf8mb4),
        "é".as_bytes()
    );
    assert_eq!(key("latin1_bin", "é ".as_bytes(), Utf8mb4), b"\xe9");
    assert_eq!(key("binary", b"a ", Binary), b"a ");
}

#[test]
fn invalid_bytes_count_as_question_marks() {
    let k = |s: &[u8]| key("utf8mb4_general_ci", s, Utf8mb4);
    assert_eq!(k(b"a\xff"), k(b"a?"));
    assert_eq!(k(b"a\xe2\x82"), k(b"a?"));
    // utf8mb3 has no 4-byte characters: invalid as utf8mb3 input, and
    // stored as `?` in a utf8mb3 column.
    assert_eq!(
        key("utf8mb3_general_ci", "😀".as_bytes(), Utf8mb3).len(),
        2 * 4
    );
    assert_eq!(
        key("utf8mb3_general_ci", "😀".as_bytes(), Utf8mb4),
        key("utf8mb3_general_ci", b"?", Utf8mb4)
    );
}

#[test]
fn names_and_numbers() {
    assert_eq!(by_name("utf8_general_ci").unwrap().id, 33);
    assert_eq!(by_name("UTF8MB4_UNICODE_CI").unwrap().id, 224);
    assert_eq!(by_id(8).unwrap().name, "latin1_swedish_ci");
    assert!(by_name("utf8mb4_spanish_ci").is_none());
    assert!(by_name("utf8mb4_uca1400_ai_ci").is_none());
    for c in ALL {
        assert_eq!(by_id(c.id).unwrap().name, c.name);
        assert_eq!(by_name(c.name).unwrap().id, c.id);
    }
}

proptest::proptest! {
    #[test]
    fn compare_agrees_with_keys_and_never_panics(
        a in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
        b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
        which in 0..ALL.len(),
    ) {
        let c = &ALL[which];
        for cs in [Utf8mb4, Latin1, Binary] {
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            c.key(&a, cs, &mut ka);
            c.key(&b, cs, &mut kb);
            let o = c.compare(&a, cs, &b, cs);
            proptest::prop_assert_eq!(o == Ordering::Equal, ka == kb);
            proptest::prop_assert_eq!(o, c.compare(&b, cs, &a, cs).reverse());
        }
    }
}
