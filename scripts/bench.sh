#!/usr/bin/env bash
# Measure idgate's speed against the two baselines that matter, in one run:
#   direct   sysbench -> MariaDB shard s0                 (the limit)
#   haproxy  sysbench -> HAProxy (mode tcp) -> s0         (the peer: a plain TCP hop)
#   idgate   sysbench -> idgate -> s0                     (what we build)
# Targets are alternated round by round (the starting target rotates), and the
# report quotes medians and ratios of medians: the machine is small and shared.
#
#   scripts/bench.sh [run] [options]   sysbench workloads, then the idle-session step
#   scripts/bench.sh idle [options]    only memory per idle client session
#
# Options:
#   --quick            short smoke run: 1 round of 3 s, 1 s warm-up, no control (< 3 minutes)
#   --rounds N         rounds per workload (default 3)
#   --time S           seconds per sysbench run (default 10)
#   --warmup S         unrecorded warm-up run per target and workload (default 2; 0: none)
#   --threads N        sysbench threads (default 16)
#   --table-size N     rows in sbtest.sbtest1 (default 10000)
#   --workloads "..."  subset of: point_select read_write_ps insert
#                      point_select_sharded scatter_select scatter_string
#                      (default: these),
#                      read_write_sharded (only when named: see below)
#   --idle-conns N     sessions opened by the idle step (default 1000)
#   --no-idle          skip the idle-session step
#   --no-idgate        measure direct and HAProxy only
#   --no-build         do not run `cargo build --release`; use the existing binary
#   --tls              TLS on every hop: sysbench asks for TLS (--mysql-ssl=on),
#                      idgate serves the test bed's certificate and logs in to
#                      the shard over TLS (backend tls = "required"), HAProxy
#                      (mode tcp) passes TLS through to MariaDB; compare the
#                      proxies' CPU per statement
#   --pin P:R          the proxies on CPUs P, everything else on CPUs R
#                      (taskset lists, e.g. --pin 1:0): sysbench, the test
#                      bed's shards and etcd are moved to R for the run and
#                      given all CPUs back after it. As if each proxy had a
#                      host of its own: the proxies compare by tps without
#                      taking CPU from MariaDB and sysbench. `direct` then
#                      runs on R alone, so ratios to direct are not
#                      like-for-like (default: no pinning)
#   --no-control       leave out the A/A control: a second, identical HAProxy
#                      (target haproxy2) in every workload, whose ratio
#                      haproxy2/haproxy shows the run's noise floor (default: on)
#   --relay            add target tokio_relay in the point_select, read_write_ps
#                      and insert workloads: examples/relay.rs, a relay that
#                      forwards bytes to s0 on idgate's runtime (tokio, two
#                      workers) and parses nothing. tokio_relay/haproxy is what
#                      the runtime costs; idgate/tokio_relay is what idgate's
#                      own work costs. BENCH_RELAY_SPIN=N adds N iterations of
#                      an opaque loop (4 instructions each, callgrind) per chunk
#                      from the client: what that much user time per
#                      statement costs in tps (default 0)
#
# Environment: IDGATE_BIN, IDGATE_BASE_BIN (a second binary, target
# idgate_base), BENCH_BACKEND_EXTRA (lines added to idgate's [backend], not
# the base's unless BENCH_BASE_EXTRA=1), BENCH_SERVER_EXTRA (lines added to
# idgate's [server], not the base's unless BENCH_BASE_SERVER_EXTRA=1: an
# A/B of a setting, e.g. worker_threads = 1, with the same binary as both;
# or two binaries with the same setting), BENCH_BASE_BACKEND_EXTRA (lines
# added to the base's [backend] alone).
#
# Workloads (text protocol, --db-ps-mode=disable, unless said):
#   point_select    oltp_point_select
#   read_write_ps   oltp_read_write --db-ps-mode=auto (server-side prepared statements)
#   insert          oltp_insert --auto-inc=on (sysbench sends id = 0), four targets:
#                   direct, haproxy and idgate into sbtest.sbtest1 (AUTO_INCREMENT,
#                   no idgate rule: a pure relay), and idgate_ids into
#                   sbtest_ids.sbtest1 (no AUTO_INCREMENT; idgate fills the id from
#                   its sequence generator), after which every row is checked for a
#                   unique, generated id.
#   point_select_sharded  oltp_point_select against idgate_sh: a second idgate
#                   with sbtest_sh.sbtest1 sharded by id (mod) over shards s0 and
#                   s1 (prepared through it: rows split, DDL on both shards),
#                   beside direct and HAProxy to the whole table on s0.
#   read_write_sharded  oltp_read_write --db-ps-mode=auto --distinct_ranges=0
#                   (SELECT DISTINCT over a range cannot be merged) through
#                   idgate_sh: every transaction an XA transaction over the
#                   shards it touches; direct and HAProxy on the whole table.
#                   Lock cycles across shards (no single MariaDB sees them)
#                   are broken by idgate's deadlock detector within a few
#                   hundred ms; without it (deadlock_check_ms = 0) this
#                   workload stalls on innodb_lock_wait_timeout (50 s).
#   scatter_select  bench/scatter.lua: `SELECT id, k FROM sbtest1 ORDER BY k, id
#                   LIMIT 10`, on every shard and merged through idgate_sh,
#                   against the same query on the whole table (direct, HAProxy).
#   scatter_string  bench/scatter_string.lua: the same ordered by the string
#                   column c (`ORDER BY c, id LIMIT 10`), merged by c's collation.
#
# Results: target/bench/results-<stamp>.tsv (raw: one row per run) and
# target/bench/results-<stamp>.txt (the report); bench/report.py FILE.tsv
# re-prints the report of any results file.
#
# Environment: IDGATE_BIN (binary to use; default target/release/idgate),
# IDGATE_BASE_BIN (a second idgate binary, e.g. built from the commit before
# a change: target idgate_base, the same config on its own port, in the
# point_select, read_write_ps and insert workloads, so before and after are
# measured side by side in one run; its ratio idgate/idgate_base is the change),
# IDGATE_TB_S0_PORT / IDGATE_TB_ETCD_PORT (test bed ports, as testbed.sh),
# BENCH_DB / BENCH_IDS_DB (schemas, default sbtest / sbtest_ids),
# BENCH_APP_USER / BENCH_APP_PASSWORD (idgate's [[users]] account, default sbtest),
# BENCH_BACKEND_EXTRA (lines added to idgate's [backend], not idgate_base's:
# e.g. "multiplex = true" with IDGATE_BASE_BIN=target/release/idgate measures
# multiplexing against the pool alone, same binary).
set -euo pipefail
# idgate refuses a world-readable config that holds a plaintext password:
# every file this script writes is its owner's only.
umask 077

repo=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3 # Debian's python, which has python3-pymysql

mode=run
rounds=3
duration=10
warmup=2
threads=16
table_size=10000
workloads="point_select read_write_ps insert point_select_sharded scatter_select scatter_string"
idle_conns=1000
do_idle=1
do_idgate=1
do_build=1
do_control=1
do_tls=0
do_relay=0
pin_proxy='' pin_rest=''

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

while (($#)); do
  case "$1" in
    run | idle) mode=$1 ;;
    --quick) rounds=1 duration=3 warmup=1 do_control=0 ;;
    --rounds) rounds=$2; shift ;;
    --time) duration=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --threads) threads=$2; shift ;;
    --table-size) table_size=$2; shift ;;
    --workloads) workloads=$2; shift ;;
    --idle-conns) idle_conns=$2; shift ;;
    --no-idle) do_idle=0 ;;
    --no-idgate) do_idgate=0 ;;
    --no-build) do_build=0 ;;
    --control) do_control=1 ;;
    --no-control) do_control=0 ;;
    --tls) do_tls=1 ;;
    --relay) do_relay=1 ;;
    --pin)
      [[ $2 == *:* ]] || { echo "--pin wants PROXY_CPUS:REST_CPUS, e.g. 1:0" >&2; exit 2; }
      pin_proxy=${2%%:*} pin_rest=${2#*:}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
# A misspelt workload is refused here: workload_args' die runs in a command
# substitution, which only ended a subshell, and the workload left no line.
for wl in $workloads; do
  case "$wl" in
    point_select | read_write_ps | insert | point_select_sharded | scatter_select | scatter_string | read_write_sharded) ;;
    *) echo "unknown workload: $wl (see --help)" >&2; exit 2 ;;
  esac
done

host=127.0.0.1
s0_port=${IDGATE_TB_S0_PORT:-23061}
s1_port=${IDGATE_TB_S1_PORT:-23062}
etcd_port=${IDGATE_TB_ETCD_PORT:-23790}
backend_user=idgate backend_password=idgate # the test bed's account on every shard
app_user=${BENCH_APP_USER:-sbtest}                 # the [[users]] account sysbench logs in to idgate with
app_password=${BENCH_APP_PASSWORD:-sbtest}
db=${BENCH_DB:-sbtest}
ids_db=${BENCH_IDS_DB:-sbtest_ids}
sh_db=${BENCH_SHARDED_DB:-sbtest_sh}
idgate_bin=${IDGATE_BIN:-$repo/target/release/idgate}
tls_dir=${IDGATE_TESTBED_DIR:-$repo/testbed}/tls # made by scripts/testbed.sh
idgate_base_bin=${IDGATE_BASE_BIN:-}

stamp=$(date +%Y%m%d-%H%M%S)
outdir=$repo/target/bench
results=$outdir/results-$stamp.tsv
report=$outdir/results-$stamp.txt
started=$SECONDS

log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --pin: command prefixes that start a proxy, or sysbench, on its CPUs.
proxy_cpus=() rest_cpus=()
if [ -n "$pin_proxy" ]; then
  proxy_cpus=(taskset -c "$pin_proxy") rest_cpus=(taskset -c "$pin_rest")
fi
tb_dir=${IDGATE_TESTBED_DIR:-$repo/testbed}
# pin_servers CPUS: moves the test bed's shards s0, s1 and etcd (every
# thread) onto CPUS.
pin_servers() {
  local f
  for f in "$tb_dir/s0/mysqld.pid" "$tb_dir/s1/mysqld.pid" "$tb_dir/etcd/etcd.pid"; do
    [ -f "$f" ] && taskset -a -p -c "$1" "$(cat "$f")" >/dev/null 2>&1 || true
  done
}

# ---------------------------------------------------------------- setup

ensure_packages() {
  local packages=(sysbench haproxy mariadb-client python3-pymysql curl etcd-client) missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# mysql_cli PORT USER PASSWORD [mariadb options...]
mysql_cli() {
  local port=$1 user=$2 password=$3; shift 3
  mariadb --no-defaults --protocol=tcp -h"$host" -P"$port" -u"$user" -p"$password" \
    --connect-timeout=5 --batch --skip-column-names "$@"
}
sql_s0() { mysql_cli "$s0_port" "$backend_user" "$backend_password" -e "$1"; }
sql_s1() { mysql_cli "$s1_port" "$backend_user" "$backend_password" -e "$1"; }

testbed_reachable() {
  sql_s0 'SELECT 1' >/dev/null 2>&1 && curl -fsS "http://$host:$etcd_port/health" >/dev/null 2>&1
}

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_ready SECONDS PID PORT USER PASSWORD: until `SELECT 1` works through PORT;
# fails early if PID (when given) has exited.
wait_ready() {
  local deadline=$((SECONDS + $1)) pid=$2 port=$3 user=$4 password=$5
  until timeout 10 mariadb --no-defaults --protocol=tcp -h"$host" -P"$port" -u"$user" -p"$password" \
    --connect-timeout=5 -e 'SELECT 1' >/dev/null 2>&1; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# stop_pid NAME PID: SIGTERM, wait up to 15 s, then SIGKILL. Only our own pids.
stop_pid() {
  local name=$1 pid=$2
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  log "stopping $name (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 75); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then log "$name did not stop in 15 s, killing"; kill -9 "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}

tmp=
haproxy_pid=
haproxy2_pid=
haproxy_port=
haproxy2_port=
relay_pid=
relay_port=
idgate_port=
idgate_pid=
idgate_ok=0
idgate_sh_pid=
idgate_sh_port=
idgate_sh_ok=0
idgate_base_pid=
idgate_base_port=
idgate_base_ok=0
base_settings= # how idgate_base's config differs from idgate's, if it does
etcd_prefix=
cleanup() {
  local rc=$?
  [ -n "$pin_proxy" ] && pin_servers "0-$(($(nproc) - 1))"
  stop_pid haproxy "$haproxy_pid"
  stop_pid haproxy2 "$haproxy2_pid"
  stop_pid tokio_relay "$relay_pid"
  stop_pid idgate "$idgate_pid"
  stop_pid idgate_sh "$idgate_sh_pid"
  stop_pid idgate_base "$idgate_base_pid"
  if [ -n "$etcd_prefix" ] && command -v etcdctl >/dev/null; then
    ETCDCTL_API=3 etcdctl --endpoints="http://$host:$etcd_port" del --prefix "$etcd_prefix" >/dev/null 2>&1 || true
  fi
  if [ -n "$tmp" ] && [ -d "$tmp" ]; then
    # idgate's log and config stay next to the results.
    for f in idgate.log idgate.toml idgate_sh.log idgate_sh.toml; do
      if [ -f "$tmp/$f" ]; then cp "$tmp/$f" "$outdir/${f%.*}-$stamp.${f##*.}" 2>/dev/null || true; fi
    done
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_haproxy() { # start_haproxy NAME: sets NAME_pid and NAME_port
  local name=$1 port pid; port=$(free_port)
  sed -e "s|@PORT@|$port|" -e "s|@BACKEND@|$host:$s0_port|" \
    "$repo/bench/haproxy.cfg.in" >"$tmp/$name.cfg"
  haproxy -q -c -f "$tmp/$name.cfg" || die "invalid HAProxy config $tmp/$name.cfg"
  # In the foreground (-db) as a child of this script, exactly as idgate is
  # started: a daemon (-D) calls setsid(), and with the kernel's autogroup
  # scheduling a process in another session gets another share of the CPUs,
  # which skewed the comparison on a loaded machine (a daemonized HAProxy ran
  # at 0.72x of an identical one in the foreground; see bench/README.md).
  "${proxy_cpus[@]}" haproxy -db -f "$tmp/$name.cfg" >"$tmp/$name.log" 2>&1 &
  pid=$!
  printf -v "${name}_pid" '%s' "$pid"
  echo "$pid" >"$tmp/$name.pid"
  wait_ready 20 "$pid" "$port" "$backend_user" "$backend_password" || die "$name on port $port not answering"
  printf -v "${name}_port" '%s' "$port"
  log "$name: HAProxy $(haproxy -v | sed -n '1s/^HAProxy version \([^ ]*\).*/\1/p') (mode tcp) on $host:$port -> s0, pid $pid"
}

# The floor under a tokio proxy (--relay): examples/relay.rs on idgate's
# runtime, started exactly as HAProxy and idgate are.
start_relay() {
  local port pid bin=$repo/target/release/examples/relay blog=$outdir/build-relay-$stamp.log
  if ((do_build)) || [ ! -x "$bin" ]; then
    log "building examples/relay.rs: cargo build --release --example relay (log: $blog)"
    (cd "$repo" && cargo build --release --example relay) >"$blog" 2>&1 \
      || die "cargo build --release --example relay failed (log: $blog)"
  fi
  port=$(free_port)
  "${proxy_cpus[@]}" "$bin" "$host:$port" "$host:$s0_port" "${BENCH_RELAY_SPIN:-0}" >"$tmp/tokio_relay.log" 2>&1 &
  pid=$!
  relay_pid=$pid
  wait_ready 20 "$pid" "$port" "$backend_user" "$backend_password" || die "tokio_relay on port $port not answering"
  relay_port=$port
  log "tokio_relay: examples/relay.rs (spin ${BENCH_RELAY_SPIN:-0}) on $host:$port -> s0, pid $pid"
}

build_idgate() {
  ((do_build)) || return 0
  local t0=$SECONDS
  local blog=$outdir/build-$stamp.log
  log "building idgate: cargo build --release (log: $blog)"
  if ! (cd "$repo" && cargo build --release) >"$blog" 2>&1; then
    grep -E -m 8 -A 3 '^error' "$blog" | sed 's/^/[bench]   build: /' >&2
    log "cargo build --release failed (log: $blog)"
    return 1
  fi
  log "built in $((SECONDS - t0)) s"
}

write_idgate_config() {
  local port=$1
  mkdir -p "$tmp/rules"
  etcd_prefix="/idgate-bench-$stamp-$$"
  cat >"$tmp/rules/bench.toml" <<EOF
# The bench's one rule table: sysbench's sbtest1 in $ids_db, no AUTO_INCREMENT.
[[generator]]
name = "sbtest_ids"
kind = "sequence"
batch = 10000

[[table]]
name = "$ids_db.sbtest1"
column = "id"
generator = "sbtest_ids"
EOF
  local backend_tls=disabled server_tls=""
  if ((do_tls)); then
    backend_tls=required
    server_tls="tls_cert = \"$tls_dir/server.pem\"
tls_key = \"$tls_dir/server.key\""
  fi
  idgate_admin_port=$(free_port)
  cat >"$tmp/idgate.toml" <<EOF
[server]
listen = "$host:$port"
admin_listen = "$host:$idgate_admin_port"
$server_tls
$(printf '%s' "${BENCH_SERVER_EXTRA:-}" | sed -e '/^$/d' -e 's/$/ # bench-server-extra/')

[[users]]
name = "$app_user"
password = "$app_password"

[backend]
user = "$backend_user"
password = "$backend_password"
# The test bed's shards offer TLS and idgate's default (preferred) would take
# it; sysbench and HAProxy talk to them in clear text, so idgate does too
# (with --tls all three use TLS).
tls = "$backend_tls"
$(printf '%s' "${BENCH_BACKEND_EXTRA:-}" | sed -e '/^$/d' -e 's/$/ # bench-extra/')

[[shards]]
name = "s0"
address = "$host:$s0_port"

[allocator]
store = "etcd"
etcd_endpoints = ["http://$host:$etcd_port"]
etcd_prefix = "$etcd_prefix"

[rules]
dir = "$tmp/rules"
EOF
  # The sharded idgate: its own rules directory, etcd prefix and both shards.
  mkdir -p "$tmp/rules_sh"
  cat >"$tmp/rules_sh/bench.toml" <<EOF
# sysbench's sbtest1 in $sh_db, sharded by id over s0 and s1.
[[generator]]
name = "sbtest_sh"
kind = "sequence"
batch = 10000

[[table]]
name = "$sh_db.sbtest1"
column = "id"
generator = "sbtest_sh"
shard_key = "id"
sharding = "mod"
EOF
  sed -e "s|^listen = .*|listen = \"$host:$2\"|" -e "s|^dir = .*|dir = \"$tmp/rules_sh\"|" -e '/^admin_listen = /d' \
    -e "s|^etcd_prefix = \"\(.*\)\"|etcd_prefix = \"\1-sh\"|" "$tmp/idgate.toml" >"$tmp/idgate_sh.toml"
  printf '\n[[shards]]\nname = "s1"\naddress = "%s"\n' "$host:$s1_port" >>"$tmp/idgate_sh.toml"
}

# launch_idgate NAME CONFIG PORT: runs `idgate serve` as NAME (idgate or
# idgate_sh); sets NAME_pid, and NAME_port and NAME_ok=1 once it answers;
# otherwise says why it is skipped.
launch_idgate() {
  local name=$1 config=$2 port=$3 pid bin=$idgate_bin
  [ "$name" = idgate_base ] && bin=$idgate_base_bin
  # warn: no per-session log lines while measuring (HAProxy logs nothing either).
  IDGATE_LOG=${IDGATE_LOG:-warn} "${proxy_cpus[@]}" "$bin" serve --config "$config" >"$tmp/$name.log" 2>&1 &
  pid=$!
  printf -v "${name}_pid" '%s' "$pid"
  if ! wait_ready 60 "$pid" "$port" "$app_user" "$app_password"; then
    if kill -0 "$pid" 2>/dev/null; then
      log "$name SKIPPED: \`idgate serve\` did not answer SELECT 1 as $app_user on $host:$port within 60 s; its log:"
    else
      local rc=0; wait "$pid" || rc=$?
      log "$name SKIPPED: \`idgate serve --config $config\` exited with status $rc before answering; its log:"
    fi
    if [ -s "$tmp/$name.log" ]; then
      tail -n 15 "$tmp/$name.log" | sed "s/^/[bench]   $name: /" >&2
    else
      log "  (empty)"
    fi
    stop_pid "$name" "$pid"
    printf -v "${name}_pid" '%s' ""
    return 0
  fi
  printf -v "${name}_port" '%s' "$port"
  printf -v "${name}_ok" '%s' 1
  log "$name on $host:$port, pid $pid (config $config)"
}

start_idgate() {
  if ((!do_idgate)); then log "idgate SKIPPED (--no-idgate)"; return 0; fi
  if ! build_idgate; then log "idgate SKIPPED: it does not build"; return 0; fi
  if [ ! -x "$idgate_bin" ]; then log "idgate SKIPPED: no binary at $idgate_bin"; return 0; fi
  local port port_sh; port=$(free_port); port_sh=$(free_port)
  write_idgate_config "$port" "$port_sh"
  launch_idgate idgate "$tmp/idgate.toml" "$port"
  if [ -n "$idgate_base_bin" ]; then
    if [ -x "$idgate_base_bin" ]; then
      local port_base; port_base=$(free_port)
      # Without BENCH_BACKEND_EXTRA (the base runs idgate's own defaults),
      # unless BENCH_BASE_EXTRA=1 (the same settings: a before/after run).
      local keep='/ # bench-extra$/d'
      [ "${BENCH_BASE_EXTRA:-}" = 1 ] && keep='/^$/b'
      local keep_server='/ # bench-server-extra$/d'
      [ "${BENCH_BASE_SERVER_EXTRA:-}" = 1 ] && keep_server='/^$/b'
      sed -e "s/^listen = \"$host:$port\"/listen = \"$host:$port_base\"/" -e "$keep" -e '/^admin_listen = /d' \
        -e "$keep_server" "$tmp/idgate.toml" >"$tmp/idgate_base.toml"
      # A base binary from before the TLS keys (it refuses unknown keys) had
      # no TLS at all: the lines go.
      if ! "$idgate_base_bin" check --config "$tmp/idgate_base.toml" >/dev/null 2>&1; then
        sed -i -e '/^tls = /d' -e '/^tls_cert = /d' -e '/^tls_key = /d' "$tmp/idgate_base.toml"
      fi
      # BENCH_BASE_BACKEND_EXTRA: [backend] lines of the base's own (the
      # same binary with other settings: multiplexing with and without a
      # delay, say).
      if [ -n "${BENCH_BASE_BACKEND_EXTRA:-}" ]; then
        awk -v extra="$BENCH_BASE_BACKEND_EXTRA" '{ print } /^\[backend\]$/ { print extra }' \
          "$tmp/idgate_base.toml" >"$tmp/idgate_base.toml.new"
        mv "$tmp/idgate_base.toml.new" "$tmp/idgate_base.toml"
      fi
      launch_idgate idgate_base "$tmp/idgate_base.toml" "$port_base"
      # Said in the report: a base with other settings measures them too
      # (session threads alone move CPU per statement by 1.5-2 us).
      local plain='/^listen = /d; /^admin_listen = /d; s/ # bench-[a-z-]*$//'
      # Sorted: BENCH_BASE_BACKEND_EXTRA's lines stand elsewhere in [backend].
      base_settings=$(diff <(sed "$plain" "$tmp/idgate.toml" | sort) <(sed "$plain" "$tmp/idgate_base.toml" | sort) |
        sed -n 's/^\([<>]\) */\1 /p' | paste -sd ';' -) || true
      [ -z "$base_settings" ] || log "idgate_base runs other settings (< idgate, > idgate_base): $base_settings"
    else
      log "idgate_base SKIPPED: no binary at $idgate_base_bin"
    fi
  fi
  if [[ " $workloads " == *"_sharded "* || " $workloads " == *" scatter_"* ]]; then
    launch_idgate idgate_sh "$tmp/idgate_sh.toml" "$port_sh"
    if ((idgate_sh_ok)); then prepare_sharded; fi
  fi
  return 0
}

# ---------------------------------------------------------------- sysbench

sb_common() { # sb_common PORT USER PASSWORD DB
  printf '%s\n' --db-driver=mysql --mysql-host="$host" --mysql-port="$1" \
    --mysql-user="$2" --mysql-password="$3" --mysql-db="$4" \
    --tables=1 --table-size="$table_size"
  ((do_tls)) && echo --mysql-ssl=on
  return 0
}

prepare_data() {
  local t0=$SECONDS args
  log "preparing $db.sbtest1 ($table_size rows, AUTO_INCREMENT) and $ids_db.sbtest1 (empty, no AUTO_INCREMENT)"
  sql_s0 "CREATE DATABASE IF NOT EXISTS \`$db\`; CREATE DATABASE IF NOT EXISTS \`$ids_db\`"
  mapfile -t args < <(sb_common "$s0_port" "$backend_user" "$backend_password" "$db")
  sysbench oltp_read_write "${args[@]}" cleanup >"$tmp/prepare.log" 2>&1
  sysbench oltp_read_write "${args[@]}" prepare >>"$tmp/prepare.log" 2>&1 \
    || { cat "$tmp/prepare.log" >&2; die "sysbench prepare failed"; }
  # The rule table: sysbench's own definition, created empty (idgate's
  # sequence starts at 1), then without AUTO_INCREMENT: idgate fills the id.
  mapfile -t args < <(sb_common "$s0_port" "$backend_user" "$backend_password" "$ids_db")
  sysbench oltp_insert "${args[@]}" cleanup >>"$tmp/prepare.log" 2>&1
  sysbench oltp_insert "${args[@]}" --table-size=0 prepare >>"$tmp/prepare.log" 2>&1 \
    || { cat "$tmp/prepare.log" >&2; die "sysbench prepare ($ids_db) failed"; }
  sql_s0 "ALTER TABLE \`$ids_db\`.sbtest1 MODIFY id BIGINT NOT NULL"
  log "prepared in $((SECONDS - t0)) s"
}

# sbtest_sh.sbtest1 through idgate_sh: the schema on both shards, then
# sysbench's own prepare (CREATE TABLE and CREATE INDEX run on both shards,
# the rows get idgate's ids and are split by id).
prepare_sharded() {
  local t0=$SECONDS args n0 n1
  log "preparing $sh_db.sbtest1 ($table_size rows) through idgate_sh, sharded over s0 and s1"
  sql_s0 "DROP DATABASE IF EXISTS \`$sh_db\`; CREATE DATABASE \`$sh_db\`"
  sql_s1 "DROP DATABASE IF EXISTS \`$sh_db\`; CREATE DATABASE \`$sh_db\`"
  mapfile -t args < <(sb_common "$idgate_sh_port" "$app_user" "$app_password" "$sh_db")
  sysbench oltp_point_select "${args[@]}" --db-ps-mode=disable prepare >"$tmp/prepare_sh.log" 2>&1 \
    || { cat "$tmp/prepare_sh.log" >&2; die "sysbench prepare through idgate_sh failed"; }
  n0=$(sql_s0 "SELECT COUNT(*) FROM \`$sh_db\`.sbtest1")
  n1=$(sql_s1 "SELECT COUNT(*) FROM \`$sh_db\`.sbtest1")
  log "prepared in $((SECONDS - t0)) s: $n0 rows on s0, $n1 on s1"
  printf '# sharded table %s.sbtest1: s0=%s s1=%s\n' "$sh_db" "$n0" "$n1" >>"$results"
}

# target_args TARGET: prints PORT USER PASSWORD DB, one a line.
target_args() {
  case "$1" in
    direct) printf '%s\n' "$s0_port" "$backend_user" "$backend_password" "$db" ;;
    haproxy) printf '%s\n' "$haproxy_port" "$backend_user" "$backend_password" "$db" ;;
    haproxy2) printf '%s\n' "$haproxy2_port" "$backend_user" "$backend_password" "$db" ;;
    tokio_relay) printf '%s\n' "$relay_port" "$backend_user" "$backend_password" "$db" ;;
    idgate) printf '%s\n' "$idgate_port" "$app_user" "$app_password" "$db" ;;
    idgate_ids) printf '%s\n' "$idgate_port" "$app_user" "$app_password" "$ids_db" ;;
    idgate_base) printf '%s\n' "$idgate_base_port" "$app_user" "$app_password" "$db" ;;
    idgate_sh) printf '%s\n' "$idgate_sh_port" "$app_user" "$app_password" "$sh_db" ;;
  esac
}

workload_args() {
  case "$1" in
    point_select) printf '%s\n' oltp_point_select --db-ps-mode=disable ;;
    read_write_ps) printf '%s\n' oltp_read_write --db-ps-mode=auto ;;
    insert) printf '%s\n' oltp_insert --db-ps-mode=disable --auto-inc=on ;;
    point_select_sharded) printf '%s\n' oltp_point_select --db-ps-mode=disable ;;
    scatter_select) printf '%s\n' "$repo/bench/scatter.lua" --db-ps-mode=disable ;;
    scatter_string) printf '%s\n' "$repo/bench/scatter_string.lua" --db-ps-mode=disable ;;
    read_write_sharded) printf '%s\n' oltp_read_write --db-ps-mode=auto --distinct_ranges=0 ;;
    *) die "unknown workload $1" ;;
  esac
}

workload_targets() {
  local t=(direct haproxy)
  ((do_control)) && t+=(haproxy2)
  case "$1" in
    point_select_sharded | scatter_select | scatter_string | read_write_sharded)
      ((idgate_sh_ok)) && t+=(idgate_sh)
      echo "${t[@]}"
      return 0
      ;;
  esac
  [ -n "$relay_port" ] && t+=(tokio_relay)
  ((idgate_ok)) && t+=(idgate)
  ((idgate_base_ok)) && t+=(idgate_base)
  [ "$1" = insert ] && ((idgate_ok)) && t+=(idgate_ids)
  echo "${t[@]}"
}

ids_writes=0 # rows sysbench reports it inserted through idgate into the rule table

# proc_cpu_ticks PID: user + system CPU time of process PID (all its
# threads), in clock ticks; empty if it is gone.
proc_cpu_ticks() {
  awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null
}
# machine_ticks: the whole machine's busy and idle time (iowait counts as
# idle), all CPUs, in clock ticks.
machine_ticks() {
  awk '/^cpu /{ print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat
}

# run_one WORKLOAD TARGET ROUND SECONDS (ROUND 0: warm-up, not recorded)
run_one() {
  local wl=$1 target=$2 round=$3 secs=$4 tgt wla conn out rc=0
  local pid=$idgate_pid cpu_pid="" cpu0=""
  [ "$target" = idgate_sh ] && pid=$idgate_sh_pid
  [ "$target" = idgate_base ] && pid=$idgate_base_pid
  # The proxy's own CPU time per statement: a steadier figure than tps on a
  # shared machine (every proxy pays the same kernel TCP path per hop).
  case "$target" in
    idgate | idgate_ids) cpu_pid=$idgate_pid ;;
    idgate_base) cpu_pid=$idgate_base_pid ;;
    idgate_sh) cpu_pid=$idgate_sh_pid ;;
    haproxy) cpu_pid=$haproxy_pid ;;
    haproxy2) cpu_pid=$haproxy2_pid ;;
    tokio_relay) cpu_pid=$relay_pid ;;
  esac
  [ -n "$cpu_pid" ] && cpu0=$(proc_cpu_ticks "$cpu_pid")
  # Where the rest of the machine's time goes, per statement: shard s0's
  # CPU (MariaDB behind every target of the unsharded workloads), and the
  # whole machine's busy and idle time; the client is busy less proxy and
  # s0 (and etcd, idle here). A proxy that costs more than its own CPU
  # (more work for MariaDB, or idle cores while statements wait) shows here.
  # (Empty when s0's pid file or process is missing: a failing
  # substitution would end the script under set -e.)
  local s0_pid s0_0="" busy0 idle0
  s0_pid=$(cat "$tb_dir/s0/mysqld.pid" 2>/dev/null || true)
  if [ -n "$s0_pid" ]; then s0_0=$(proc_cpu_ticks "$s0_pid" || true); fi
  read -r busy0 idle0 < <(machine_ticks)
  if [[ $target == idgate* ]] && ! kill -0 "$pid" 2>/dev/null; then
    log "r$round $wl $target: idgate is no longer running (see $outdir/idgate-$stamp.log)"
    printf 'run\t%s\t%s\t%s\tNA\tNA\tNA\tNA\n' "$wl" "$target" "$round" >>"$results"
    return 0
  fi
  mapfile -t tgt < <(target_args "$target")
  mapfile -t wla < <(workload_args "$wl")
  mapfile -t conn < <(sb_common "${tgt[@]}")
  out=$tmp/sysbench-$wl-$target-$round.out
  # A proxy that stops answering must not hang the whole run.
  "${rest_cpus[@]}" timeout --kill-after=5 $((secs + 60)) sysbench "${wla[@]}" "${conn[@]}" \
    --threads="$threads" --time="$secs" --forced-shutdown=15 --report-interval=0 --percentile=95 run \
    >"$out" 2>&1 || rc=$?
  local tps p95 writes errors queries cpu_us=NA cpu1 s0_us=NA busy_us=NA idle_us=NA s0_1="" busy1 idle1
  read -r busy1 idle1 < <(machine_ticks)
  if [ -n "$s0_pid" ]; then s0_1=$(proc_cpu_ticks "$s0_pid" || true); fi
  tps=$(awk '/^ *transactions:/ { gsub(/\(/, "", $3); print $3 }' "$out")
  queries=$(awk '/^ *queries:/ { print $2 }' "$out")
  if [ -n "$cpu0" ] && [ -n "$queries" ] && ((queries > 0)); then
    cpu1=$(proc_cpu_ticks "$cpu_pid")
    [ -n "$cpu1" ] && cpu_us=$(awk -v a="$cpu0" -v b="$cpu1" -v hz="$(getconf CLK_TCK)" -v q="$queries" \
      'BEGIN { printf "%.2f", (b - a) / hz * 1e6 / q }')
  fi
  if [ -n "$queries" ] && ((queries > 0)); then
    # /proc/stat covers sysbench's start and end too (its connecting, a
    # fraction of a second of an 8 s run): a little more busy and idle
    # time than the statements themselves.
    read -r s0_us busy_us idle_us < <(awk -v m0="${s0_0:-}" -v m1="${s0_1:-}" -v b="$((busy1 - busy0))" \
      -v i="$((idle1 - idle0))" -v hz="$(getconf CLK_TCK)" -v q="$queries" 'BEGIN {
        u = 1e6 / hz / q
        s0 = (m0 != "" && m1 != "") ? sprintf("%.2f", (m1 - m0) * u) : "NA"
        printf "%s %.2f %.2f\n", s0, b * u, i * u }')
  fi
  p95=$(awk '/95th percentile:/ { print $3 }' "$out")
  writes=$(awk '/^ *write:/ { print $2 }' "$out")
  errors=$(awk '/ignored errors:/ { print $3 }' "$out")
  if [ "$target" = idgate_ids ] && [ -n "$writes" ]; then ids_writes=$((ids_writes + writes)); fi
  if ((rc != 0)) || [ -z "$tps" ] || [ -z "$p95" ]; then
    log "r$round $wl $target: sysbench FAILED (exit $rc):"
    { grep -m 2 'FATAL' "$out" || grep -v '^ *$' "$out" | tail -n 4; } | cut -c 1-240 | sed 's/^/[bench]   /' >&2
    ((round == 0)) || printf 'run\t%s\t%s\t%s\tNA\tNA\t%s\t%s\n' "$wl" "$target" "$round" "${writes:-NA}" "${errors:-NA}" >>"$results"
    return 0
  fi
  if ((round == 0)); then
    log "warm-up $wl $target: $tps tps, p95 $p95 ms"
  else
    log "r$round $wl $target: $tps tps, p95 $p95 ms$([ "$cpu_us" = NA ] || echo ", proxy CPU $cpu_us us/statement"), s0 $s0_us, machine busy $busy_us, idle $idle_us us/statement"
    printf 'run\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$wl" "$target" "$round" "$tps" "$p95" "$writes" "$errors" \
      "$cpu_us" "$s0_us" "$busy_us" "$idle_us" >>"$results"
  fi
}

# pool_counters: idgate's shard pool counters for s0 from its /metrics
# (summed over the pool's keys): multiplexed waits lid_reads moved created.
pool_counters() {
  curl -fsS "http://$host:$idgate_admin_port/metrics" 2>/dev/null | awk '
    /^idgate_pool_(multiplexed|waits|lid_reads|moved|created)_total\{shard="s0"/ {
      n = $1; sub(/_total\{.*/, "", n); sub(/^idgate_pool_/, "", n); v[n] += $2 }
    END { printf "%d %d %d %d %d\n", v["multiplexed"], v["waits"], v["lid_reads"], v["moved"], v["created"] }'
}

run_workload() {
  local wl=$1 targets n r i p0=() p1=()
  read -r -a targets <<<"$(workload_targets "$wl")"
  n=${#targets[@]}
  log "workload $wl: targets ${targets[*]}; $rounds round(s) of $duration s, $threads threads"
  ((idgate_ok)) && read -r -a p0 <<<"$(pool_counters)"
  if ((warmup > 0)); then
    for t in "${targets[@]}"; do run_one "$wl" "$t" 0 "$warmup"; done
  fi
  for ((r = 1; r <= rounds; r++)); do
    # Rotate the order so that no target always runs first (or last) in a round.
    for ((i = 0; i < n; i++)); do
      run_one "$wl" "${targets[$(((i + r - 1) % n))]}" "$r" "$duration"
    done
  done
  # What idgate's pool did in this workload (warm-ups included): takes that
  # waited for a connection (pool_max below the clients at once), values
  # read because a connection changed hands (the INSERTs are then read for
  # their LAST_INSERT_ID() effect: about 2,400 instructions more each),
  # connections moved between session threads, and opened.
  ((idgate_ok)) && [ ${#p0[@]} = 5 ] || return 0
  read -r -a p1 <<<"$(pool_counters)"
  [ ${#p1[@]} = 5 ] || return 0
  local line
  line=$(printf 'idgate pool s0 in %s: %d statements multiplexed, %d waits, %d LAST_INSERT_ID reads, %d moved, %d opened' \
    "$wl" $((p1[0] - p0[0])) $((p1[1] - p0[1])) $((p1[2] - p0[2])) $((p1[3] - p0[3])) $((p1[4] - p0[4])))
  log "$line"
  printf '# %s\n' "$line" >>"$results"
}

# Every row inserted through idgate into the rule table has its own id, idgate's.
verify_ids() {
  ((idgate_ok)) || return 0
  local row count distinct minid zero
  row=$(sql_s0 "SELECT COUNT(*), COUNT(DISTINCT id), COALESCE(MIN(id), 0), SUM(id IS NULL OR id = 0) FROM \`$ids_db\`.sbtest1")
  read -r count distinct minid zero <<<"$row"
  local verdict=PASS
  if [ "$count" != "$distinct" ] || [ "$count" != "$ids_writes" ] || [ "$count" = 0 ] || [ "${zero:-0}" != 0 ] || ((minid < 1)); then
    verdict=FAIL
  fi
  log "id check ($ids_db.sbtest1): $count rows, $distinct distinct ids, min id $minid, zero/NULL ids ${zero:-0}; sysbench reported $ids_writes inserts: $verdict"
  printf '# id check %s.sbtest1: rows=%s distinct=%s min_id=%s zero_or_null=%s sysbench_inserts=%s %s\n' \
    "$ids_db" "$count" "$distinct" "$minid" "${zero:-0}" "$ids_writes" "$verdict" >>"$results"
}

# ---------------------------------------------------------------- idle sessions

idle_step() {
  log "idle sessions: $idle_conns connections, VmRSS before and after"
  # HAProxy first, as a reference (each of its sessions also holds a backend connection).
  "$py" "$repo/bench/idle.py" --host "$host" --port "$haproxy_port" --user "$backend_user" \
    --password "$backend_password" --pid "$haproxy_pid" -n "$idle_conns" --label haproxy \
    --tsv "$results" >&2 || log "idle step against HAProxy reported errors"
  if ((idgate_ok)); then
    "$py" "$repo/bench/idle.py" --host "$host" --port "$idgate_port" --user "$app_user" \
      --password "$app_password" --pid "$idgate_pid" -n "$idle_conns" --label idgate \
      --target-kib 64 --shard-port "$s0_port" --tsv "$results" >&2 || log "idle step against idgate reported errors"
  else
    log "idle step: idgate SKIPPED (not running)"
  fi
}

# ---------------------------------------------------------------- main

ensure_packages
# Each idle session is a file descriptor in the client, HAProxy and idgate.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (($(ulimit -n) < idle_conns + 200)); then
  log "warning: open-file limit $(ulimit -n) is low for $idle_conns idle sessions"
fi

if testbed_reachable; then
  log "test bed reachable (s0 $host:$s0_port, etcd $host:$etcd_port)"
else
  "$repo/scripts/testbed.sh" up
fi
if [ -n "$pin_proxy" ]; then
  command -v taskset >/dev/null || die "--pin needs taskset (util-linux)"
  pin_servers "$pin_rest"
  log "pinned: proxies on CPUs $pin_proxy; sysbench, shards and etcd on CPUs $pin_rest"
fi

mkdir -p "$outdir"
tmp=$(mktemp -d /tmp/idgate-bench.XXXXXX)
if ((do_tls)); then
  # sysbench 1.0 reads its TLS files from the working directory under fixed
  # names; the client certificate is the test bed's (the shards check it
  # against their CA when it is sent).
  [ -f "$tls_dir/client.pem" ] || die "no $tls_dir/client.pem: run scripts/testbed.sh up"
  mkdir -p "$tmp/sbtls"
  cp "$tls_dir/ca.pem" "$tmp/sbtls/cacert.pem"
  cp "$tls_dir/client.pem" "$tmp/sbtls/client-cert.pem"
  cp "$tls_dir/client.key" "$tmp/sbtls/client-key.pem"
  cd "$tmp/sbtls"
fi
{
  echo "# idgate bench $stamp mode=$mode tls=$do_tls host=$(hostname) cpus=$(nproc) rounds=$rounds time=${duration}s warmup=${warmup}s threads=$threads table_size=$table_size"
  echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown); $(sysbench --version); $(mariadb --version | sed 's/^mariadb *//'); server $(sql_s0 'SELECT VERSION()')"
  printf '# run\tworkload\ttarget\tround\ttps\tp95_ms\twrites\terrors\tproxy_cpu_us\ts0_cpu_us\tbusy_us\tidle_us\n'
  printf '# idle\tlabel\tphase\tsessions\trss_before_kib\trss_after_kib\tkib_per_session\n'
} >"$results"

load1=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load1" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
  log "warning: the machine is busy (load average $load1 on $(nproc) cpus): absolute figures will be low, compare ratios"
fi

start_haproxy haproxy
((do_control)) && start_haproxy haproxy2
((do_relay)) && start_relay
# The tables exist before idgate starts (it may look at its rule tables).
[ "$mode" = run ] && prepare_data
start_idgate
((idgate_ok)) || echo "# idgate skipped" >>"$results"

if [ "$mode" = run ]; then
  for wl in $workloads; do
    run_workload "$wl"
    [ "$wl" = insert ] && verify_ids
  done
fi
if [ "$mode" = idle ] || ((do_idle)); then
  idle_step
fi

{
  if [ "$mode" = run ]; then
    echo "idgate bench $stamp: $(nproc) cpus, $rounds round(s) x ${duration}s, $threads threads; medians over rounds"
    [ -z "$pin_proxy" ] || echo "pinned (--pin): proxies on CPUs $pin_proxy; sysbench, shards and etcd on CPUs $pin_rest (direct runs on $pin_rest alone: its ratios are not like-for-like)"
  else
    echo "idgate bench $stamp: idle sessions only"
  fi
  echo "load average: $(grep '^# load average' "$results" | sed 's/^# load average at start: //') at start, $(cut -d' ' -f1-3 /proc/loadavg) at end"
  ((idgate_ok)) || echo "NOTE: idgate was SKIPPED in this run (not built or not answering): direct and HAProxy only"
  [ -z "$base_settings" ] || echo "NOTE: idgate and idgate_base ran different settings (< idgate, > idgate_base; BENCH_BASE_EXTRA=1, BENCH_BASE_SERVER_EXTRA=1 or BENCH_BASE_BACKEND_EXTRA make them alike): $base_settings"
  "$py" "$repo/bench/report.py" "$results"
  grep '^# id check' "$results" | sed 's/^# //' || true
  grep '^# idgate pool' "$results" | sed 's/^# //' || true
  echo
  echo "raw results: $results"
} | tee "$report"
log "done in $((SECONDS - started)) s; report $report"
if grep -q '^# id check.* FAIL$' "$results"; then
  log "FAILED: the id check of $ids_db.sbtest1 (see above)"
  exit 1
fi
