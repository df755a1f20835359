#!/usr/bin/env python3
"""Connection setup rate: N processes each loop connect + SELECT 1 + close
for S seconds against one target; prints one line:
    <label> <connections per second> <plugin the server named> <errors>
Used by scripts/bench-connect.sh (PyMySQL: the client side of
caching_sha2_password's fast path and of mysql_native_password)."""
import argparse
import multiprocessing as mp
import time

import pymysql


def worker(args, deadline, out):
    n = errors = 0
    plugin = ""
    while time.monotonic() < deadline:
        try:
            c = pymysql.connect(host=args.host, port=args.port, user=args.user,
                                password=args.password, connect_timeout=10)
            cur = c.cursor()
            cur.execute("SELECT 1")
            cur.fetchall()
            plugin = c._auth_plugin_name or plugin
            c.close()
            n += 1
        except pymysql.err.MySQLError:
            errors += 1
    out.put((n, errors, plugin))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--procs", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--label", required=True)
    args = p.parse_args()
    out = mp.Queue()
    start = time.monotonic()
    deadline = start + args.seconds
    procs = [mp.Process(target=worker, args=(args, deadline, out)) for _ in range(args.procs)]
    for pr in procs:
        pr.start()
    results = [out.get() for _ in procs]
    for pr in procs:
        pr.join()
    elapsed = time.monotonic() - start
    total = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    plugin = next((r[2] for r in results if r[2]), "-")
    print(f"{args.label} {total / elapsed:.1f} {plugin} {errors}")


if __name__ == "__main__":
    main()
