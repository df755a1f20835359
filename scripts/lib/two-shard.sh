# Sourced by the bench scripts that run idgate in front of the test bed's
# shards s0 and s1 with a file allocator and a rules directory.
#
#   two_shard_config FILE PORT RULES_DIR STATE_FILE [SERVER_LINES]
#
# writes idgate's config to FILE (mode 600: it holds passwords): listening
# on 127.0.0.1:PORT (plus SERVER_LINES in [server]), user app/secret, the
# backend account $U/$P, shards s0=$S0 and s1=$S1.
two_shard_config() {
  local file=$1 port=$2 rules=$3 state=$4 extra=${5:-}
  cat >"$file" <<CONFIG
[server]
listen = "127.0.0.1:$port"
$extra

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
store = "file"
file_path = "$state"

[rules]
dir = "$rules"
CONFIG
  chmod 600 "$file"
}
