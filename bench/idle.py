#!/usr/bin/python3
"""Memory per idle client session of a MySQL-protocol server or proxy.

Opens N client connections (each one authenticated, then left idle), and reads
the server process's resident memory (VmRSS in /proc/PID/status) before and
after. Two phases:

  auth   the connections have only logged in: nothing else was sent, so a proxy
         that opens its backend connection lazily has none yet
         (PyMySQL with autocommit=None sends no query at connect time);
  query  every connection has run one `SELECT 1`, so each session now also
         holds its backend connection, and is idle again.

Prints one line per phase and, with --tsv, appends the figures to a file.
Uses Debian's python3-pymysql: run it with /usr/bin/python3.

  bench/idle.py --port 6033 --user sbtest --password sbtest --pid 1234 -n 1000
"""

import argparse
import resource
import sys
import time

import pymysql


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])  # the kernel reports kB (KiB)
    raise RuntimeError(f"no VmRSS for pid {pid}")


def settle(pid, seconds=1.0):
    """Let the server finish its work, then read RSS."""
    time.sleep(seconds)
    return rss_kib(pid)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", default="")
    ap.add_argument("--database", default=None)
    ap.add_argument("--pid", type=int, required=True,
                    help="process whose VmRSS is measured")
    ap.add_argument("-n", "--connections", type=int, default=1000)
    ap.add_argument("--label", default="server", help="name used in the output")
    ap.add_argument("--target-kib", type=float, default=None,
                    help="print PASS/FAIL against this KiB per session (auth phase)")
    ap.add_argument("--tsv", default=None, help="append results to this file")
    ap.add_argument("--shard-port", type=int, default=None,
                    help="the shard's port: the process's established TCP "
                         "connections to it are counted in each phase")
    args = ap.parse_args()

    def shard_connections():
        """The measured process's established connections to the shard's
        port now (from /proc: its socket inodes in the TCP tables), or None
        without --shard-port."""
        if args.shard_port is None:
            return None
        import os
        inodes = set()
        fds = f"/proc/{args.pid}/fd"
        for fd in os.listdir(fds):
            try:
                link = os.readlink(f"{fds}/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        n = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                rows = open(table).read().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                f = row.split()
                port = int(f[2].rsplit(":", 1)[1], 16)
                if port == args.shard_port and f[3] == "01" and f[9] in inodes:
                    n += 1
        return n

    # Every connection is a file descriptor here (and in the server).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))

    results = []
    conns = []
    # Warm-up: one session opened and closed, so one-time allocations (buffers,
    # pools, lazily built tables) are not charged to the measured sessions.
    c = pymysql.connect(host=args.host, port=args.port, user=args.user,
                        password=args.password, database=args.database,
                        autocommit=None, connect_timeout=10,
                        read_timeout=60, write_timeout=60)
    c.cursor().execute("SELECT 1")
    c.close()

    base = settle(args.pid)
    t0 = time.monotonic()
    failed = 0
    first_error = None
    for _ in range(args.connections):
        try:
            conns.append(pymysql.connect(
                host=args.host, port=args.port, user=args.user,
                password=args.password, database=args.database,
                autocommit=None, connect_timeout=10,
                read_timeout=60, write_timeout=60))
        except pymysql.MySQLError as e:
            failed += 1
            first_error = first_error or repr(e)
    connect_s = time.monotonic() - t0
    n = len(conns)
    if n == 0:
        print(f"[idle] {args.label}: no connection succeeded: {first_error}",
              file=sys.stderr)
        return 1
    after_auth = settle(args.pid)
    results.append(("auth", n, base, after_auth, shard_connections()))

    qfailed = 0
    for c in conns:
        try:
            with c.cursor() as cur:
                cur.execute("SELECT 1")
                cur.fetchall()
        except pymysql.MySQLError as e:
            qfailed += 1
            first_error = first_error or repr(e)
    after_query = settle(args.pid)
    results.append(("query", n - qfailed, base, after_query, shard_connections()))

    for c in conns:
        try:
            c.close()
        except Exception:
            pass
    after_close = settle(args.pid, 2.0)

    print(f"[idle] {args.label} (pid {args.pid}): {n} sessions opened in "
          f"{connect_s:.1f} s, {failed} refused"
          + (f" (first error: {first_error})" if first_error else ""))
    lines = []
    for phase, count, before, after, on_shard in results:
        per = (after - before) / max(count, 1)
        desc = {"auth": "idle after login only        ",
                "query": "idle after one SELECT 1      "}[phase]
        verdict = ""
        if args.target_kib is not None and phase == "auth":
            verdict = (f"   target <= {args.target_kib:g} KiB: "
                       + ("PASS" if per <= args.target_kib else "FAIL"))
        shard = "" if on_shard is None else f", shard connections {on_shard}"
        print(f"[idle] {args.label}: {desc} RSS {before} -> {after} KiB: "
              f"{per:7.1f} KiB/session{verdict}{shard}")
        lines.append(f"idle\t{args.label}\t{phase}\t{count}\t{before}\t{after}\t{per:.1f}\n")
    print(f"[idle] {args.label}: after closing them all: RSS {after_close} KiB")
    if args.tsv:
        with open(args.tsv, "a") as f:
            f.writelines(lines)
    return 0 if failed == 0 and qfailed == 0 else 2


if __name__ == "__main__":
    sys.exit(main())
