#!/usr/bin/env bash
# Issue 22's measurements of a scattered read through idgate, on the test bed
# (scripts/testbed.sh up first, with the usual IDGATE_TB_* exports):
#
#  1. `shop.orders` (id BIGINT, note ~150 bytes) sharded by id over s0 and s1,
#     600,000 rows (ROWS), its full copy in one table on s0. The `mariadb`
#     client reads `SELECT id, note FROM orders ORDER BY id` with --quick
#     (it streams) through each idgate binary given, and the same query on
#     the whole table directly on s0. Reported per target: seconds, rows per
#     second, idgate's VmRSS before and VmHWM (peak) after (kB, from
#     /proc/<pid>/status; each idgate is a fresh process).
#  2. With --sysbench: sysbench's bench/scatter.lua (`SELECT id, k FROM
#     sbtest1 ORDER BY k, id LIMIT 10`) against each idgate binary over the
#     same two shards, alternated round by round; the median of the rounds'
#     transactions per second per binary.
#
#   scripts/bench-stream.sh [--rows N] [--rounds N] [--time S] [--sysbench] BIN...
#
# BIN: idgate binaries to compare (e.g. a build of main, then this branch's
# target/release/idgate).
set -euo pipefail
# shellcheck source=scripts/lib/two-shard.sh
. "$(dirname "$0")/lib/two-shard.sh"
ROWS=600000
ROUNDS=5
TIME=10
SYSBENCH=0
BINS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --time) TIME=$2; shift 2 ;;
    --sysbench) SYSBENCH=1; shift ;;
    *) BINS+=("$1"); shift ;;
  esac
done
[ ${#BINS[@]} -gt 0 ] || { echo "usage: $0 [--rows N] [--rounds N] [--time S] [--sysbench] BIN..." >&2; exit 2; }
cd "$(dirname "$0")/.."
eval "$(scripts/testbed.sh env)"
S0=$IDGATE_TEST_S0 S1=$IDGATE_TEST_S1
U=$IDGATE_TEST_USER P=$IDGATE_TEST_PASSWORD
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

sql() { # sql HOST:PORT STATEMENTS
  mariadb -h "${1%:*}" -P "${1#*:}" -u "$U" -p"$P" --batch --skip-column-names -e "$2"
}

echo "== data: shop.orders, $ROWS rows, sharded by id (mod) over s0, s1; shop.orders_all on s0"
i=0
for s in "$S0" "$S1"; do
  sql "$s" "CREATE DATABASE IF NOT EXISTS shop; USE shop; DROP TABLE IF EXISTS orders;
    CREATE TABLE orders (id BIGINT UNSIGNED PRIMARY KEY, note VARCHAR(200) NOT NULL);
    INSERT INTO orders SELECT seq, CONCAT('order ', seq, ' ', REPEAT('x', 130)) FROM seq_1_to_$ROWS WHERE seq % 2 = $i;"
  i=$((i + 1))
done
sql "$S0" "USE shop; DROP TABLE IF EXISTS orders_all;
  CREATE TABLE orders_all (id BIGINT UNSIGNED PRIMARY KEY, note VARCHAR(200) NOT NULL);
  INSERT INTO orders_all SELECT seq, CONCAT('order ', seq, ' ', REPEAT('x', 130)) FROM seq_1_to_$ROWS;"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_idgate BIN DIR: an idgate with orders (and sbtest.sbtest1) sharded over s0, s1.
start_idgate() {
  local bin=$1 dir=$2 mp rp
  mp=$(port); rp=$(port)
  mkdir -p "$dir/rules"
  cat >"$dir/rules/shop.toml" <<EOF
[[generator]]
name = "seq"
kind = "sequence"
batch = 1000

[[table]]
name = "shop.orders"
column = "id"
generator = "seq"
shard_key = "id"
sharding = "mod"

[[table]]
name = "sbtest.sbtest1"
column = "id"
generator = "seq"
shard_key = "id"
sharding = "mod"
EOF
  two_shard_config "$dir/idgate.toml" "$mp" rules idgate.state "resp_listen = \"127.0.0.1:$rp\""
  IDGATE_LOG=warn "$bin" serve --config "$dir/idgate.toml" >"$dir/log" 2>&1 &
  echo "$! $mp"
}

wait_port() {
  for _ in $(seq 1 200); do
    mariadb -h 127.0.0.1 -P "$1" -u app -psecret -e "SELECT 1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "idgate on port $1 did not answer" >&2; exit 1
}

kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

read_all() { # read_all PORT USER PASS TABLE -> seconds
  local t0 t1 n
  t0=$(date +%s.%N)
  n=$(mariadb -h 127.0.0.1 -P "$1" -u "$2" -p"$3" --quick --batch --skip-column-names \
    -e "SELECT id, note FROM shop.$4 ORDER BY id" | wc -l)
  t1=$(date +%s.%N)
  [ "$n" = "$ROWS" ] || { echo "read $n rows, expected $ROWS" >&2; exit 1; }
  echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }'
}

echo "== $ROWS-row SELECT id, note FROM orders ORDER BY id (mariadb --quick)"
printf '%-40s %8s %10s %12s %12s\n' target seconds rows/s "VmRSS kB" "VmHWM kB"
secs=$(read_all "${S0#*:}" "$U" "$P" orders_all)
printf '%-40s %8s %10.0f %12s %12s\n' "direct s0 (orders_all)" "$secs" "$(echo "$ROWS / $secs" | bc -l)" - -
n=0
for bin in "${BINS[@]}"; do
  n=$((n + 1))
  read -r pid mp < <(start_idgate "$bin" "$WORK/i$n")
  PIDS+=("$pid")
  wait_port "$mp"
  mariadb -h 127.0.0.1 -P "$mp" -u app -psecret -e "SELECT id FROM shop.orders ORDER BY id LIMIT 1" >/dev/null
  rss=$(kb "$pid" VmRSS)
  secs=$(read_all "$mp" app secret orders)
  hwm=$(kb "$pid" VmHWM)
  printf '%-40s %8s %10.0f %12s %12s\n' "idgate $(basename "$bin")" "$secs" "$(echo "$ROWS / $secs" | bc -l)" "$rss" "$hwm"
  kill "$pid"; wait "$pid" 2>/dev/null || true
done

[ "$SYSBENCH" = 1 ] || exit 0
echo "== sysbench bench/scatter.lua: ORDER BY k, id LIMIT 10 over two shards, $ROUNDS rounds of ${TIME}s"
for s in "$S0" "$S1"; do
  sql "$s" "DROP DATABASE IF EXISTS sbtest; CREATE DATABASE sbtest; USE sbtest;
    CREATE TABLE sbtest1 (id INT UNSIGNED PRIMARY KEY, k INT UNSIGNED NOT NULL DEFAULT 0,
      c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '', KEY k_1 (k));
    INSERT INTO sbtest1 SELECT seq, (seq * 7919) % 10000, '', '' FROM seq_1_to_10000 WHERE seq % 2 = $([ "$s" = "$S0" ] && echo 0 || echo 1);"
done
ports=()
n=0
for bin in "${BINS[@]}"; do
  n=$((n + 1))
  read -r pid mp < <(start_idgate "$bin" "$WORK/s$n")
  PIDS+=("$pid")
  wait_port "$mp"
  ports+=("$mp")
done
declare -A tps
for r in $(seq 1 "$ROUNDS"); do
  for j in "${!BINS[@]}"; do
    # Rotate the starting binary each round.
    k=$(( (j + r) % ${#BINS[@]} ))
    t=$(sysbench bench/scatter.lua --mysql-host=127.0.0.1 --mysql-port="${ports[$k]}" \
      --mysql-user=app --mysql-password=secret --mysql-db=sbtest --db-ps-mode=disable \
      --threads=8 --time="$TIME" run | awk '/transactions:/ { gsub(/\(/, "", $3); print $3 }')
    tps[$k]="${tps[$k]:-} $t"
  done
done
for k in "${!BINS[@]}"; do
  med=$(echo "${tps[$k]}" | tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  echo "idgate $(basename "${BINS[$k]}"): median $med tps (rounds:${tps[$k]})"
done
