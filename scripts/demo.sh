#!/usr/bin/env bash
# idgate in two minutes: the first thing to run on a fresh machine.
#
#   scripts/demo.sh [--no-build]
#
# 1. brings the test bed up (scripts/testbed.sh up: two MariaDB shards and etcd
#    on 127.0.0.1, installing what is missing with apt-get);
# 2. builds idgate (cargo build --release);
# 3. writes a config (target/demo/idgate.toml) that uses the repo's rules/
#    (shop.orders.id from the sequence generator `orders`, shop.events.id from
#    the snowflake generator `events`) and keeps generator state in etcd;
# 4. starts `idgate serve` on a free port (6033 when it is free);
# 5. creates shop.orders and shop.events on shard s0 directly, WITHOUT
#    AUTO_INCREMENT, and shows that MariaDB alone refuses a row without an id;
# 6. runs INSERTs through idgate with the `mariadb` client (one row, several
#    rows, an explicit id, a NULL id), SELECT LAST_INSERT_ID() and SELECT *,
#    printing every statement and its output;
# 7. shows the rows as stored on the shard, stops idgate, and leaves the test
#    bed running (stop it with `scripts/testbed.sh down`).
#
# Environment: IDGATE_BIN (default target/release/idgate), IDGATE_TB_S0_PORT /
# IDGATE_TB_ETCD_PORT (test bed ports, as testbed.sh), IDGATE_DEMO_USER /
# IDGATE_DEMO_PASSWORD (the account the demo logs in to idgate with, default
# app / app-secret).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
do_build=1
case "${1:-}" in
  --no-build) do_build=0 ;;
  "") ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--no-build]" >&2; exit 2 ;;
esac

host=127.0.0.1
s0_port=${IDGATE_TB_S0_PORT:-23061}
s1_port=${IDGATE_TB_S1_PORT:-23062}
etcd_port=${IDGATE_TB_ETCD_PORT:-23790}
backend_user=idgate backend_password=idgate # the test bed's account on every shard
app_user=${IDGATE_DEMO_USER:-app}
app_password=${IDGATE_DEMO_PASSWORD:-app-secret}
dba_user=dba dba_password=dba-secret           # idgate's admin account in the demo
idgate_bin=${IDGATE_BIN:-$repo/target/release/idgate}
demo_dir=$repo/target/demo

bold='' plain=''
if [ -t 1 ]; then bold=$(tput bold 2>/dev/null || true) plain=$(tput sgr0 2>/dev/null || true); fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
say() { printf '%s\n' "$*"; }
die() { printf 'demo: error: %s\n' "$*" >&2; exit 1; }

# mysql_cli PORT USER PASSWORD [mariadb options...]
mysql_cli() {
  local port=$1 user=$2 password=$3; shift 3
  mariadb --no-defaults --protocol=tcp -h"$host" -P"$port" -u"$user" -p"$password" --connect-timeout=5 "$@"
}
# A session that echoes every statement, then its result (or error), in order.
# Lines `\! echo ...` in the input print notes between the statements (the
# client ends them at a semicolon: notes must not contain one).
session() { # session PORT USER PASSWORD < SQL
  timeout 120 stdbuf -o0 -e0 mariadb --no-defaults --protocol=tcp -h"$host" -P"$1" -u"$2" -p"$3" \
    --connect-timeout=5 --table -vvv --force 2>&1 | sed '/^Bye$/d'
}

port_in_use() { (exec 3<>"/dev/tcp/$host/$1") 2>/dev/null; }

idgate_pid=
stop_idgate() { # by the pid we started it with; SIGTERM lets sessions finish
  if [ -n "$idgate_pid" ] && kill -0 "$idgate_pid" 2>/dev/null; then
    say "stopping idgate (pid $idgate_pid)"
    kill "$idgate_pid" 2>/dev/null || true
    for _ in $(seq 1 75); do kill -0 "$idgate_pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$idgate_pid" 2>/dev/null; then kill -9 "$idgate_pid" 2>/dev/null || true; fi
    wait "$idgate_pid" 2>/dev/null || true
  fi
  idgate_pid=
}
cleanup() {
  local rc=$?
  stop_idgate
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ 1. test bed
step "1. test bed: MariaDB shards on $host:$s0_port and :${IDGATE_TB_S1_PORT:-23062}, etcd on $host:$etcd_port"
if command -v mariadb >/dev/null && command -v curl >/dev/null &&
  mysql_cli "$s0_port" "$backend_user" "$backend_password" -e 'SELECT 1' >/dev/null 2>&1 &&
  curl -fsS "http://$host:$etcd_port/health" >/dev/null 2>&1; then
  say "already running"
else
  "$repo/scripts/testbed.sh" up
fi

# ------------------------------------------------------------------ 2. build
step "2. build: cargo build --release"
if ((do_build)); then
  if ! command -v cargo >/dev/null; then
    die "cargo not found: install Rust (https://rustup.rs), then run this again"
  fi
  (cd "$repo" && cargo build --release) || die "the build failed (see above)"
else
  say "(skipped: --no-build)"
fi
[ -x "$idgate_bin" ] || die "no idgate binary at $idgate_bin"
say "$idgate_bin"

# ------------------------------------------------------------------ 3. config
step "3. config: $demo_dir/idgate.toml"
mkdir -p "$demo_dir"
rules_dir=$repo/rules
if [ ! -f "$rules_dir/shop.toml" ]; then
  # Until rules/shop.toml is in the repo: the same rules, written here.
  rules_dir=$demo_dir/rules
  mkdir -p "$rules_dir"
  cat >"$rules_dir/shop.toml" <<'EOF'
# Written by scripts/demo.sh because rules/shop.toml is missing.
[[generator]]
name = "orders"
kind = "sequence"
batch = 1000
start = 1

[[generator]]
name = "events"
kind = "snowflake"
epoch = "2026-01-01T00:00:00Z"
timestamp_bits = 41
node_bits = 10
sequence_bits = 12

[[table]]
name = "shop.orders"
column = "id"
generator = "orders"

[[table]]
name = "shop.events"
column = "id"
generator = "events"
EOF
  say "(rules/shop.toml is not in the repo yet: using $rules_dir/shop.toml)"
fi
port=6033
while port_in_use "$port"; do
  port=$((port + 1))
  ((port < 6100)) || die "no free port in 6033..6099"
done
# idgate refuses a world-readable config that holds a plaintext password:
# written afresh (a file left by an earlier run keeps its old mode).
umask 077
rm -f "$demo_dir/idgate.toml"
cat >"$demo_dir/idgate.toml" <<EOF
# Written by scripts/demo.sh. See examples/ for every key, commented.
[server]
listen = "$host:$port"

[[users]]                       # the account applications log in to idgate with
name = "$app_user"
password = "$app_password"

[[users]]                       # a DBA's account: may also run IDGATE SET FLOOR / RESERVE
name = "$dba_user"
password = "$dba_password"
admin = true

[backend]                       # the account idgate uses on the shards
user = "$backend_user"
password = "$backend_password"

[[shards]]                      # the first shard is the default shard
name = "s0"
address = "$host:$s0_port"

[[shards]]
name = "s1"
address = "$host:$s1_port"

[allocator]                     # generator state, shared by every idgate process
store = "etcd"
etcd_endpoints = ["http://$host:$etcd_port"]
etcd_prefix = "/idgate-demo"

[rules]
dir = "$rules_dir"
EOF
cat "$demo_dir/idgate.toml"
say ""
say "rules ($rules_dir):"
grep -hv '^ *#' "$rules_dir"/*.toml | sed '/^ *$/d; s/^/    /'

# ------------------------------------------------------------------ 4. start
step "4. idgate serve --config $demo_dir/idgate.toml"
IDGATE_LOG=${IDGATE_LOG:-info} "$idgate_bin" serve --config "$demo_dir/idgate.toml" >"$demo_dir/idgate.log" 2>&1 &
idgate_pid=$!
deadline=$((SECONDS + 60))
until timeout 10 mariadb --no-defaults --protocol=tcp -h"$host" -P"$port" -u"$app_user" -p"$app_password" \
  --connect-timeout=5 -e 'SELECT 1' >/dev/null 2>&1; do
  if ! kill -0 "$idgate_pid" 2>/dev/null; then
    rc=0; wait "$idgate_pid" || rc=$?; idgate_pid=
    tail -n 20 "$demo_dir/idgate.log" >&2
    die "idgate exited with status $rc before answering on $host:$port (log: $demo_dir/idgate.log)"
  fi
  ((SECONDS < deadline)) || { tail -n 20 "$demo_dir/idgate.log" >&2; die "idgate did not answer on $host:$port within 60 s"; }
  sleep 0.2
done
say "idgate is listening on $host:$port (pid $idgate_pid, log $demo_dir/idgate.log)"
say "connect yourself while it runs: mariadb -h$host -P$port -u$app_user -p$app_password shop"

# ------------------------------------------------------------------ 5. tables
step "5. on shard s0 directly ($host:$s0_port): the tables, with no AUTO_INCREMENT"
session "$s0_port" "$backend_user" "$backend_password" <<'SQL'
CREATE DATABASE IF NOT EXISTS shop;
DROP TABLE IF EXISTS shop.orders, shop.events;
CREATE TABLE shop.orders (id BIGINT PRIMARY KEY, customer VARCHAR(64), total DECIMAL(10,2));
CREATE TABLE shop.events (id BIGINT PRIMARY KEY, kind VARCHAR(32), detail VARCHAR(255));
\! echo "# Without idgate, a row without an id is refused:"
INSERT INTO shop.orders (customer, total) VALUES ('nobody', 1.00);
SQL
say "and the schema on shard s1 ($host:$s1_port), for the sharded table shop.users:"
session "$s1_port" "$backend_user" "$backend_password" <<'SQL'
CREATE DATABASE IF NOT EXISTS shop;
SQL

# ------------------------------------------------------------------ 6. through idgate
step "6. the same kind of statements through idgate ($host:$port, user $app_user): idgate fills the ids"
out=$demo_dir/session.out
session "$port" "$app_user" "$app_password" <<'SQL' | tee "$out"
\! echo "# One row, id omitted: idgate generates it, and LAST_INSERT_ID() returns it, as with AUTO_INCREMENT."
INSERT INTO shop.orders (customer, total) VALUES ('alice', 12.50);
SELECT LAST_INSERT_ID();
\! echo "# Several rows: one id each, and LAST_INSERT_ID() is the first one (MySQL's rule)."
INSERT INTO shop.orders (customer, total) VALUES ('bob', 7.00), ('carol', 99.90), ('dave', 3.10);
SELECT LAST_INSERT_ID();
\! echo "# An explicit id is kept (and raises the generator's floor: later ids come above it)."
INSERT INTO shop.orders (id, customer, total) VALUES (5000, 'erin', 20.00);
\! echo "# A NULL id (or 0, or DEFAULT) is generated, like AUTO_INCREMENT does."
INSERT INTO shop.orders (id, customer, total) VALUES (NULL, 'frank', 1.00);
SELECT LAST_INSERT_ID();
SELECT * FROM shop.orders ORDER BY id;
\! echo "# shop.events takes its ids from a snowflake generator (time-ordered 64-bit ids)."
INSERT INTO shop.events (kind, detail) VALUES ('order_created', 'alice'), ('order_paid', 'alice');
SELECT LAST_INSERT_ID();
SELECT * FROM shop.events ORDER BY id;
\! echo "# shop.users is sharded by id over s0 and s1 (rules/shop.toml: mod). DDL runs on both shards,"
\! echo "# each row goes to the shard of the id idgate gives it (a multi-row INSERT is split per shard),"
\! echo "# a read by id goes to one shard, other reads go to both and are merged."
DROP TABLE IF EXISTS shop.users;
CREATE TABLE shop.users (id BIGINT PRIMARY KEY, name VARCHAR(64));
INSERT INTO shop.users (name) VALUES ('ann'), ('ben'), ('cid'), ('dot'), ('eve');
SELECT LAST_INSERT_ID();
SELECT * FROM shop.users ORDER BY name DESC LIMIT 3;
SELECT COUNT(*), MIN(id), MAX(id) FROM shop.users;
SELECT name FROM shop.users WHERE id = 2;
\! echo "# shop.notes is sharded by user_id (not by its own id): each note goes to its user's shard,"
\! echo "# and a user's notes are read from that one shard."
DROP TABLE IF EXISTS shop.notes;
CREATE TABLE shop.notes (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, body VARCHAR(64));
INSERT INTO shop.notes (user_id, body) VALUES (1, 'hello'), (2, 'hi'), (1, 'again');
SELECT id, user_id, body FROM shop.notes WHERE user_id = 1 ORDER BY id;
SQL
say ""
say "as the DBA account $dba_user (admin = true: idgate's statements that change state need it):"
session "$port" "$dba_user" "$dba_password" <<'SQL' | tee -a "$out"
\! echo "# idgate's own statements: what the generators hold, and (for migrations) moving a"
\! echo "# generator above the largest id already stored in its tables on every shard."
SHOW IDGATE GENERATORS;
IDGATE SET FLOOR orders FROM TABLES;
SQL

# ------------------------------------------------------------------ 7. the shard
step "7. what the shards store (read directly, not through idgate)"
say "shard s0:"
session "$s0_port" "$backend_user" "$backend_password" <<'SQL'
SELECT id, customer, total FROM shop.orders ORDER BY id;
SELECT id, kind, detail FROM shop.events ORDER BY id;
SELECT id, name FROM shop.users ORDER BY id;
SELECT id, user_id, body FROM shop.notes ORDER BY id;
SQL
say "shard s1:"
session "$s1_port" "$backend_user" "$backend_password" <<'SQL'
SELECT id, name FROM shop.users ORDER BY id;
SELECT id, user_id, body FROM shop.notes ORDER BY id;
SQL

failed=$(grep -c '^ERROR' "$out" || true)
step "done"
stop_idgate
if ((failed > 0)); then
  say "$failed statement(s) through idgate failed (see above, and $demo_dir/idgate.log)."
fi
say "idgate is stopped now; the test bed keeps running for the tests and for you:"
say "    scripts/testbed.sh status     scripts/testbed.sh down   (to stop it)"
say "Run it yourself: $idgate_bin serve --config $demo_dir/idgate.toml"
((failed == 0))
