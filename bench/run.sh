#!/usr/bin/env bash
# run.sh BUILD_DIR — runs every Google Benchmark program (BUILD_DIR/bin/bench_*) with repetitions,
# then writes BUILD_DIR/bench/micro.csv (medians, each beside its same-run peer) and one PNG plot
# per program; then vessel-bench's modes (each writes its CSV, plotted here too).
set -euo pipefail
build=${1:-build}
out="$build/bench"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
shopt -s nullglob
programs=("$build"/bin/bench_*)
[ "${#programs[@]}" -gt 0 ] || { echo "no benchmark programs in $build/bin" >&2; exit 1; }
for program in "${programs[@]}"; do
  name=$(basename "$program")
  echo "== $name"
  "$program" --benchmark_repetitions="${VESSEL_BENCH_REPETITIONS:-5}" \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/$name.json" --benchmark_out_format=json
done
echo "== vessel-bench transport (tcp and shm between 2 processes)"
"$build/bin/vessel-bench" transport --transport all --csv "$out/transport.csv"
echo "== vessel-bench p2p (comm, rank actor, hosted app actor between 2 rank processes vs Open MPI, tcp and shm)"
"$build/bin/vessel-bench" p2p --transport all --csv "$out/p2p.csv"
echo "== vessel-bench model (collective algorithms on the simulated network vs the alpha-beta formula)"
"$build/bin/vessel-bench" model --transport all --csv "$out/model.csv"
echo "== vessel-bench coll (allreduce, broadcast, allgather, reduce_scatter on 2 and 4 ranks vs Open MPI)"
"$build/bin/vessel-bench" coll --transport all --csv "$out/coll.csv"
python3 "$here/plot_coll.py" "$out" "$out/coll.csv"
python3 "$here/summarize.py" "$out" "$out"/bench_*.json "$out"/transport.csv "$out"/p2p.csv
echo "wrote $out/*.csv and $out/*.png"
