use super::cut::{cut_row, Cut, Format, Row, Value};
use super::emit::{decide, write_row, Id, IdPlace};
use super::stmt::{parse, Target};
use crate::sql::lexer::Modes;

/// Every row of `file`, cut with `buf` growing `step` bytes at a time
/// (as packets arrive): each row's fields (`None`: NULL).
fn rows_stepped(
    file: &[u8],
    fmt: &Format,
    columns: usize,
    step: usize,
) -> Vec<Vec<Option<Vec<u8>>>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut have = step.min(file.len());
    loop {
        let eof = have == file.len();
        match cut_row(&file[start..have], eof, fmt, columns, None) {
            Cut::More => {
                assert!(!eof);
                have = (have + step).min(file.len());
            }
            Cut::End => break,
            Cut::Row(r) => {
                out.push(fields_of(&file[start..have], &r, fmt, columns));
                start += r.end;
            }
        }
    }
    out
}

/// The values of `row`'s fields, cut again one by one.
fn fields_of(buf: &[u8], row: &Row, fmt: &Format, columns: usize) -> Vec<Option<Vec<u8>>> {
    (0..row.fields)
        .map(|i| match cut_row(buf, true, fmt, columns, Some(i)) {
            Cut::Row(r) => match r.wanted.map(|f| f.value) {
                Some(Value::Bytes(b)) => Some(b),
                _ => None,
            },
            other => panic!("{other:?}"),
        })
        .collect()
}

fn rows(file: &[u8], fmt: &Format, columns: usize) -> Vec<Vec<Option<Vec<u8>>>> {
    let whole = rows_stepped(file, fmt, columns, file.len().max(1));
    for step in [1, 2, 3, 7] {
        assert_eq!(rows_stepped(file, fmt, columns, step), whole, "step {step}");
    }
    whole
}

fn s(v: &str) -> Option<Vec<u8>> {
    Some(v.as_bytes().to_vec())
}

fn csv() -> Format {
    Format {
        field_term: b",".to_vec(),
        enclosed: Some(b'"'),
        escaped: Some(b'\\'),
        line_start: Vec::new(),
        line_term: b"\r\n".to_vec(),
    }
}

#[test]
fn tab_separated_defaults() {
    let f = Format::default();
    assert_eq!(
        rows(b"1\ta\n\\N\tb\\tc\n3\t\n", &f, 2),
        vec![
            vec![s("1"), s("a")],
            vec![None, s("b\tc")],
            vec![s("3"), s("")]
        ]
    );
    // No terminator at the end; a short line; a long line (rest skipped).
    assert_eq!(
        rows(b"1\n2\tx\ty\tz\n3\tlast", &f, 2),
        vec![vec![s("1")], vec![s("2"), s("x")], vec![s("3"), s("last")]]
    );
    // A field terminator at the very end: the next field is missing, not empty.
    assert_eq!(rows(b"7\t", &f, 2), vec![vec![s("7")]]);
    // Escapes: \0 \Z \b \r \n \\ and an escaped terminator.
    assert_eq!(
        rows(b"a\\0\\Z\\b\\r\\n\\\\\\\tb\tc\n", &f, 2),
        vec![vec![s("a\0\x1a\x08\r\n\\\tb"), s("c")]]
    );
    // An escaped line terminator continues the line.
    assert_eq!(rows(b"a\\\nb\tc\n", &f, 2), vec![vec![s("a\nb"), s("c")]]);
    // \N only alone is NULL; "NULL" is a string without an enclosure.
    assert_eq!(rows(b"x\\N\tNULL\n", &f, 2), vec![vec![s("xN"), s("NULL")]]);
    // Empty file, and a file of one empty line: one row of one empty field.
    assert_eq!(rows(b"", &f, 2), Vec::<Vec<Option<Vec<u8>>>>::new());
    assert_eq!(rows(b"\n", &f, 2), vec![vec![s("")]]);
}

#[test]
fn enclosed_fields() {
    let f = csv();
    assert_eq!(
        rows(
            b"1,\"a,b\"\r\n2,\"say \"\"hi\"\"\"\r\n3,\"line\r\nbreak\"\r\n",
            &f,
            2
        ),
        vec![
            vec![s("1"), s("a,b")],
            vec![s("2"), s("say \"hi\"")],
            vec![s("3"), s("line\r\nbreak")]
        ]
    );
    // NULL unenclosed is NULL; enclosed it is the string.
    assert_eq!(
        rows(b"NULL,\"NULL\"\r\n\\N,\"\\N\"\r\n", &f, 2),
        vec![vec![None, s("NULL")], vec![None, None]]
    );
    // A quote not followed by a terminator stays in the field.
    assert_eq!(
        rows(b"\"a\"b\",c\r\n", &f, 2),
        vec![vec![s("a\"b"), s("c")]]
    );
    // A quote inside an unenclosed field is an ordinary character.
    assert_eq!(rows(b"a\"b,c\r\n", &f, 2), vec![vec![s("a\"b"), s("c")]]);
    // An enclosed field never closed: the rest of the file, quote included.
    assert_eq!(
        rows(b"1,\"abc\r\n", &f, 2),
        vec![vec![s("1"), s("\"abc\r\n")]]
    );
    // Closing quote at the end of the file.
    assert_eq!(rows(b"1,\"abc\"", &f, 2), vec![vec![s("1"), s("abc")]]);
    // Multi-byte characters pass through.
    assert_eq!(
        rows("1,\"é中😀\"\r\n".as_bytes(), &f, 2),
        vec![vec![s("1"), s("é中😀")]]
    );
}

#[test]
fn escape_same_as_enclosure() {
    let f = Format {
        escaped: Some(b'"'),
        ..csv()
    };
    assert_eq!(
        rows(b"\"fie\"\"ld1\",\"x\\ny\"\r\n", &f, 2),
        vec![vec![s("fie\"ld1"), s("x\\ny")]]
    );
}

#[test]
fn line_prefix_and_long_terminators() {
    let f = Format {
        field_term: b"||".to_vec(),
        line_start: b"xxx".to_vec(),
        line_term: b"<eol>".to_vec(),
        ..Format::default()
    };
    assert_eq!(
        rows(
            b"junk<eol>xxx1||a|b<eol>nothing here<eol>pre xxx2||c<eol>",
            &f,
            2
        ),
        vec![vec![s("1"), s("a|b")], vec![s("2"), s("c")]]
    );
}

#[test]
fn ignored_then_rewritten_rows_read_the_same() {
    // A row written again (id replaced, or prepended) reads as the original
    // row with that id.
    let f = csv();
    let file: &[u8] = b"\\N,\"a,b\"\r\n0,x\r\n17,\"q\"\"\"\r\n,\"tail\"";
    let mut start = 0;
    let mut out = Vec::new();
    let mut pre = Vec::new();
    let mut expect = Vec::new();
    let mut n = 100;
    while let Cut::Row(r) = cut_row(&file[start..], true, &f, 2, Some(0)) {
        let buf = &file[start..];
        let id = decide(r.wanted.as_ref(), false).unwrap();
        let gen = match id {
            Id::Generate => {
                n += 1;
                Some(n)
            }
            Id::Explicit(_) => None,
        };
        write_row(&mut out, buf, &r, &f, IdPlace::Field, gen);
        // Prepended: the id in front of the whole row.
        write_row(
            &mut pre,
            buf,
            &r,
            &f,
            IdPlace::Prepend,
            Some(gen.unwrap_or(7)),
        );
        let mut fields = fields_of(buf, &r, &f, 2);
        if let Some(g) = gen {
            fields[0] = s(&g.to_string());
        }
        expect.push(fields);
        start += r.end;
    }
    assert_eq!(
        expect,
        vec![
            vec![s("101"), s("a,b")],
            vec![s("102"), s("x")],
            vec![s("17"), s("q\"")],
            vec![s("103"), s("tail")]
        ]
    );
    assert_eq!(rows(&out, &f, 2), expect);
    assert_eq!(out, b"101,\"a,b\"\r\n102,x\r\n17,\"q\"\"\"\r\n103,\"tail\"");
    let again = rows(&pre, &f, 3);
    assert_eq!(again[0], vec![s("101"), None, s("a,b")]);
    assert_eq!(again[2], vec![s("7"), s("17"), s("q\"")]);
}

#[test]
fn id_decisions() {
    let field = |v: Option<&str>| super::cut::Field {
        raw: 0..0,
        value: match v {
            Some(v) => Value::Bytes(v.as_bytes().to_vec()),
            None => Value::Null,
        },
    };
    assert_eq!(decide(None, false), Ok(Id::Generate));
    assert_eq!(decide(Some(&field(None)), true), Ok(Id::Generate));
    assert_eq!(decide(Some(&field(Some("0"))), false), Ok(Id::Generate));
    assert_eq!(decide(Some(&field(Some("0"))), true), Ok(Id::Explicit(0)));
    assert_eq!(decide(Some(&field(Some(""))), false), Ok(Id::Generate));
    assert_eq!(
        decide(Some(&field(Some(" 42 "))), false),
        Ok(Id::Explicit(42))
    );
    assert_eq!(
        decide(Some(&field(Some("4.5"))), false),
        Ok(Id::Explicit(5))
    );
    assert_eq!(
        decide(Some(&field(Some("-3"))), false),
        Ok(Id::Explicit(-3))
    );
    assert!(decide(Some(&field(Some("99999999999999999999999"))), false).is_err());
}

#[test]
fn statements() {
    let m = Modes::default();
    let sql = "LOAD DATA LOCAL INFILE '/tmp/a.csv' REPLACE INTO TABLE shop.orders CHARACTER SET utf8mb4 FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '\\\\' LINES STARTING BY '>' TERMINATED BY '\\r\\n' IGNORE 2 LINES (sku, @v, `note`) SET qty = IF(@v = '', 0, @v), price = 1";
    let (into, st) = parse(sql, m).unwrap();
    assert_eq!(
        (into.schema.as_deref(), into.table.as_str()),
        (Some("shop"), "orders")
    );
    let st = st.unwrap();
    assert!(st.local);
    assert_eq!(st.format.field_term, b",");
    assert_eq!(st.format.enclosed, Some(b'"'));
    assert_eq!(st.format.escaped, Some(b'\\'));
    assert_eq!(st.format.line_start, b">");
    assert_eq!(st.format.line_term, b"\r\n");
    assert_eq!(st.ignore_lines, 2);
    assert_eq!(st.charset.as_deref(), Some("utf8mb4"));
    assert_eq!(
        st.targets,
        Some(vec![
            Target::Column("sku".into()),
            Target::Var,
            Target::Column("note".into())
        ])
    );
    assert_eq!(st.set_columns, vec!["qty".to_string(), "price".to_string()]);
    assert_eq!(
        st.shard_sql(sql, Some("`id`")).unwrap(),
        "LOAD DATA LOCAL INFILE '/tmp/a.csv' REPLACE INTO TABLE shop.orders CHARACTER SET utf8mb4 FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '\\\\' LINES STARTING BY '>' TERMINATED BY '\\r\\n'  (`id`, sku, @v, `note`) SET qty = IF(@v = '', 0, @v), price = 1"
    );
    let (_, st) = parse("load data infile 'x' into table t fields escaped by ''", m).unwrap();
    let st = st.unwrap();
    assert!(!st.local);
    assert_eq!(st.format.escaped, None);
    assert_eq!(
        st.shard_sql(
            "load data infile 'x' into table t fields escaped by ''",
            Some("`id`")
        ),
        None
    );
    let (into, _) = parse("LOAD XML LOCAL INFILE 'x' INTO TABLE t", m).unwrap();
    assert!(into.xml);
    assert!(parse("SELECT 1", m).is_none());
    assert!(parse("LOAD INDEX INTO CACHE t", m).is_none());
    let (_, st) = parse(
        "LOAD DATA LOCAL INFILE 'x' INTO TABLE t FIELDS ENCLOSED BY 'ab'",
        m,
    )
    .unwrap();
    assert!(st.unwrap_err().contains("single character"));
    let (_, st) = parse("LOAD DATA LOCAL INFILE 'x' INTO TABLE t (a) garbage", m).unwrap();
    assert!(st.unwrap_err().contains("garbage"));
    assert!(Format {
        field_term: Vec::new(),
        ..Format::default()
    }
    .check()
    .is_err());
    assert!(Format::check_charset("sjis").is_err());
    assert!(Format::check_charset("utf8mb4").is_ok());
}

#[test]
fn id_and_shard_key_fields_together() {
    use super::cut::cut_row_keyed;
    let f = csv();
    let Cut::Row(r) = cut_row_keyed(b"\\N,\"k,1\",7\r\n", true, &f, 3, Some(0), Some(1)) else {
        panic!("a row");
    };
    assert_eq!(r.wanted.map(|w| w.value), Some(Value::Null));
    assert_eq!(r.key.map(|k| k.value), Some(Value::Bytes(b"k,1".to_vec())));
    // The same index for both.
    let Cut::Row(r) = cut_row_keyed(b"5,x\r\n", true, &f, 2, Some(0), Some(0)) else {
        panic!("a row");
    };
    assert_eq!(r.wanted.map(|w| w.value), Some(Value::Bytes(b"5".to_vec())));
    assert_eq!(r.key.map(|k| k.value), Some(Value::Bytes(b"5".to_vec())));
    // A short row has no key field.
    let Cut::Row(r) = cut_row_keyed(b"5\r\n", true, &f, 2, Some(0), Some(1)) else {
        panic!("a row");
    };
    assert!(r.key.is_none());
}
