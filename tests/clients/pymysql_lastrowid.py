#!/usr/bin/python3
"""PyMySQL through idgate: cursor.lastrowid must be the id stored in the row.

Usage: pymysql_lastrowid.py HOST PORT USER PASSWORD DB
Table `t` (id BIGINT PRIMARY KEY without AUTO_INCREMENT, k VARCHAR(64)) has
an idgate rule on `id`. Prints one line per check and "OK <n>" at the end;
exits non-zero at the first failure.
"""
import sys

import pymysql

host, port, user, password, db = sys.argv[1:6]
# connect_timeout: the driver's 10 s default, raised so that a loaded CI
# machine cannot fail the test.
conn = pymysql.connect(host=host, port=int(port), user=user, password=password,
                       database=db, autocommit=True, connect_timeout=60)
checks = 0


def stored(cur, k):
    cur.execute("SELECT id FROM t WHERE k = %s", (k,))
    rows = cur.fetchall()
    assert len(rows) == 1, f"{k}: {rows}"
    return rows[0][0]


def check(what, got, want):
    global checks
    if got != want:
        print(f"FAIL {what}: lastrowid {got!r}, stored {want!r}")
        sys.exit(1)
    checks += 1
    print(f"ok {what}: {got}")


with conn.cursor() as cur:
    # Single rows: column omitted, NULL, 0, a parameter bound to None.
    cur.execute("INSERT INTO t (k) VALUES (%s)", ("py1",))
    check("omitted", cur.lastrowid, stored(cur, "py1"))
    cur.execute("INSERT INTO t (id, k) VALUES (NULL, %s)", ("py2",))
    check("NULL", cur.lastrowid, stored(cur, "py2"))
    cur.execute("INSERT INTO t (id, k) VALUES (0, %s)", ("py3",))
    check("0", cur.lastrowid, stored(cur, "py3"))
    cur.execute("INSERT INTO t (id, k) VALUES (%s, %s)", (None, "py4"))
    check("None", cur.lastrowid, stored(cur, "py4"))
    cur.execute("INSERT INTO t SET k = %s", ("py5 it's \\ ü",))
    check("SET with escapes", cur.lastrowid, stored(cur, "py5 it's \\ ü"))
    cur.execute("SELECT LAST_INSERT_ID()")
    check("LAST_INSERT_ID()", cur.fetchone()[0], stored(cur, "py5 it's \\ ü"))

    # executemany of an INSERT ... VALUES: PyMySQL sends one multi-row
    # INSERT; lastrowid is the first row's id, as with AUTO_INCREMENT.
    rows = [(f"pyb{i}",) for i in range(50)]
    n = cur.executemany("INSERT INTO t (k) VALUES (%s)", rows)
    lastrowid = cur.lastrowid
    assert n == len(rows), n
    ids = [stored(cur, k) for (k,) in rows]
    check("executemany first id", lastrowid, ids[0])
    assert len(set(ids)) == len(ids), "distinct ids"
    assert ids == sorted(ids), f"ids in row order: {ids}"
    checks += 1

    # executemany that PyMySQL cannot batch (no VALUES clause it recognizes):
    # one statement per row; lastrowid is the last one's.
    rows = [(f"pyc{i}",) for i in range(5)]
    cur.executemany("INSERT INTO t SET k = %s", rows)
    check("executemany one by one", cur.lastrowid, stored(cur, rows[-1][0]))

    # An explicit id is kept; the next generated one is above it.
    cur.execute("INSERT INTO t (id, k) VALUES (%s, %s)", (9000000000, "pyx"))
    check("explicit", cur.lastrowid, 9000000000)
    cur.execute("INSERT INTO t (k) VALUES (%s)", ("pyd",))
    lastrowid = cur.lastrowid
    check("after explicit", lastrowid, stored(cur, "pyd"))
    assert lastrowid > 9000000000, lastrowid
    checks += 1

conn.close()
print(f"OK {checks}")
