#!/usr/bin/env bash
# The test bed: four MariaDB servers and one etcd on 127.0.0.1, each with its
# own port and data directory, for idgate's tests, demo and benchmarks. Most
# tests use s0 and s1; s2 is for placement over three shards; s3 folds table
# names (lower_case_table_names = 1, as on Windows, macOS and some managed
# services), for the tests of rule matching there.
#
#   scripts/testbed.sh up       install what is missing (apt-get), start, wait until ready
#   scripts/testbed.sh down     stop what `up` started (by pid file, never by name)
#   scripts/testbed.sh status   show what is running
#   scripts/testbed.sh env      print the environment the tests read
#
# The shards serve TLS (certificates made with openssl in $dir/tls, see
# tls_material) and have an account that logs in only over TLS
# (idgate_tls, REQUIRE SSL).
#
# Ports (override with the same variables): IDGATE_TB_S0_PORT=23061,
# IDGATE_TB_S1_PORT=23062, IDGATE_TB_S2_PORT=23063, IDGATE_TB_S3_PORT=23064,
# IDGATE_TB_ETCD_PORT=23790
# (peer port +10). All below 32768, outside Linux's ephemeral range
# (ip_local_port_range 32768-60999): an outgoing connection (apt, cargo, a
# test's client) is given a local port from that range, and a server cannot
# bind a port some connection holds (a CI run lost its s3 on 33064 that way).
# State lives in $IDGATE_TESTBED_DIR (default: <repo>/testbed).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${IDGATE_TESTBED_DIR:-$repo/testbed}
s_ports=("${IDGATE_TB_S0_PORT:-23061}" "${IDGATE_TB_S1_PORT:-23062}" "${IDGATE_TB_S2_PORT:-23063}" "${IDGATE_TB_S3_PORT:-23064}")
etcd_port=${IDGATE_TB_ETCD_PORT:-23790}
etcd_peer_port=$((etcd_port + 10))
user=idgate
password=idgate
# A shard account MariaDB accepts only over TLS (REQUIRE SSL).
tls_user=idgate_tls
tls_password=idgate_tls
tls_dir="$dir/tls"

log() { printf '[testbed] %s\n' "$*" >&2; }

# Debian packages this project needs to build, test and benchmark.
# libprotobuf-dev has the well-known .proto files (google/protobuf/*.proto)
# that etcd-client's build imports; protobuf-compiler only recommends it, and
# recommends are not installed here.
packages=(mariadb-server mariadb-client etcd-server etcd-client sysbench haproxy
          protobuf-compiler libprotobuf-dev python3-pymysql python3-cryptography curl openssl)
# (python3-cryptography: PyMySQL's RSA for caching_sha2_password without TLS;
# mariadb-client's libmariadb3 brings the caching_sha2_password client plugin.)

ensure_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  # policy-rc.d keeps the packages' own service from starting; we run our own.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# TLS material for the shards and for idgate's own listener in tests: a CA,
# two server certificates it signed for 127.0.0.1/localhost (the second for
# certificate reloads), a client certificate (sysbench sends one with TLS on),
# and an unrelated CA (a certificate that must not verify).
tls_material() {
  mkdir -p "$tls_dir"
  local ext="$tls_dir/san.ext" ca n serial
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' >"$ext"
  # Each file only when missing: running shards keep what they loaded.
  for ca in ca other-ca; do
    [ -f "$tls_dir/$ca.pem" ] && continue
    log "tls: generating $tls_dir/$ca.pem"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 \
      -keyout "$tls_dir/$ca.key" -out "$tls_dir/$ca.pem" -subj "/CN=idgate testbed $ca" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  done
  # server, server2: for 127.0.0.1/localhost; client: sysbench's (bench.sh --tls).
  for n in server:1001 server2:1002 client:2001; do
    serial=${n#*:} n=${n%%:*}
    [ -f "$tls_dir/$n.pem" ] && continue
    log "tls: generating $tls_dir/$n.pem"
    openssl req -newkey rsa:2048 -nodes -keyout "$tls_dir/$n.key" -out "$tls_dir/$n.csr" \
      -subj "/CN=idgate testbed $n" 2>/dev/null
    local extargs=(-extfile "$ext")
    [ "$n" = client ] && extargs=()
    openssl x509 -req -in "$tls_dir/$n.csr" -CA "$tls_dir/ca.pem" -CAkey "$tls_dir/ca.key" \
      -set_serial "$serial" -days 3650 -sha256 "${extargs[@]}" -out "$tls_dir/$n.pem" 2>/dev/null
    rm -f "$tls_dir/$n.csr"
  done
  # idgate's RSA key for caching_sha2_password without TLS ([server] rsa_key).
  if [ ! -f "$tls_dir/rsa.key" ]; then
    log "tls: generating $tls_dir/rsa.key"
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$tls_dir/rsa.key" 2>/dev/null
  fi
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# wait_until SECONDS PID LOG DESCRIPTION COMMAND...: until COMMAND succeeds.
# Fails at once when the server PID has exited, and on timeout; either way the
# end of its LOG goes to stderr, so a CI log says why.
wait_until() {
  local deadline=$((SECONDS + $1)) pid=$2 logf=$3 what=$4; shift 4
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$what exited while starting; the end of $logf:"
      tail -n 25 "$logf" >&2 || true
      return 1
    fi
    if ((SECONDS >= deadline)); then
      log "timed out after $1 s waiting for $what; the end of $logf:"
      tail -n 25 "$logf" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

mariadb_up() { # mariadb_up INDEX [SERVER OPTION...] (also given to mariadb-install-db)
  local i=$1 port=${s_ports[$1]} d="$dir/s$1"
  shift
  local extra=("$@")
  local sock="$d/mysqld.sock" pid="$d/mysqld.pid"
  if alive "$pid"; then log "s$i already running (port $port)"; return 0; fi
  if [ -f "$pid" ]; then rm -f "$pid"; fi
  mkdir -p "$d"
  if [ ! -d "$d/data/mysql" ]; then
    log "s$i: initialising $d/data"
    mariadb-install-db --no-defaults --datadir="$d/data" --user="$(id -un)" \
      --auth-root-authentication-method=socket --skip-test-db "${extra[@]}" >"$d/install.log" 2>&1 \
      || { cat "$d/install.log" >&2; return 1; }
  fi
  log "s$i: starting on 127.0.0.1:$port"
  mariadbd --no-defaults --datadir="$d/data" --user="$(id -un)" \
    --port="$port" --bind-address=127.0.0.1 --socket="$sock" --pid-file="$pid" \
    --log-error="$d/error.log" --skip-name-resolve --max-connections=2000 \
    --innodb-buffer-pool-size=256M --innodb-log-file-size=256M \
    --innodb-flush-log-at-trx-commit=2 --sync-binlog=0 \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
    --max-allowed-packet=256M --port-open-timeout=30 \
    --ssl-ca="$tls_dir/ca.pem" --ssl-cert="$tls_dir/server.pem" --ssl-key="$tls_dir/server.key" \
    "${extra[@]}" >"$d/stdout.log" 2>&1 &
  wait_until 120 $! "$d/error.log" "s$i" mariadb-admin --no-defaults --socket="$sock" -uroot ping
  mariadb --no-defaults --socket="$sock" -uroot <<SQL
CREATE USER IF NOT EXISTS '$user'@'127.0.0.1' IDENTIFIED BY '$password';
CREATE USER IF NOT EXISTS '$user'@'localhost' IDENTIFIED BY '$password';
GRANT ALL PRIVILEGES ON *.* TO '$user'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO '$user'@'localhost' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS '$tls_user'@'127.0.0.1' IDENTIFIED BY '$tls_password' REQUIRE SSL;
CREATE USER IF NOT EXISTS '$tls_user'@'localhost' IDENTIFIED BY '$tls_password' REQUIRE SSL;
GRANT ALL PRIVILEGES ON *.* TO '$tls_user'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO '$tls_user'@'localhost' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS sbtest;
FLUSH PRIVILEGES;
SQL
}

etcd_up() {
  local d="$dir/etcd" pid="$dir/etcd/etcd.pid"
  if alive "$pid"; then log "etcd already running (port $etcd_port)"; return 0; fi
  mkdir -p "$d"
  log "etcd: starting on 127.0.0.1:$etcd_port"
  etcd --name testbed --data-dir "$d/data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "testbed=http://127.0.0.1:$etcd_peer_port" \
    >"$d/etcd.log" 2>&1 &
  echo $! >"$pid"
  wait_until 60 "$(cat "$pid")" "$d/etcd.log" etcd curl -fsS "http://127.0.0.1:$etcd_port/health"
}

stop_pidfile() { # stop_pidfile NAME FILE
  local name=$1 f=$2
  if ! alive "$f"; then rm -f "$f"; return 0; fi
  local p; p=$(cat "$f")
  log "stopping $name (pid $p)"
  kill "$p"
  for _ in $(seq 1 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$p" 2>/dev/null; then log "$name did not stop in 30 s, killing"; kill -9 "$p"; fi
  rm -f "$f"
}

cmd_env() {
  echo "export IDGATE_TEST_S0=127.0.0.1:${s_ports[0]}"
  echo "export IDGATE_TEST_S1=127.0.0.1:${s_ports[1]}"
  echo "export IDGATE_TEST_S2=127.0.0.1:${s_ports[2]}"
  echo "export IDGATE_TEST_S3_FOLDED=127.0.0.1:${s_ports[3]}"
  echo "export IDGATE_TEST_ETCD=http://127.0.0.1:$etcd_port"
  echo "export IDGATE_TEST_USER=$user"
  echo "export IDGATE_TEST_PASSWORD=$password"
  echo "export IDGATE_TEST_TLS_USER=$tls_user"
  echo "export IDGATE_TEST_TLS_PASSWORD=$tls_password"
  echo "export IDGATE_TEST_TLS_DIR=$tls_dir"
  echo "export IDGATE_TEST_TLS_CA=$tls_dir/ca.pem"
  echo "export IDGATE_TEST_TLS_CERT=$tls_dir/server.pem"
  echo "export IDGATE_TEST_TLS_KEY=$tls_dir/server.key"
}

case "${1:-}" in
  up)
    ensure_packages
    mkdir -p "$dir"
    tls_material
    mariadb_up 0
    mariadb_up 1
    mariadb_up 2
    mariadb_up 3 --lower-case-table-names=1
    etcd_up
    log "ready: shards 127.0.0.1:${s_ports[0]}, 127.0.0.1:${s_ports[1]}, 127.0.0.1:${s_ports[2]}, 127.0.0.1:${s_ports[3]} (names folded) (user $user/$password), etcd 127.0.0.1:$etcd_port"
    ;;
  down)
    stop_pidfile etcd "$dir/etcd/etcd.pid"
    stop_pidfile s3 "$dir/s3/mysqld.pid"
    stop_pidfile s2 "$dir/s2/mysqld.pid"
    stop_pidfile s1 "$dir/s1/mysqld.pid"
    stop_pidfile s0 "$dir/s0/mysqld.pid"
    ;;
  status)
    for n in s0 s1 s2 s3; do alive "$dir/$n/mysqld.pid" && echo "$n: running" || echo "$n: stopped"; done
    alive "$dir/etcd/etcd.pid" && echo "etcd: running" || echo "etcd: stopped"
    ;;
  env) cmd_env ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
