#!/usr/bin/env bash
# Connection setup rate, in one run: connect + SELECT 1 + close in a loop,
# 8 client processes (the C client, libmariadb: bench/connect.c, as issue
# #19 measures; PHP's mysqlnd through mysqli with --client php:
# bench/connect.php, the way a PHP application connects per request; or
# PyMySQL with --client py: bench/connect.py), against
#   direct   MariaDB shard s0 (mysql_native_password)            the limit
#   haproxy  HAProxy (mode tcp) -> s0 (MariaDB's native login)   the peer
#   idgate   idgate (caching_sha2_password fast path; the SELECT
#            takes a pooled connection to s0, no shard login)    what we build
#   mux      the same idgate with [backend] multiplex = true
#            (the connection goes back after each statement)
#   nopool   the same idgate with [backend] pool_idle_timeout = 0
#            (no connection kept: a shard login per client, as
#            before the pool)                                     the baseline
# Every idgate has a rule file with one table, as a deployment does.
# Targets alternate round by round (the first one rotates); the report
# quotes the median of the rounds per target and idgate/haproxy, and
# the CPU each connection cost: the proxy, MariaDB s0, the clients, and
# the machine's idle time (/proc, read around each run).
#
#   scripts/bench-connect.sh [--rounds N] [--time S] [--procs N] [--client c|php|py] [--no-build]
#
# The C client is built with libmariadb-dev's mariadb_config (installed
# with apt-get when missing). With the C client every target's login is
# its default: mysql_native_password to MariaDB and through HAProxy,
# caching_sha2_password's fast path to idgate.
#
# Uses the test bed (scripts/testbed.sh up when it is not reachable) and the
# release binary (cargo build --release unless --no-build; IDGATE_BIN names
# another binary, e.g. a PGO build from scripts/build-pgo.sh).
# BENCH_SERVER_EXTRA: lines added to every idgate's [server] (e.g.
# session_threads = 2).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 secs=10 procs=8 do_build=1 client=c
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --time) secs=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --client) client=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
log() { printf '[bench-connect] %s\n' "$*" >&2; }
py=/usr/bin/python3
"$py" -c 'import pymysql' 2>/dev/null || { log "needs python3-pymysql (scripts/testbed.sh up installs it)"; exit 1; }
eval "$("$repo/scripts/testbed.sh" env)"
host=127.0.0.1
s0=$IDGATE_TEST_S0 user=$IDGATE_TEST_USER password=$IDGATE_TEST_PASSWORD
if ! mariadb --no-defaults --protocol=tcp -h"${s0%:*}" -P"${s0#*:}" -u"$user" -p"$password" -e 'SELECT 1' >/dev/null 2>&1; then
  "$repo/scripts/testbed.sh" up
fi
if ((do_build)); then log "cargo build --release"; (cd "$repo" && cargo build --release -q); fi
bin=${IDGATE_BIN:-$repo/target/release/idgate}
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
tmp=$(mktemp -d)
haproxy_pid= idgate_pid= nopool_pid= mux_pid=
cleanup() {
  for pid in $haproxy_pid $idgate_pid $nopool_pid $mux_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
wait_ready() { # wait_ready PORT USER PASSWORD
  for _ in $(seq 1 100); do
    mariadb --no-defaults --protocol=tcp -h"$host" -P"$1" -u"$2" -p"$3" -e 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  log "nothing answers on port $1"; return 1
}

if [ "$client" = c ]; then
  if ! command -v mariadb_config >/dev/null; then
    log "installing libmariadb-dev (the C client's headers)"
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends libmariadb-dev >&2
  fi
  # shellcheck disable=SC2046
  cc -O2 -o "$tmp/connect" "$repo/bench/connect.c" $(mariadb_config --cflags --libs)
elif [ "$client" = php ]; then
  if ! php -r 'exit(extension_loaded("mysqli") ? 0 : 1);' 2>/dev/null; then
    log "installing php-cli and php-mysql (the PHP client)"
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends php-cli php-mysql >&2
  fi
elif [ "$client" != py ]; then
  log "--client is c, php or py"; exit 2
fi
# CPU use, read around each run from /proc: the proxy's and s0's
# (utime + stime of all their threads) and the whole machine's busy and
# idle time, per connection made (clock ticks, so about 0.2% of an 8 s
# run's CPU). The clients are the machine's busy time less the two.
tck=$(getconf CLK_TCK)
s0_pid=$(cat "$repo/testbed/s0/mysqld.pid" 2>/dev/null || true)
proc_ticks() { # proc_ticks PID: utime + stime (0 when there is no PID)
  [ -n "$1" ] && [ -r "/proc/$1/stat" ] || { echo 0; return; }
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}
machine_ticks() { # busy and idle (iowait counts as idle), all CPUs
  awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6}' /proc/stat
}
# measure PROXY-PID TARGET-ARGS...: the client's line, then the proxy's,
# s0's, busy and idle microseconds per connection.
measure() {
  local proxy=$1 p0 m0 busy0 idle0 p1 m1 busy1 idle1 line t0 t1
  shift
  p0=$(proc_ticks "$proxy") m0=$(proc_ticks "$s0_pid")
  read -r busy0 idle0 < <(machine_ticks)
  t0=$(date +%s.%N)
  line=$(run_client "$@")
  t1=$(date +%s.%N)
  p1=$(proc_ticks "$proxy") m1=$(proc_ticks "$s0_pid")
  read -r busy1 idle1 < <(machine_ticks)
  # connections = rate x the client's seconds; /proc/stat covers the
  # whole call, a little longer (process start and exit).
  awk -v l="$line" -v s="$secs" -v tck="$tck" -v dp=$((p1 - p0)) -v dm=$((m1 - m0)) \
    -v db=$((busy1 - busy0)) -v di=$((idle1 - idle0)) -v t0="$t0" -v t1="$t1" 'BEGIN {
      split(l, f, " "); n = f[2] * s; w = t1 - t0
      if (n <= 0 || w <= 0) { print l, "-", "-", "-", "-"; exit }
      u = 1e6 / tck / n
      printf "%s %.1f %.1f %.1f %.1f\n", l, dp * u, dm * u, db * u * s / w, di * u * s / w }'
}
# run_client TARGET-ARGS... LABEL: one measurement line.
run_client() {
  local port=$1 u=$2 pw=$3 label=$4
  if [ "$client" = c ]; then
    "$tmp/connect" "$host" "$port" "$u" "$pw" "$procs" "$secs" "$label"
  elif [ "$client" = php ]; then
    php "$repo/bench/connect.php" "$host" "$port" "$u" "$pw" "$procs" "$secs" "$label"
  else
    "$py" "$repo/bench/connect.py" --port "$port" --user "$u" --password "$pw" --procs "$procs" --seconds "$secs" --label "$label"
  fi
}

hp=$(free_port)
sed -e "s|@PORT@|$hp|" -e "s|@BACKEND@|$s0|" "$repo/bench/haproxy.cfg.in" >"$tmp/haproxy.cfg"
haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
haproxy_pid=$!
wait_ready "$hp" "$user" "$password"

ip=$(free_port) ap=$(free_port)
# app's plaintext password: caching_sha2_password (the default) with its
# fast path from the first login.
cat >"$tmp/idgate.toml" <<TOML
[server]
listen = "$host:$ip"
admin_listen = "$host:$ap"
${BENCH_SERVER_EXTRA:-}
[[users]]
name = "app"
password = "app-secret"
[backend]
user = "$user"
password = "$password"
tls = "disabled"
[[shards]]
name = "s0"
address = "$s0"
[allocator]
file_path = "state-idgate.json"
[rules]
dir = "$tmp/rules"
TOML
chmod 600 "$tmp/idgate.toml"
# One rule table, as in any deployment: every statement is looked at
# against the rules (a SELECT passes without planning, so without the
# session's sql_mode).
mkdir -p "$tmp/rules"
cat >"$tmp/rules/bench.toml" <<TOML
[[generator]]
name = "bench"
kind = "sequence"

[[table]]
name = "bench_connect.t"
column = "id"
generator = "bench"
TOML
# The default log level (IDGATE_LOG unset: info), as deployed: the
# connections' own log lines are part of what a connection costs.
env -u IDGATE_LOG "$bin" serve --config "$tmp/idgate.toml" >"$tmp/idgate.log" 2>&1 &
idgate_pid=$!
wait_ready "$ip" app app-secret
# variant NAME LINE PORT ADMIN: the same config with LINE added to
# [backend], listening on PORT (admin on ADMIN); its pid in NAME_pid.
variant() {
  sed -e "s|$host:$ip|$host:$3|" -e "s|$host:$ap|$host:$4|" \
    -e "s|^tls = \"disabled\"|tls = \"disabled\"\n$2|" \
    -e "s|^file_path = .*|file_path = \"state-$1.json\"|" "$tmp/idgate.toml" >"$tmp/$1.toml"
  chmod 600 "$tmp/$1.toml"
  env -u IDGATE_LOG "$bin" serve --config "$tmp/$1.toml" >"$tmp/$1.log" 2>&1 &
  printf -v "${1}_pid" '%s' "$!"
  wait_ready "$3" app app-secret
}
# The baseline: the same config, keeping no shard connection.
np=$(free_port) npa=$(free_port)
variant nopool "pool_idle_timeout = 0" "$np" "$npa"
# Multiplexing: the same config with [backend] multiplex = true.
mp=$(free_port) mpa=$(free_port)
variant mux "multiplex = true" "$mp" "$mpa"

targets=(direct haproxy idgate mux nopool)
args_of() { # PORT USER PASSWORD of a target
  case "$1" in
    direct) echo "${s0#*:} $user $password" ;;
    haproxy) echo "$hp $user $password" ;;
    idgate) echo "$ip app app-secret" ;;
    nopool) echo "$np app app-secret" ;;
    mux) echo "$mp app app-secret" ;;
  esac
}
pid_of() { # the proxy process of a target (none for direct)
  case "$1" in
    direct) echo "" ;;
    haproxy) echo "$haproxy_pid" ;;
    idgate) echo "$idgate_pid" ;;
    nopool) echo "$nopool_pid" ;;
    mux) echo "$mux_pid" ;;
  esac
}
log "$rounds rounds of $secs s per target, $procs client processes ($client client)"
results=$tmp/results
: >"$results"
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < ${#targets[@]}; i++)); do
    t=${targets[$(((i + r) % ${#targets[@]}))]}
    # shellcheck disable=SC2046
    line=$(measure "$(pid_of "$t")" $(args_of "$t") "$t")
    log "round $((r + 1)): $line"
    echo "$line" >>"$results"
  done
done
# Which caching_sha2_password path idgate's logins took (all fast: app's
# password is known in plain text).
log "idgate: $(curl -fsS "http://$host:$ap/metrics" | grep '^idgate_sha2_logins_total' | tr '\n' ' ')"
# Shard logins the pooled idgate did (created) against connections handed out again (reused).
log "idgate pool: $(curl -fsS "http://$host:$ap/metrics" | grep -E '^idgate_pool_(created|reused|timeouts)_total' | tr '\n' ' ')"
log "mux pool: $(curl -fsS "http://$host:$mpa/metrics" | grep -E '^idgate_pool_(created|reused|timeouts|multiplexed|restored)_total' | tr '\n' ' ')"
"$py" - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = {}
for t in ("direct", "haproxy", "idgate", "mux", "nopool"):
    v = [float(r[1]) for r in rows if r[0] == t]
    plugin = next(r[2] for r in rows if r[0] == t)
    errors = sum(int(r[3]) for r in rows if r[0] == t)
    med[t] = statistics.median(v)
    print(f"{t:8} median {med[t]:8.1f} conn/s  rounds {' '.join(f'{x:.1f}' for x in v)}  plugin {plugin}  errors {errors}")
    # CPU per connection (medians of the rounds): the proxy, s0, the
    # clients (busy less the two), and the machine's idle time.
    cpu = [[float(x) for x in r[4:8]] for r in rows if r[0] == t and len(r) >= 8 and r[4] != "-"]
    if cpu:
        proxy, shard, busy, idle = (statistics.median(c[k] for c in cpu) for k in range(4))
        clients = statistics.median(c[2] - c[0] - c[1] for c in cpu)
        print(f"{'':8} CPU us/conn: proxy {proxy:6.1f}  s0 {shard:6.1f}  clients {clients:6.1f}  all busy {busy:6.1f}  idle {idle:5.1f}")
print(f"mux/haproxy {med['mux'] / med['haproxy']:.3f}   mux/direct {med['mux'] / med['direct']:.3f}   mux/idgate {med['mux'] / med['idgate']:.3f}")
print(f"idgate/haproxy {med['idgate'] / med['haproxy']:.3f}   idgate/direct {med['idgate'] / med['direct']:.3f}   "
      f"idgate/nopool {med['idgate'] / med['nopool']:.3f}   nopool/haproxy {med['nopool'] / med['haproxy']:.3f}   haproxy/direct {med['haproxy'] / med['direct']:.3f}")
PY
