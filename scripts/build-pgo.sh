#!/usr/bin/env bash
# Release build with profile-guided optimisation (PGO): the binary to deploy
# and to benchmark.
#
#   scripts/build-pgo.sh [--time S] [--keep-profile]
#
# 1. llvm-profdata of rustc's own LLVM (`rustup component add llvm-tools`
#    when it is missing: a profile is read only by the LLVM that wrote it).
# 2. An instrumented release build (-Cprofile-generate), in target/pgo/gen.
# 3. Training: that binary serves sysbench through scripts/bench.sh
#    (multiplexed: point selects, inserts relayed and with ids injected,
#    server-side prepared read/write transactions, keyed and scatter
#    selects over two shards; pooled: point selects, inserts, prepared
#    statements) and connect + SELECT 1 + close through
#    scripts/bench-connect.sh. Every workload runs once, S seconds
#    (default 4); the test bed is started when it is not up.
# 4. llvm-profdata merge, then the release build again with -Cprofile-use,
#    in target/pgo/use. The result is copied to target/pgo/idgate.
#
# Profiles are tied to the source: build again after changing it (code the
# profile does not know is still built, only without its guidance).
# Takes about 20 minutes on two cores (two fat-LTO builds and the training).
# target/release/idgate is left as it was.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
secs=4 keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --time) secs=$2; shift 2 ;;
    --keep-profile) keep=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
log() { printf '[build-pgo] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
started=$SECONDS

out=$repo/target/pgo
raw=$out/raw
profile=$out/idgate.profdata
sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$sysroot/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
  log "llvm-profdata missing: rustup component add llvm-tools"
  rustup component add llvm-tools >&2 || die "cannot install llvm-tools (rustup component add llvm-tools)"
  [ -x "$profdata" ] || die "no $profdata after installing llvm-tools"
fi

mkdir -p "$out"
rm -rf "$raw"
log "instrumented build (target/pgo/gen)"
(cd "$repo" && RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$raw" \
  cargo build --release --locked --target-dir "$out/gen")
gen_bin=$out/gen/release/idgate

common=(--no-build --rounds 1 --time "$secs" --warmup 1 --no-control --no-idle)
log "training: multiplexed"
BENCH_BACKEND_EXTRA="multiplex = true" IDGATE_BIN=$gen_bin "$repo/scripts/bench.sh" run "${common[@]}" \
  --workloads "point_select insert read_write_ps point_select_sharded scatter_select scatter_string" >&2
log "training: pooled"
IDGATE_BIN=$gen_bin "$repo/scripts/bench.sh" run "${common[@]}" \
  --workloads "point_select insert read_write_ps" >&2
log "training: connect"
IDGATE_BIN=$gen_bin "$repo/scripts/bench-connect.sh" --no-build --rounds 1 --time "$secs" >&2

compgen -G "$raw/*.profraw" >/dev/null || die "the training wrote no profile into $raw"
"$profdata" merge -o "$profile" "$raw"/*.profraw
((keep)) || rm -rf "$raw"
log "optimised build (target/pgo/use, profile $(du -h "$profile" | cut -f1))"
(cd "$repo" && RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$profile" \
  cargo build --release --locked --target-dir "$out/use")
cp "$out/use/release/idgate" "$out/idgate"
log "done in $((SECONDS - started)) s: $out/idgate"
