#!/usr/bin/env bash
# Issue 17's INSERT ... SELECT measurement, on the test bed (scripts/testbed.sh
# up first, with the usual IDGATE_TB_* exports):
#
#   `bench.src` on s0: ROWS rows (n INT, s VARCHAR(100) ~60 bytes,
#   d DECIMAL(12,2), dt DATETIME). Each round, alternating which goes first:
#   - through idgate: `INSERT INTO bench.t (n, s, d, dt) SELECT n, s, d, dt
#     FROM bench.src` with `bench.t` sharded by id (mod) over s0 and s1
#     (ids from a sequence generator, rows placed on their shard, one XA);
#   - directly on s0: the same statement into `bench.ref`, the same table
#     with `id BIGINT AUTO_INCREMENT`.
#   Both targets are emptied (TRUNCATE) before each run. Reported: each
#   run's seconds, the medians, rows per second, idgate/direct, and
#   idgate's VmHWM (peak RSS, kB, /proc/<pid>/status) after all rounds.
#
#   scripts/bench-insert-select.sh [--rows N] [--rounds N] BIN
#
# BIN: the idgate binary (e.g. target/release/idgate).
set -euo pipefail
# shellcheck source=scripts/lib/two-shard.sh
. "$(dirname "$0")/lib/two-shard.sh"
ROWS=1000000
ROUNDS=3
BIN=
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) BIN=$1; shift ;;
  esac
done
[ -n "$BIN" ] || { echo "usage: $0 [--rows N] [--rounds N] BIN" >&2; exit 2; }
BIN=$(realpath "$BIN")
cd "$(dirname "$0")/.."
eval "$(scripts/testbed.sh env)"
S0=$IDGATE_TEST_S0 S1=$IDGATE_TEST_S1
U=$IDGATE_TEST_USER P=$IDGATE_TEST_PASSWORD
WORK=$(mktemp -d)
PID=
cleanup() { [ -z "$PID" ] || kill "$PID" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

sql() { # sql HOST:PORT STATEMENTS
  mariadb -h "${1%:*}" -P "${1#*:}" -u "$U" -p"$P" --batch --skip-column-names -e "$2"
}

COLS="n INT NOT NULL, s VARCHAR(100) NOT NULL, d DECIMAL(12,2) NOT NULL, dt DATETIME NOT NULL"
echo "== data: bench.src on s0, $ROWS rows; bench.t sharded over s0, s1; bench.ref (AUTO_INCREMENT) on s0"
for s in "$S0" "$S1"; do
  sql "$s" "DROP DATABASE IF EXISTS bench; CREATE DATABASE bench; USE bench;
    CREATE TABLE t (id BIGINT PRIMARY KEY, $COLS);"
done
sql "$S0" "USE bench;
  CREATE TABLE src ($COLS);
  INSERT INTO src SELECT seq, CONCAT('row ', seq, ' ', REPEAT(CHAR(97 + seq % 26), 48)), seq / 7,
    TIMESTAMP'2026-01-01 00:00:00' + INTERVAL seq SECOND FROM seq_1_to_$ROWS;
  CREATE TABLE ref (id BIGINT AUTO_INCREMENT PRIMARY KEY, $COLS);"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
MP=$(port)
mkdir -p "$WORK/rules"
cat >"$WORK/rules/bench.toml" <<EOF
[[generator]]
name = "bench"
kind = "sequence"
batch = 1000

[[table]]
name = "bench.t"
column = "id"
generator = "bench"
shard_key = "id"
sharding = "mod"
EOF
two_shard_config "$WORK/idgate.toml" "$MP" "$WORK/rules" "$WORK/idgate.state"
IDGATE_LOG=warn "$BIN" serve --config "$WORK/idgate.toml" >"$WORK/log" 2>&1 &
PID=$!
for _ in $(seq 1 200); do
  mariadb -h 127.0.0.1 -P "$MP" -u app -psecret -e "SELECT 1" >/dev/null 2>&1 && break
  sleep 0.1
done

timed() { # timed HOST PORT USER PASS SQL -> seconds (checks the row count)
  local t0 t1 out
  t0=$(date +%s.%N)
  out=$(mariadb -h "$1" -P "$2" -u "$3" -p"$4" -vvv -e "$5" 2>&1) || { echo "$out" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$out" | grep -q "Records: $ROWS " || { echo "unexpected reply: $out" >&2; exit 1; }
  echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }'
}

STMT="INSERT INTO bench.%s (n, s, d, dt) SELECT n, s, d, dt FROM bench.src"
through=() direct=()
for r in $(seq 1 "$ROUNDS"); do
  for s in "$S0" "$S1"; do sql "$s" "TRUNCATE bench.t"; done
  sql "$S0" "TRUNCATE bench.ref"
  run_idgate() { through+=("$(timed 127.0.0.1 "$MP" app secret "$(printf "$STMT" t)")"); }
  run_direct() { direct+=("$(timed "${S0%:*}" "${S0#*:}" "$U" "$P" "$(printf "$STMT" ref)")"); }
  if [ $((r % 2)) = 1 ]; then run_idgate; run_direct; else run_direct; run_idgate; fi
  echo "round $r: idgate ${through[-1]} s, direct ${direct[-1]} s"
done
n0=$(sql "$S0" "SELECT COUNT(*) FROM bench.t") n1=$(sql "$S1" "SELECT COUNT(*) FROM bench.t")
[ $((n0 + n1)) = "$ROWS" ] || { echo "bench.t holds $n0 + $n1 rows, expected $ROWS" >&2; exit 1; }
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
mt=$(median "${through[@]}") md=$(median "${direct[@]}")
hwm=$(awk '$1 == "VmHWM:" { print $2 }' "/proc/$PID/status")
echo "== $ROWS rows, median of $ROUNDS rounds"
printf '%-52s %8s %12s\n' target seconds rows/s
printf '%-52s %8s %12.0f\n' "direct s0, AUTO_INCREMENT" "$md" "$(echo "$ROWS / $md" | bc -l)"
printf '%-52s %8s %12.0f\n' "idgate, sharded over s0+s1 ($n0 + $n1 rows)" "$mt" "$(echo "$ROWS / $mt" | bc -l)"
echo "idgate/direct: $(echo "$md / $mt" | bc -l | awk '{ printf "%.2f", $1 }')x; idgate VmHWM ${hwm} kB"
for s in "$S0" "$S1"; do sql "$s" "DROP DATABASE bench"; done
