#!/usr/bin/env bash
# Runs every check CI runs, on a fresh Debian machine as on a developer's:
# installs what is missing, starts the test bed (two MariaDB shards and etcd
# on 127.0.0.1), then formatting, lints and the whole test suite against the
# real servers.
#
#   scripts/test.sh            everything
#   scripts/test.sh -- ARGS    extra arguments for `cargo test` (e.g. a test name)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

"$repo/scripts/testbed.sh" up
eval "$("$repo/scripts/testbed.sh" env)"

extra=()
if [ "${1:-}" = "--" ]; then shift; extra=("$@"); fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --all-targets --locked -- -D warnings
echo "== cargo test"
# --all-targets also runs each criterion benchmark once, as a smoke test.
cargo test --all-targets --locked "${extra[@]}"
