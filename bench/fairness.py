#!/usr/bin/python3
"""How much one client's large INSERTs delay other sessions' short statements.

Opens --probes client sessions that run a keyed one-row SELECT in a loop and
time each one, and (with --big) one more client, in its own process so that
it shares no interpreter lock with the probes, that sends --rows-row INSERTs
(about 120 bytes a row) back to back. Prints the probes' latency percentiles
and how many large INSERTs went through:

    fairness port=P big=B probes=N n=<probe statements> p50=<ms> p99=<ms> max=<ms> big_inserts=<n>

Used to compare idgate's sessions on the shared runtime (`server.session_threads
= 0`) with session threads, where a session never leaves the thread it was
given: run it against both, alternating, with and without --big. The table
must exist on the shard with `id` filled by a rule (ids injected), and the
probe table must hold the row `id = 1`:

    CREATE TABLE fair.big (id BIGINT PRIMARY KEY, k INT, c VARCHAR(120));
    CREATE TABLE fair.small (id INT PRIMARY KEY, v INT); INSERT INTO fair.small VALUES (1, 1);

    bench/fairness.py --port 6033 --table fair.big --big --seconds 8

Uses Debian's python3-pymysql: run it with /usr/bin/python3.
"""
import argparse
import multiprocessing
import threading
import time

import pymysql


def connect(a):
    return pymysql.connect(host=a.host, port=a.port, user=a.user, password=a.password, autocommit=True)


def probe(a, stop, out):
    c = connect(a)
    cur = c.cursor()
    mine = []
    while time.time() < stop:
        t = time.perf_counter()
        cur.execute(a.probe_sql)
        cur.fetchall()
        mine.append(time.perf_counter() - t)
    c.close()
    out.extend(mine)


def inserter(a, stop, done):
    c = connect(a)
    cur = c.cursor()
    pad = "x" * 100
    stmt = f"INSERT INTO {a.table} (id, k, c) VALUES " + ",".join(f"(0,{i},'{pad}')" for i in range(a.rows))
    while time.time() < stop:
        cur.execute(stmt)
        with done.get_lock():
            done.value += 1
    c.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", default="app")
    p.add_argument("--password", default="app-secret")
    p.add_argument("--table", default="fair.big", help="rule table the large INSERTs go to")
    p.add_argument("--rows", type=int, default=5000, help="rows per large INSERT")
    p.add_argument("--probes", type=int, default=4)
    p.add_argument("--probe-sql", default="SELECT v FROM fair.small WHERE id = 1")
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--big", action="store_true", help="send the large INSERTs beside the probes")
    a = p.parse_args()

    stop = time.time() + a.seconds
    done = multiprocessing.Value("i", 0)
    big = None
    if a.big:
        big = multiprocessing.Process(target=inserter, args=(a, stop, done))
        big.start()
    lat = []
    threads = [threading.Thread(target=probe, args=(a, stop, lat)) for _ in range(a.probes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if big:
        big.join()
        if big.exitcode != 0:
            raise SystemExit(f"the large INSERTs failed (exit code {big.exitcode})")
    if not lat:
        raise SystemExit("no probe statement completed")
    lat.sort()

    def q(f):
        return lat[min(len(lat) - 1, int(f * len(lat)))] * 1000

    print(
        f"fairness port={a.port} big={a.big} probes={a.probes} n={len(lat)} "
        f"p50={q(0.5):.2f}ms p99={q(0.99):.2f}ms max={lat[-1] * 1000:.1f}ms big_inserts={done.value}"
    )


if __name__ == "__main__":
    main()
