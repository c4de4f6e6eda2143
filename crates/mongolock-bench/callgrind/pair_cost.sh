#!/bin/sh
# Where an uncontended acquire + release pair's instructions go, on the client and on the
# server, for mongolock and for a peer, counted by callgrind (instruction counts repeat
# from run to run and do not depend on the machine's load; timings on a shared machine do).
#
#   crates/mongolock-bench/callgrind/pair_cost.sh [PAIRS] [WARM] [OUT_DIR]
#
# Builds `examples/pair_cost.rs` optimised as in a release build, with line tables (a
# profile of its own, `callgrind`, defined here on the command line: target/callgrind/),
# runs it under `valgrind --tool=callgrind` for mongolock, mongo-lock-async and the driver
# alone, and prints the breakdown (`breakdown.py`) as Markdown. PAIRS (default 20) pairs
# are measured after WARM (default 10). The profiles stay in OUT_DIR (default a new
# temporary directory) for `callgrind_annotate`. About 1 minute of valgrind per library.
set -eu
pairs=${1:-20}
warm=${2:-10}
out=${3:-$(mktemp -d)}
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
cargo --config 'profile.callgrind.inherits="release"' \
      --config 'profile.callgrind.debug="line-tables-only"' \
      build --profile callgrind -p mongolock-bench --example pair_cost >&2
target=${CARGO_TARGET_DIR:-$root/target}
bin=$target/callgrind/examples/pair_cost
mkdir -p "$out"
for lib in mongolock mongo-lock-async driver; do
    rm -f "$out/$lib.out"*
    valgrind --tool=callgrind --separate-threads=yes \
        --dump-after=pair_cost::acquire_once --dump-after=pair_cost::release_once \
        --dump-after=pair_cost::idle_once --dump-after=pair_cost::server_mark \
        --dump-after=pair_cost::blocking_mark \
        --callgrind-out-file="$out/$lib.out" "$bin" "$lib" "$pairs" "$warm" \
        2>"$out/$lib.valgrind.log" >&2
done
echo "profiles in $out" >&2
python3 "$root/crates/mongolock-bench/callgrind/breakdown.py" "$out" "$warm" "$pairs" \
    mongolock mongo-lock-async driver
