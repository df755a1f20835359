#!/usr/bin/env bash
# The shard connection pool under many clients (#19): CLIENTS clients at
# once (default 4000), each ITERATIONS times connect + 3 statements +
# disconnect (examples/pool_load.rs, mysql_async), through idgate with
# [backend] pool_max = 64 and pool_wait_timeout_ms = 5000, against shard s0
# with max_connections = 200 (set for the run, restored after). Prints the
# client's line (errors by code, connect latency: p50/p99/max, which
# includes the wait for a pooled shard connection) and idgate's pool
# metrics (most connections open, waits, 1040s given).
#
#   scripts/bench-pool.sh [--clients N] [--iterations K] [--multiplex] [--no-build]
#
# --multiplex: [backend] multiplex = true (a session gives its shard
# connection back after each statement, not when it disconnects).
#
# Uses the test bed and the release binary (cargo build --release unless
# --no-build). Not a test: how long clients wait depends on the machine.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
clients=4000 iterations=5 do_build=1 multiplex=false
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) clients=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --multiplex) multiplex=true; shift ;;
    --no-build) do_build=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
log() { printf '[bench-pool] %s\n' "$*" >&2; }
eval "$("$repo/scripts/testbed.sh" env)"
host=127.0.0.1
s0=$IDGATE_TEST_S0 user=$IDGATE_TEST_USER password=$IDGATE_TEST_PASSWORD
sql() { mariadb --no-defaults --protocol=tcp -h"${s0%:*}" -P"${s0#*:}" -u"$user" -p"$password" -N -e "$1"; }
sql 'SELECT 1' >/dev/null 2>&1 || "$repo/scripts/testbed.sh" up
if ((do_build)); then log "cargo build --release"; (cd "$repo" && cargo build --release -q --bin idgate); fi
(cd "$repo" && cargo build -q --example pool_load)
bin=$repo/target/release/idgate
load=$repo/target/debug/examples/pool_load
# Each client is a socket on both sides of idgate.
ulimit -n "$((clients * 2 + 1024))" 2>/dev/null || log "ulimit -n stays $(ulimit -n)"
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
tmp=$(mktemp -d)
old_max=$(sql 'SELECT @@GLOBAL.max_connections')
idgate_pid= sampler=
cleanup() {
  [ -n "$sampler" ] && { kill "$sampler" 2>/dev/null || true; }
  [ -n "$idgate_pid" ] && { kill "$idgate_pid" 2>/dev/null || true; wait "$idgate_pid" 2>/dev/null || true; }
  sql "SET GLOBAL max_connections = $old_max" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
sql 'SET GLOBAL max_connections = 200'
ip=$(free_port) ap=$(free_port)
cat >"$tmp/idgate.toml" <<TOML
[server]
listen = "$host:$ip"
admin_listen = "$host:$ap"
max_connections = $((clients + 100))
[[users]]
name = "app"
password = "app-secret"
[backend]
user = "$user"
password = "$password"
tls = "disabled"
pool_max = 64
pool_wait_timeout_ms = 5000
multiplex = $multiplex
[[shards]]
name = "s0"
address = "$s0"
TOML
chmod 600 "$tmp/idgate.toml"
IDGATE_LOG=warn "$bin" serve --config "$tmp/idgate.toml" >"$tmp/idgate.log" 2>&1 &
idgate_pid=$!
for _ in $(seq 1 100); do
  mariadb --no-defaults --protocol=tcp -h"$host" -P"$ip" -uapp -papp-secret -e 'SELECT 1' >/dev/null 2>&1 && break
  sleep 0.2
done
# The most shard connections open, sampled while the load runs.
peak=$tmp/peak; echo 0 >"$peak"
( while sleep 0.2; do
    n=$(curl -fsS "http://$host:$ap/metrics" 2>/dev/null | awk '/^idgate_pool_open\{shard="s0"\}/ {print $2}')
    [ -n "$n" ] && [ "$n" -gt "$(cat "$peak")" ] && echo "$n" >"$peak"
  done ) &
sampler=$!
log "$clients clients x $iterations sessions, pool_max = 64, shard max_connections = 200, multiplex = $multiplex"
status=0
"$load" "$host:$ip" app app-secret "$clients" "$iterations" || status=$?
kill "$sampler" 2>/dev/null || true; sampler=
log "idgate: peak idgate_pool_open{s0} $(cat "$peak") (pool_max 64)"
log "idgate: $(curl -fsS "http://$host:$ap/metrics" | grep -E '^idgate_pool_(waits|wait_seconds|timeouts|created|reused|stale|multiplexed)_total\{shard="s0"\}' | tr '\n' ' ')"
grep -E 'ERROR|WARN' "$tmp/idgate.log" | head -5 >&2 || true
exit "$status"
