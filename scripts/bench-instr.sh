#!/usr/bin/env bash
# Instructions idgate runs per statement, counted by valgrind's callgrind.
# The count is the same for the same binary and workload however busy the
# machine is, where tps and CPU time move by 5-10% from run to run here; a
# change of a few hundred instructions on the per-statement path (of about
# 16,000 for a relayed INSERT) shows at once. It is no substitute for
# scripts/bench.sh (callgrind counts no syscall, cache miss or wait): use it
# to compare binaries, and bench.sh for what a client sees.
#
#   scripts/bench-instr.sh [options] [BIN ...]
#
# For each BIN (default target/release/idgate): idgate under callgrind,
# multiplexed (`[backend] multiplex = true`), on the test bed's shard s0 and
# etcd (scripts/testbed.sh up), sysbench (4 threads by default, text protocol) for a
# 2 s warm-up, counters zeroed, then --time seconds counted. Prints the
# instructions per statement, and the --top functions with the most
# (inclusive, per statement; inlined code counts for the function it was
# inlined into).
#
# Options:
#   --workload W   insert (default: oltp_insert into a table without a rule,
#                  a pure relay), insert_ids (into a rule table: sysbench
#                  sends id = 0, idgate fills it),
#                  point_select (oltp_point_select),
#                  connect (a client session: log in, SELECT 1, quit;
#                  bench/connect.c, libmariadb, --threads processes;
#                  per session, counted by idgate's caching_sha2_password
#                  logins: every session's, as the default login)
#   --time S       seconds counted (default 12)
#   BIN = haproxy  HAProxy (mode tcp, bench/haproxy.cfg.in, as bench.sh
#                  runs it) instead of an idgate, on the same port and
#                  shard: the peer's instructions per statement, insert
#                  and point_select only (its binary is stripped: no
#                  function list)
#   --top N        functions listed (default 25; 0: the total only)
#   --threads N    sysbench threads (default 4; with more, each take looks
#                  through more idle connections in the pool)
#   --ps           server-side prepared statements (sysbench
#                  --db-ps-mode=auto: COM_STMT_EXECUTE) instead of text
#   --keep DIR     keep each binary's callgrind dump as DIR/BIN.callgrind
#                  (for callgrind_annotate --tree=caller, or self costs)
#   --cache        also simulate the caches (callgrind --cache-sim=yes, the
#                  host's L1 sizes): L1 instruction misses and L1 data read
#                  and write misses per statement, the code and data a
#                  statement touches beyond the L1 (what it evicts from the
#                  L2 and L3 that MariaDB and sysbench share); slower
#
# Environment: IDGATE_TB_S0_PORT, IDGATE_TB_ETCD_PORT (as testbed.sh);
# BENCH_SERVER_EXTRA, lines added to idgate's [server] section (as
# bench.sh: BENCH_SERVER_EXTRA="session_threads = 2"); BENCH_MULTIPLEX=false
# runs idgate without multiplexing (each session keeps its shard
# connection), to see what multiplexing costs per statement;
# BENCH_BACKEND_EXTRA, lines added to [backend] (as bench.sh).
set -euo pipefail
umask 077

repo=$(cd "$(dirname "$0")/.." && pwd)
workload=insert secs=12 top=25 keep= threads=4 ps=disable cache=no
bins=()
while (($#)); do
  case "$1" in
    --workload) workload=$2; shift ;;
    --time) secs=$2; shift ;;
    --top) top=$2; shift ;;
    --keep) keep=$2; shift ;;
    --threads) threads=$2; shift ;;
    --ps) ps=auto ;;
    --cache) cache=yes ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    *) bins+=("$1") ;;
  esac
  shift
done
((${#bins[@]})) || bins=("$repo/target/release/idgate")
case "$workload" in
  insert) db=sbtest_instr lua=oltp_insert ;;
  insert_ids) db=sbtest_instr_ids lua=oltp_insert ;;
  point_select) db=sbtest_instr lua=oltp_point_select ;;
  connect) db=sbtest_instr lua= ;;
  *) echo "unknown workload: $workload (insert, insert_ids, point_select, connect)" >&2; exit 2 ;;
esac
for tool in valgrind callgrind_control callgrind_annotate sysbench mysql; do
  command -v "$tool" >/dev/null || { echo "bench-instr: $tool is missing (apt-get install valgrind sysbench mariadb-client)" >&2; exit 1; }
done

host=127.0.0.1
s0_port=${IDGATE_TB_S0_PORT:-23061}
etcd_port=${IDGATE_TB_ETCD_PORT:-23790}
port=24690 admin_port=24691
log() { printf '[bench-instr] %s\n' "$*" >&2; }
sql_s0() { mysql -h "$host" -P "$s0_port" -u idgate -pidgate -N -e "$1"; }
sql_s0 "SELECT 1" >/dev/null || { log "shard s0 does not answer on $host:$s0_port: scripts/testbed.sh up"; exit 1; }

tmp=$(mktemp -d)
vg_pid=""
cleanup() {
  [ -n "$vg_pid" ] && kill "$vg_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# The tables: sbtest_instr.sbtest1 (AUTO_INCREMENT, 10,000 rows) and
# sbtest_instr_ids.sbtest1 (a rule table: no AUTO_INCREMENT, empty).
sb_s0=(--db-driver=mysql --mysql-host="$host" --mysql-port="$s0_port" --mysql-user=idgate --mysql-password=idgate --tables=1)
sql_s0 "CREATE DATABASE IF NOT EXISTS sbtest_instr; CREATE DATABASE IF NOT EXISTS sbtest_instr_ids"
sysbench oltp_insert "${sb_s0[@]}" --mysql-db=sbtest_instr cleanup >/dev/null 2>&1 || true
sysbench oltp_insert "${sb_s0[@]}" --mysql-db=sbtest_instr --table-size=10000 prepare >/dev/null
sysbench oltp_insert "${sb_s0[@]}" --mysql-db=sbtest_instr_ids cleanup >/dev/null 2>&1 || true
sysbench oltp_insert "${sb_s0[@]}" --mysql-db=sbtest_instr_ids --table-size=0 prepare >/dev/null
sql_s0 "ALTER TABLE sbtest_instr_ids.sbtest1 MODIFY id BIGINT NOT NULL"

mkdir -p "$tmp/rules"
cat >"$tmp/rules/instr.toml" <<EOF
[[generator]]
name = "instr_ids"
kind = "sequence"
batch = 10000

[[table]]
name = "sbtest_instr_ids.sbtest1"
column = "id"
generator = "instr_ids"
EOF
if [ "$workload" = connect ]; then
  command -v mariadb_config >/dev/null || { log "connect needs libmariadb-dev (mariadb_config) for bench/connect.c"; exit 1; }
  # shellcheck disable=SC2046
  cc -O2 -o "$tmp/connect" "$repo/bench/connect.c" $(mariadb_config --cflags --libs)
fi
cat >"$tmp/idgate.toml" <<EOF
[server]
listen = "$host:$port"
admin_listen = "$host:$admin_port"
${BENCH_SERVER_EXTRA:-}

[[users]]
name = "sbtest"
password = "sbtest"

[backend]
user = "idgate"
password = "idgate"
tls = "disabled"
multiplex = ${BENCH_MULTIPLEX:-true}
${BENCH_BACKEND_EXTRA:-}

[[shards]]
name = "s0"
address = "$host:$s0_port"

[allocator]
store = "etcd"
etcd_endpoints = ["http://$host:$etcd_port"]
etcd_prefix = "/idgate-bench-instr-$$"

[rules]
dir = "$tmp/rules"
EOF

sb=(--db-driver=mysql --mysql-host="$host" --mysql-port="$port" --mysql-user=sbtest --mysql-password=sbtest
  --mysql-db="$db" --tables=1 --table-size=10000 --threads="$threads" --db-ps-mode="$ps")
# sysbench sends id = 0 (as bench.sh's insert): MariaDB's AUTO_INCREMENT
# fills it in sbtest_instr, idgate's generator in sbtest_instr_ids.
[ "$lua" = oltp_insert ] && sb+=(--auto-inc=on)

[ "$ps" = auto ] && workload+=" (ps)"
unit=stmt
[ "$workload" = connect ] && unit=session
if [ "$cache" = yes ]; then
  printf '%-12s %-40s %14s %12s %10s %10s %10s\n' workload binary "instr/$unit" "${unit}s" "I1mr/$unit" "D1mr/$unit" "D1mw/$unit"
else
  printf '%-12s %-40s %14s %12s\n' workload binary "instr/$unit" "${unit}s"
fi
for bin in "${bins[@]}"; do
  if [ "$bin" = haproxy ]; then
    case "$workload" in
      insert | point_select) ;;
      *) log "haproxy: the insert and point_select workloads only (it fills no id, counts no session)"; exit 1 ;;
    esac
    command -v haproxy >/dev/null || { log "haproxy is missing (apt-get install haproxy)"; exit 1; }
    sed -e "s/@PORT@/$port/" -e "s/@BACKEND@/$host:$s0_port/" "$repo/bench/haproxy.cfg.in" >"$tmp/haproxy.cfg"
    cmd=(haproxy -f "$tmp/haproxy.cfg" -db)
  else
    [ -x "$bin" ] || { log "no binary at $bin"; exit 1; }
    cmd=("$bin" serve --config "$tmp/idgate.toml")
  fi
  out=$tmp/cg.out
  # The default log level, as deployed (what a session logs is part of
  # what it costs).
  env -u IDGATE_LOG valgrind --tool=callgrind --callgrind-out-file="$out" --dump-instr=no --cache-sim="$cache" \
    "${cmd[@]}" >"$tmp/idgate.log" 2>&1 &
  vg_pid=$!
  for _ in $(seq 120); do
    mysql -h "$host" -P "$port" -u sbtest -psbtest -N -e "SELECT 1" >/dev/null 2>&1 && break
    kill -0 "$vg_pid" 2>/dev/null || { tail -20 "$tmp/idgate.log" >&2; log "$(basename "$bin") exited"; exit 1; }
    sleep 1
  done
  if [ "$workload" = connect ]; then
    # (awk reads the whole body: grep -q would close the pipe under curl.)
    no_sessions() { curl -fsS "http://$host:$admin_port/metrics" | awk '$0 == "idgate_sessions 0" {f = 1} END {exit !f}'; }
    opened() { curl -fsS "http://$host:$admin_port/metrics" | awk '/^idgate_sha2_logins_total/ {n += $2} END {print n + 0}'; }
    "$tmp/connect" "$host" "$port" sbtest sbtest "$threads" 2 warm >/dev/null
    # Every session of the warm-up has ended once the gauge is back to 0.
    until no_sessions; do sleep 0.2; done
    callgrind_control -z "$vg_pid" >/dev/null 2>&1
    q0=$(opened)
    "$tmp/connect" "$host" "$port" sbtest sbtest "$threads" "$secs" counted >/dev/null
    until no_sessions; do sleep 0.2; done
    callgrind_control -d "$vg_pid" >/dev/null 2>&1
    # The few metrics scrapes after the zeroing are counted too (against
    # thousands of sessions).
    q=$(($(opened) - q0))
  else
    sysbench "$lua" "${sb[@]}" --time=2 run >/dev/null 2>&1
    callgrind_control -z "$vg_pid" >/dev/null 2>&1
    q=$(sysbench "$lua" "${sb[@]}" --time="$secs" run 2>&1 | awk '/queries:/ {print $2}')
    callgrind_control -d "$vg_pid" >/dev/null 2>&1
  fi
  kill "$vg_pid"
  wait "$vg_pid" 2>/dev/null || true
  vg_pid=""
  dump=$(ls -t "$out".* | head -1)
  [ -n "$q" ] && ((q > 0)) || { log "the client ran no $workload through $bin"; exit 1; }
  callgrind_annotate --inclusive=yes --show=Ir "$dump" 2>/dev/null >"$tmp/annotate.txt"
  total=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$tmp/annotate.txt")
  if [ "$cache" = yes ]; then
    # The dump's own totals line: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw.
    read -r -a ev <<<"$(awk '/^events:/ {sub(/^events: */, ""); print; exit}' "$dump")"
    read -r -a tot <<<"$(awk '/^(totals|summary):/ {sub(/^[a-z]+: */, ""); print; exit}' "$dump")"
    per() { # per EVENT: the event's total per statement
      local i
      for i in "${!ev[@]}"; do
        [ "${ev[$i]}" = "$1" ] && { awk -v t="${tot[$i]:-0}" -v q="$q" 'BEGIN {printf "%.1f", t / q}'; return; }
      done
      echo NA
    }
    printf '%-12s %-40s %14.0f %12d %10s %10s %10s\n' "$workload" "$(basename "$bin")" \
      "$(awk -v t="$total" -v q="$q" 'BEGIN {print t / q}')" "$q" "$(per I1mr)" "$(per D1mr)" "$(per D1mw)"
  else
    printf '%-12s %-40s %14.0f %12d\n' "$workload" "$(basename "$bin")" "$(awk -v t="$total" -v q="$q" 'BEGIN {print t / q}')" "$q"
  fi
  if ((top > 0)); then
    # Functions of idgate's own and of its crates (not the runtime's
    # frames that hold every statement), per statement.
    awk -v q="$q" -v top="$top" -v repo="$repo/" '
      /^ *[0-9,]+ \(/ && !/PROGRAM TOTALS|\/rustc\/|std::sys|clone|start_thread|tokio-[0-9.]+\/src\/runtime/ {
        n = $1; gsub(",", "", n)
        line = $0; sub(/^ *[0-9,]+ \( *[0-9.]+%\) +/, "", line); sub(/ \[[^]]*\]$/, "", line)
        sub(/^\/root\/.cargo\/registry\/src\/[^\/]+\//, "", line)
        if (index(line, repo) == 1) line = substr(line, length(repo) + 1)
        printf "    %8.0f  %s\n", n / q, substr(line, 1, 150)
        if (++shown >= top) exit
      }' "$tmp/annotate.txt"
    echo
  fi
  if [ -n "$keep" ]; then
    mkdir -p "$keep"
    cp "$dump" "$keep/$(basename "$bin").callgrind"
  fi
  rm -f "$out".*
done
