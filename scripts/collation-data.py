#!/usr/bin/python3
"""Writes src/collation/data/*.bin: the weights of the collations idgate
reproduces, read from a running MariaDB (the test bed's shard 0 by default).

    scripts/collation-data.py [host port user password]

Nothing here is copied from MariaDB's sources: every weight is what the
server's own WEIGHT_STRING() returns for one character. The test
`tests/collation_server.rs` checks the committed files against the server
character by character, so a server whose weights differ is noticed.

Files (little-endian):
- general.bin: utf8mb4_general_ci, (u16 code point, u16 weight) for every
  BMP character whose weight is not its code point.
- unicode.bin: utf8mb4_unicode_ci, for each BMP code point one tag byte:
  0..=8 explicit weights follow as u16, or 0xFD/0xFE/0xFF for the implicit
  weight pair [base + (cp >> 15), (cp & 0x7FFF) | 0x8000] with base
  0xFB40/0xFB80/0xFBC0.
- latin1.bin: for each latin1 byte: u16 Unicode code point, u8 weight in
  latin1_swedish_ci.
"""
import os
import struct
import sys

import pymysql

host, port, user, password = (sys.argv[1:5] if len(sys.argv) >= 5
                              else ("127.0.0.1", "23061", "idgate", "idgate"))
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "collation", "data")
db = pymysql.connect(host=host, port=int(port), user=user, password=password, charset="utf8mb4", database="mysql")
cur = db.cursor()


def bmp_weights(collation):
    cur.execute(
        "SELECT seq, WEIGHT_STRING(CONVERT(CHAR(seq USING utf32) USING utf8mb4) COLLATE %s) "
        "FROM seq_0_to_65535" % collation)
    return {int(cp): bytes(w) for cp, w in cur.fetchall()}


def surrogate(cp):
    return 0xD800 <= cp <= 0xDFFF


general = bmp_weights("utf8mb4_general_ci")
with open(os.path.join(out, "general.bin"), "wb") as f:
    for cp in range(0x10000):
        if surrogate(cp):
            continue
        (w,) = struct.unpack(">H", general[cp])
        if w != cp:
            f.write(struct.pack("<HH", cp, w))

unicode = bmp_weights("utf8mb4_unicode_ci")
with open(os.path.join(out, "unicode.bin"), "wb") as f:
    for cp in range(0x10000):
        raw = unicode[cp] if not surrogate(cp) else b""
        ws = [struct.unpack(">H", raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
        tag = None
        for t, base in ((0xFD, 0xFB40), (0xFE, 0xFB80), (0xFF, 0xFBC0)):
            if ws == [base + (cp >> 15), (cp & 0x7FFF) | 0x8000]:
                tag = t
        if surrogate(cp):
            tag = 0xFF
        if tag is not None:
            f.write(bytes([tag]))
        else:
            assert len(ws) <= 8, (hex(cp), ws)
            f.write(bytes([len(ws)]) + b"".join(struct.pack("<H", w) for w in ws))

cur.execute(
    "SELECT seq, ORD(CONVERT(CONVERT(UNHEX(LPAD(HEX(seq), 2, '0')) USING latin1) USING utf32)), "
    "WEIGHT_STRING(CONVERT(UNHEX(LPAD(HEX(seq), 2, '0')) USING latin1) COLLATE latin1_swedish_ci) "
    "FROM seq_0_to_255")
with open(os.path.join(out, "latin1.bin"), "wb") as f:
    for b, cp, w in sorted(cur.fetchall()):
        f.write(struct.pack("<HB", int(cp), bytes(w)[0]))
print("written to", os.path.normpath(out))
