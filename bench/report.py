#!/usr/bin/python3
"""Summarise a results file written by scripts/bench.sh.

  bench/report.py target/bench/results-YYYYmmdd-HHMMSS.tsv

Rows (tab-separated, '#' lines are comments):
  run   WORKLOAD TARGET ROUND TPS P95_MS WRITES ERRORS [PROXY_CPU_US [S0_CPU_US BUSY_US IDLE_US]]
  idle  LABEL PHASE SESSIONS RSS_BEFORE_KIB RSS_AFTER_KIB KIB_PER_SESSION

For every workload: the median tps and median p95 latency per target, the
ratios of the medians, the spread of the per-round (paired) ratios, and the
targets of issues 2 and 4 beside the ratios they apply to.
"""

import statistics
import sys

# (title, workload in the file, {column label: target in the file}, targets)
# targets: list of (numerator, denominator, minimum ratio)
VIEWS = [
    ("oltp_point_select (text protocol)", "point_select",
     ["direct", "haproxy", "idgate"],
     [("idgate", "haproxy", 1.3), ("idgate", "direct", 0.7)]),
    ("oltp_insert (text protocol, table without a rule: pure relay)", "insert",
     ["direct", "haproxy", "idgate"],
     [("idgate", "haproxy", 1.2), ("idgate", "direct", 0.85)]),
    ("oltp_insert, ids injected (direct/haproxy: MariaDB AUTO_INCREMENT in sbtest; "
     "idgate: rule table sbtest_ids.sbtest1 without AUTO_INCREMENT)", "insert",
     ["direct", "haproxy", "idgate_ids"],
     [("idgate_ids", "haproxy", 1.15), ("idgate_ids", "direct", 0.8)]),
    ("oltp_read_write (server-side prepared statements, --db-ps-mode=auto)",
     "read_write_ps",
     ["direct", "haproxy", "idgate"],
     []),
    ("oltp_point_select, keyed (idgate_sh: sbtest_sh.sbtest1 sharded by id over s0 and s1; "
     "direct/haproxy: the whole table on s0)", "point_select_sharded",
     ["direct", "haproxy", "idgate_sh"],
     [("idgate_sh", "haproxy", 1.2)]),
    ("scatter: SELECT id, k FROM sbtest1 ORDER BY k, id LIMIT 10 (idgate_sh: on both shards, "
     "merged; direct/haproxy: the whole table on s0)", "scatter_select",
     ["direct", "haproxy", "idgate_sh"],
     [("idgate_sh", "direct", None)]),
    ("scatter by a string: SELECT id, c FROM sbtest1 ORDER BY c, id LIMIT 10 (idgate_sh: on both "
     "shards, merged by c's collation; direct/haproxy: the whole table on s0)", "scatter_string",
     ["direct", "haproxy", "idgate_sh"],
     [("idgate_sh", "direct", None)]),
    ("oltp_read_write, prepared, no DISTINCT ranges (idgate_sh: sharded over s0 and s1, every "
     "transaction XA over the shards it touches; direct/haproxy: the whole table on s0)",
     "read_write_sharded",
     ["direct", "haproxy", "idgate_sh"],
     [("idgate_sh", "haproxy", None)]),
]

# Ratios printed for every view even without a target (when both were measured);
# haproxy2 is the A/A control of `scripts/bench.sh --control`: a second,
# identical HAProxy, so haproxy2/haproxy shows how far noise alone goes.
# idgate_base is scripts/bench.sh's IDGATE_BASE_BIN: the same config on a
# binary built before a change; idgate/idgate_base is the change.
# tokio_relay is `scripts/bench.sh --relay` (examples/relay.rs): bytes
# forwarded on idgate's runtime, nothing parsed; tokio_relay/haproxy is the
# runtime's share of a gap, idgate/tokio_relay idgate's own work's.
ALWAYS = [("haproxy", "direct"), ("haproxy2", "haproxy"), ("idgate", "idgate_base"),
          ("tokio_relay", "haproxy"), ("idgate", "tokio_relay")]


def load(path):
    runs = {}
    cpu.clear()
    machine.clear()
    idle = []
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            p = line.rstrip("\n").split("\t")
            if p[0] == "run" and len(p) >= 8:
                _, wl, tgt, rnd, tps, p95, writes, errs = p[:8]
                try:
                    rec = (int(rnd), float(tps), float(p95))
                except ValueError:
                    continue  # a failed run (NA)
                runs.setdefault(wl, {}).setdefault(tgt, []).append(rec)
                # Optional 9th field: the proxy's CPU microseconds per statement.
                if len(p) >= 9 and p[8] not in ("", "NA"):
                    try:
                        cpu.setdefault(wl, {}).setdefault(tgt, []).append(float(p[8]))
                    except ValueError:
                        pass
                # Optional 10th to 12th: s0's CPU, the machine's busy and
                # idle time, microseconds per statement.
                if len(p) >= 12:
                    try:
                        rest = tuple(float(x) if x not in ("", "NA") else None for x in p[9:12])
                    except ValueError:
                        rest = None
                    if rest is not None:
                        machine.setdefault(wl, {}).setdefault(tgt, []).append(rest)
            elif p[0] == "idle" and len(p) >= 7:
                idle.append(p[1:7])
    return runs, idle


# Proxy CPU microseconds per statement, by workload and target (filled by load).
cpu = {}
# (s0 CPU, machine busy, machine idle) microseconds per statement, by
# workload and target (filled by load; older results files have none).
machine = {}


def paired(a, b):
    """Per-round ratios a/b for rounds both targets completed."""
    bm = {r: t for r, t, _ in b}
    return [t / bm[r] for r, t, _ in a if r in bm and bm[r] > 0]


def median_of(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def show_machine(cols, machine_of, cpu_of):
    """Per target: where the machine's time went per statement (medians)."""
    rows = [c for c in cols if machine_of.get(c)]
    if not rows:
        return
    print(f"   {'us/stmt':<12}{'proxy':>8}{'s0':>8}{'client+':>9}{'busy':>8}{'idle':>8}{'all':>8}")
    for c in rows:
        s0 = median_of([m[0] for m in machine_of[c]])
        busy = median_of([m[1] for m in machine_of[c]])
        idle = median_of([m[2] for m in machine_of[c]])
        proxy = median_of(cpu_of.get(c, [])) or 0.0
        rest = busy - proxy - (s0 or 0.0) if busy is not None else None

        def f(v):
            return f"{v:>8.1f}" if v is not None else f"{'-':>8}"
        print(f"   {c:<12}{f(proxy if cpu_of.get(c) else None)}{f(s0)} {f(rest)}{f(busy)}{f(idle)}"
              f"{f(busy + idle if busy is not None and idle is not None else None)}")
    print("   (client+: the machine's busy time less the proxy and s0: sysbench, the kernel's"
          " work not charged to them, etcd, and s1 in the sharded workloads)")


def show_view(title, data, cols, targets, cpu_of=None, machine_of=None):
    cpu_of = cpu_of or {}
    if not any(data.get(c) for c in cols):
        return
    if data.get("haproxy2"):
        cols = cols + ["haproxy2"]
    if data.get("idgate_base") and "idgate" in cols:
        cols = cols + ["idgate_base"]
    if data.get("tokio_relay"):
        cols = cols + ["tokio_relay"]
    print(f"\n== {title}")
    print(f"   {'target':<12}{'rounds':>7}{'median tps':>12}{'median p95 ms':>15}"
          f"{'min tps':>10}{'max tps':>10}{'proxy CPU us/stmt':>19}")
    for c in cols:
        rs = data.get(c)
        if not rs:
            print(f"   {c:<12}{'-':>7}   (not measured)")
            continue
        tps = [t for _, t, _ in rs]
        p95 = [p for _, _, p in rs]
        us = cpu_of.get(c)
        us_s = f"{statistics.median(us):>19.2f}" if us else f"{'-':>19}"
        print(f"   {c:<12}{len(rs):>7}{statistics.median(tps):>12.0f}"
              f"{statistics.median(p95):>15.2f}{min(tps):>10.0f}{max(tps):>10.0f}{us_s}")
    ratios = [(a, b, t) for a, b, t in targets]
    ratios += [(a, b, None) for a, b in ALWAYS if (a, b) not in [(x, y) for x, y, _ in targets]]
    for a, b, goal in ratios:
        if not data.get(a) or not data.get(b):
            if goal is not None:
                print(f"   {a}/{b}: not measured (target >= {goal}x)")
            continue
        ma = statistics.median([t for _, t, _ in data[a]])
        mb = statistics.median([t for _, t, _ in data[b]])
        r = ma / mb if mb else float("nan")
        pr = paired(data[a], data[b])
        spread = (f"  per round {min(pr):.2f}..{max(pr):.2f}" if len(pr) > 1 else "")
        verdict = ""
        if goal is not None:
            verdict = f"  target >= {goal:.2f}x: " + ("PASS" if r >= goal else "FAIL")
            n = min(len(data[a]), len(data[b]))
            if n < 3:
                verdict += f" (only {n} round{'s' if n > 1 else ''}: not conclusive)"
        print(f"   {a + '/' + b:<20} {r:5.2f}x{spread}{verdict}")
    show_machine(cols, machine_of or {}, cpu_of)
    for a, b in [(x, y) for x, y, _ in targets if y == "haproxy"]:
        if cpu_of.get(a) and cpu_of.get(b):
            ca, cb = statistics.median(cpu_of[a]), statistics.median(cpu_of[b])
            print(f"   {a + '/' + b + ' proxy CPU per statement':<20} {ca / cb:5.2f}x"
                  f"  ({ca:.1f} vs {cb:.1f} us; lower is cheaper)")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs, idle = load(sys.argv[1])
    for title, wl, cols, targets in VIEWS:
        show_view(title, runs.get(wl, {}), cols, targets, cpu.get(wl, {}), machine.get(wl, {}))
    if idle:
        print("\n== memory per idle client session (VmRSS delta / sessions)")
        for label, phase, n, before, after, per in idle:
            goal = ""
            if label == "idgate" and phase == "auth":
                goal = "  target <= 64 KiB: " + ("PASS" if float(per) <= 64 else "FAIL")
            print(f"   {label:<10}{phase:<7}{n:>6} sessions  RSS {before:>8} -> {after:>8} KiB"
                  f"  {float(per):8.1f} KiB/session{goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
