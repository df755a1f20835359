#!/usr/bin/env bash
# The Redis-protocol id service against redis-server, in one run:
# `redis-benchmark -c 16 -n 200000 INCR orders`, without and with -P 16,
# against idgate's RESP listener (release build, allocator in the test
# bed's etcd) and against redis-server doing its own INCR in memory (no
# persistence). Both are started the same way (a background process on
# 127.0.0.1, nothing pinned). Prints each run, the medians, and the CPU
# time each server spent per INCR (utime+stime from /proc, over the run).
#
#   scripts/bench-resp.sh [RUNS]     (default 5)
#
# Needs the test bed (scripts/testbed.sh up), redis-server and
# redis-benchmark (scripts/test.sh installs them).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
runs=${1:-5}
n=200000
clients=16
eval "$("$repo/scripts/testbed.sh" env)"
etcd=${IDGATE_TEST_ETCD:-http://127.0.0.1:23790}

cargo build --release --locked --bin idgate >&2
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ping() { # port [auth args]
  local port=$1; shift
  for _ in $(seq 1 600); do
    [ "$(redis-cli -p "$port" --no-auth-warning "$@" PING 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  echo "server on $port did not answer" >&2; exit 1
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# idgate
rport=$(free_port)
mkdir -p "$work/rules"
cat >"$work/rules/bench.toml" <<EOF
[[generator]]
name = "orders"
kind = "sequence"
EOF
# idgate refuses a world-readable config that holds a plaintext password.
umask 077
cat >"$work/idgate.toml" <<EOF
[server]
listen = "127.0.0.1:$(free_port)"
resp_listen = "127.0.0.1:$rport"
[[users]]
name = "app"
password = "secret"
[backend]
user = "${IDGATE_TEST_USER:-idgate}"
password = "${IDGATE_TEST_PASSWORD:-idgate}"
[[shards]]
name = "s0"
address = "${IDGATE_TEST_S0:-127.0.0.1:23061}"
[allocator]
store = "etcd"
etcd_endpoints = ["$etcd"]
etcd_prefix = "/bench-resp-$$-$(date +%s)"
[rules]
dir = "rules"
EOF
IDGATE_LOG=warn "$repo/target/release/idgate" serve --config "$work/idgate.toml" 2>"$work/idgate.log" &
idgate_pid=$!
pids+=("$idgate_pid")
wait_ping "$rport" --user app --pass secret

# redis-server
sport=$(free_port)
redis-server --port "$sport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
pids+=("$redis_pid")
wait_ping "$sport"

hz=$(getconf CLK_TCK)
# One benchmark: prints "rps cpu_us_per_request".
bench() { # pid port pipeline [auth args]
  local pid=$1 port=$2 pipe=$3; shift 3
  local t0 t1 out rps
  t0=$(cpu_ticks "$pid")
  out=$(redis-benchmark -h 127.0.0.1 -p "$port" "$@" -c "$clients" -n "$n" -P "$pipe" -q INCR orders 2>/dev/null | tr '\r' '\n' | grep 'requests per second' | tail -1)
  t1=$(cpu_ticks "$pid")
  rps=$(echo "$out" | sed -E 's/.*: ([0-9.]+) requests per second.*/\1/')
  awk -v r="$rps" -v d=$((t1 - t0)) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.0f %.2f\n", r, d / hz * 1e6 / n }'
}
median() { sort -n | awk '{a[NR]=$1} END { print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2 }'; }

echo "redis-benchmark -c $clients -n $n INCR orders; $runs runs each, alternating servers"
for pipe in 1 16; do
  : >"$work/i$pipe"; : >"$work/r$pipe"
  for run in $(seq 1 "$runs"); do
    i=$(bench "$idgate_pid" "$rport" "$pipe" --user app -a secret)
    r=$(bench "$redis_pid" "$sport" "$pipe")
    echo "  -P $pipe run $run: idgate $i   redis-server $r   (req/s, CPU us/INCR)"
    echo "$i" >>"$work/i$pipe"; echo "$r" >>"$work/r$pipe"
  done
  ir=$(cut -d' ' -f1 "$work/i$pipe" | median); rr=$(cut -d' ' -f1 "$work/r$pipe" | median)
  ic=$(cut -d' ' -f2 "$work/i$pipe" | median); rc=$(cut -d' ' -f2 "$work/r$pipe" | median)
  awk -v ir="$ir" -v rr="$rr" -v ic="$ic" -v rc="$rc" -v p="$pipe" 'BEGIN {
    printf "-P %s median: idgate %.0f req/s (%.2f us CPU/INCR), redis-server %.0f req/s (%.2f us CPU/INCR): idgate/redis = %.2fx\n", p, ir, ic, rr, rc, ir / rr }'
done
echo "last id: $(redis-cli -p "$rport" --user app --pass secret --no-auth-warning GET orders) (persisted to etcd in segments)"
