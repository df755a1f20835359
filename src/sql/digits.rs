//! Ids written into SQL text: decimal digits without an allocation or a
//! formatter (the per-statement path writes one per generated row).

/// "00" to "99": [`push_u64`] writes two digits per division.
static PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Appends `v` in decimal.
pub(crate) fn push_u64(out: &mut String, mut v: u64) {
    // 20 digits hold u64::MAX; `i` never goes below 0 (saturating anyway).
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut put_pair = |i: usize, pair: u64| {
        let p = pair as usize * 2;
        if let (Some(d), Some(p)) = (buf.get_mut(i..i + 2), PAIRS.get(p..p + 2)) {
            d.copy_from_slice(p);
        }
    };
    while v >= 100 {
        i = i.saturating_sub(2);
        put_pair(i, v % 100);
        v /= 100;
    }
    if v >= 10 {
        i = i.saturating_sub(2);
        put_pair(i, v);
    } else {
        i = i.saturating_sub(1);
        if let Some(b) = buf.get_mut(i) {
            *b = b'0' + v as u8;
        }
    }
    // ASCII digits: pushed as chars, without a UTF-8 check of the buffer.
    out.extend(buf.get(i..).unwrap_or(&[]).iter().map(|&d| char::from(d)));
}
