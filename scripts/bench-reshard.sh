#!/usr/bin/env bash
# Issue 18's resharding measurement, on the test bed (scripts/testbed.sh up
# first, with the usual IDGATE_TB_* exports):
#
# 1. Copy rate. `bench.big` on s0: ROWS rows (id, k, c CHAR(120), pad
#    CHAR(60): sysbench's table), its rule unsharded. Each round:
#    - `idgate reshard --shards s0,s1 --max-rows-per-second 0 --no-cutover`
#      (no throttle: plan, copy, catch-up, verify), then `--abort`; its
#      copy phase's rows per second, as the mover reports it;
#    - by hand, between the same shards: `INSERT INTO bench.t SELECT ...
#      FROM bench.big` through idgate, `bench.t` sharded by id over s0, s1
#      (idgate's INSERT ... SELECT: the source read through a cursor, the
#      rows written to both shards in one XA);
#    - the same statement directly on s0 into `bench.ref` (one server, no
#      network hop: the floor of writing the rows at all).
# 2. Applications during a move. `bench.sbtest1` on s0 (ROWS rows, unsharded
#    rule): sysbench oltp_insert through idgate (THREADS threads, SECS s)
#    before the move, then again while `idgate reshard --shards s0,s1
#    --no-cutover` copies it at the default throttle (the inserts go into
#    the table being moved: its triggers log every one); the rate during
#    the move as a fraction of the rate before it. The move is aborted
#    afterwards.
#
#   scripts/bench-reshard.sh [--rows N] [--rounds N] [--secs S] [--threads N] [--skip-copy] BIN
#
# --skip-copy: part 2 only.
#
# BIN: the idgate binary (e.g. target/release/idgate).
set -euo pipefail
ROWS=1000000
ROUNDS=3
SECS=20
THREADS=8
SKIP_COPY=
BIN=
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --secs) SECS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --skip-copy) SKIP_COPY=1; shift ;;
    *) BIN=$1; shift ;;
  esac
done
[ -n "$BIN" ] || { echo "usage: $0 [--rows N] [--rounds N] [--secs S] [--threads N] BIN" >&2; exit 2; }
BIN=$(realpath "$BIN")
cd "$(dirname "$0")/.."
eval "$(scripts/testbed.sh env)"
S0=$IDGATE_TEST_S0 S1=$IDGATE_TEST_S1
U=$IDGATE_TEST_USER P=$IDGATE_TEST_PASSWORD
WORK=$(mktemp -d)
PID=
MOVER=
cleanup() {
  [ -z "$MOVER" ] || kill "$MOVER" 2>/dev/null || true
  [ -z "$PID" ] || kill "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

sql() { # sql HOST:PORT STATEMENTS
  mariadb -h "${1%:*}" -P "${1#*:}" -u "$U" -p"$P" --batch --skip-column-names -e "$2"
}

SB="id BIGINT UNSIGNED NOT NULL PRIMARY KEY, k INT NOT NULL DEFAULT 0,
  c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', KEY k_1 (k)"
FILL="SELECT seq, seq % 100000, CONCAT(REPEAT(CHAR(97 + seq % 26), 100), seq),
  REPEAT(CHAR(98 + seq % 20), 59) FROM seq_1_to_$ROWS"
echo "== data: bench.big and bench.sbtest1 on s0 ($ROWS rows each); bench.t on s0+s1; bench.ref on s0"
for s in "$S0" "$S1"; do
  sql "$s" "DROP DATABASE IF EXISTS bench; CREATE DATABASE bench; CREATE TABLE bench.t ($SB)"
done
sql "$S0" "USE bench; CREATE TABLE bench.big ($SB); INSERT INTO bench.big $FILL;
  CREATE TABLE bench.sbtest1 ($SB); INSERT INTO bench.sbtest1 $FILL;
  CREATE TABLE bench.ref ($SB)"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
MP=$(port)
PREFIX="/bench-reshard-$$/"
mkdir -p "$WORK/rules"
cat >"$WORK/rules/bench.toml" <<EOF
[[generator]]
name = "bench"
kind = "sequence"
batch = 1000
start = 100000000

[[table]]
name = "bench.big"
column = "id"
generator = "bench"

[[table]]
name = "bench.sbtest1"
column = "id"
generator = "bench"

[[table]]
name = "bench.t"
column = "id"
generator = "bench"
shard_key = "id"
sharding = "mod"
shards = ["s0", "s1"]
EOF
cat >"$WORK/idgate.toml" <<EOF
[server]
listen = "127.0.0.1:$MP"

[[users]]
name = "app"
password = "secret"

[backend]
user = "$U"
password = "$P"

[[shards]]
name = "s0"
address = "$S0"

[[shards]]
name = "s1"
address = "$S1"

[allocator]
store = "etcd"
etcd_endpoints = ["$IDGATE_TEST_ETCD"]
etcd_prefix = "$PREFIX"

[rules]
source = "etcd"
EOF
chmod 600 "$WORK/idgate.toml"
"$BIN" rules push "$WORK/rules" --config "$WORK/idgate.toml" >/dev/null
IDGATE_LOG=warn "$BIN" serve --config "$WORK/idgate.toml" >"$WORK/log" 2>&1 &
PID=$!
for _ in $(seq 1 200); do
  mariadb -h 127.0.0.1 -P "$MP" -u app -psecret -e "SELECT 1" >/dev/null 2>&1 && break
  sleep 0.1
done

reshard() { "$BIN" reshard --config "$WORK/idgate.toml" "$@"; }
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
timed() { # timed HOST PORT USER PASS SQL -> seconds
  local t0 t1 out
  t0=$(date +%s.%N)
  out=$(mariadb -h "$1" -P "$2" -u "$3" -p"$4" -vvv -e "$5" 2>&1) || { echo "$out" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$out" | grep -q "Records: $ROWS " || { echo "unexpected reply: $out" >&2; exit 1; }
  echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }'
}

if [ -z "$SKIP_COPY" ]; then
echo "== 1. copy rate, $ROWS rows, s0 -> s0+s1 (mod), median of $ROUNDS rounds"
mover=() insel=() direct=()
for r in $(seq 1 "$ROUNDS"); do
  out=$(reshard --table bench.big --shards s0,s1 --max-rows-per-second 0 --no-cutover 2>"$WORK/mover.err") \
    || { cat "$WORK/mover.err" >&2; exit 1; }
  rate=$(echo "$out" | sed -n 's/.*copy [0-9.]* s (\([0-9]*\) rows\/s).*/\1/p')
  [ -n "$rate" ] || { echo "no copy rate in: $out" >&2; exit 1; }
  mover+=("$rate")
  reshard --table bench.big --shards s0,s1 --abort >/dev/null
  for s in "$S0" "$S1"; do sql "$s" "TRUNCATE bench.t"; done
  sql "$S0" "TRUNCATE bench.ref"
  t=$(timed 127.0.0.1 "$MP" app secret "INSERT INTO bench.t (id, k, c, pad) SELECT id, k, c, pad FROM bench.big")
  insel+=("$(echo "$ROWS / $t" | bc -l | awk '{ printf "%.0f", $1 }')")
  t=$(timed "${S0%:*}" "${S0#*:}" "$U" "$P" "INSERT INTO bench.ref SELECT * FROM bench.big")
  direct+=("$(echo "$ROWS / $t" | bc -l | awk '{ printf "%.0f", $1 }')")
  echo "round $r: mover ${mover[-1]} rows/s, idgate INSERT ... SELECT ${insel[-1]} rows/s, direct on s0 ${direct[-1]} rows/s"
done
printf '%-60s %12s\n' "copy" "rows/s"
printf '%-60s %12s\n' "idgate reshard, copy phase (no throttle)" "$(median "${mover[@]}")"
printf '%-60s %12s\n' "INSERT ... SELECT through idgate into bench.t (s0+s1)" "$(median "${insel[@]}")"
printf '%-60s %12s\n' "INSERT ... SELECT directly on s0 (one server)" "$(median "${direct[@]}")"
fi

echo "== 2. sysbench oltp_insert through idgate ($THREADS threads, $SECS s) before and during a move at the default throttle"
sbrun() { # sbrun -> inserts per second
  sysbench oltp_insert --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$MP" \
    --mysql-user=app --mysql-password=secret --mysql-db=bench --tables=1 \
    --auto-inc=on --threads="$THREADS" --time="$SECS" --report-interval=0 run \
    | awk '/queries:/ { gsub(/\(/, "", $3); print $3 }'
}
before=() during=()
for r in $(seq 1 "$ROUNDS"); do
  before+=("$(sbrun)")
  # The binary itself in the background (its pid, not a subshell's).
  "$BIN" reshard --config "$WORK/idgate.toml" --table bench.sbtest1 --shards s0,s1 --no-cutover \
    >"$WORK/move.out" 2>"$WORK/move.err" &
  MOVER=$!
  # The copy under way (its first progress line) before sysbench starts.
  for _ in $(seq 1 600); do grep -q ": copy:" "$WORK/move.err" && break; sleep 0.1; done
  during+=("$(sbrun)")
  grep -q ": copy:" <(tail -n 1 "$WORK/move.err") || echo "(round $r: the copy ended before sysbench did; the rate mixes copy and catch-up)" >&2
  kill "$MOVER" 2>/dev/null || true
  wait "$MOVER" 2>/dev/null || true
  MOVER=
  reshard --table bench.sbtest1 --shards s0,s1 --abort >/dev/null
  echo "round $r: before ${before[-1]} inserts/s, during the move ${during[-1]} inserts/s"
done
mb=$(median "${before[@]}") md=$(median "${during[@]}")
echo "oltp_insert through idgate: before $mb/s, during the move $md/s: $(echo "$md / $mb" | bc -l | awk '{ printf "%.2f", $1 }')x"
for s in "$S0" "$S1"; do sql "$s" "DROP DATABASE bench"; done
