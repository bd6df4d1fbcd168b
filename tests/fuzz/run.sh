#!/usr/bin/env bash
# run.sh BUILD_DIR SECONDS
# Runs every libFuzzer target in BUILD_DIR/bin (*_fuzz) against tests/fuzz/corpus/<target>/ and the
# corpora it shares with other targets (tests/fuzz/shared_corpora).
# SECONDS=0 replays the seed corpus once (CI); otherwise each target fuzzes for SECONDS, writing
# new inputs to BUILD_DIR/corpus/<target>/ so the committed seeds stay small and hand-picked.
set -euo pipefail
build=$1 seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
shopt -s nullglob
targets=("$build"/bin/*_fuzz)
[ "${#targets[@]}" -gt 0 ] || { echo "no fuzz targets in $build/bin" >&2; exit 1; }
for target in "${targets[@]}"; do
  name=$(basename "$target")
  seeds="$here/corpus/$name"
  [ -d "$seeds" ] && [ -n "$(ls -A "$seeds")" ] || { echo "$name: no seed corpus in $seeds" >&2; exit 1; }
  # Seed corpora of other targets this one shares (tests/fuzz/shared_corpora).
  dirs=("$seeds")
  for other in $(sed -n "s/^$name:[[:space:]]*//p" "$here/shared_corpora"); do
    [ -d "$here/corpus/$other" ] || { echo "$name: shared corpus $other missing" >&2; exit 1; }
    dirs+=("$here/corpus/$other")
  done
  files=()
  for d in "${dirs[@]}"; do files+=("$d"/*); done
  if [ "$seconds" -eq 0 ]; then
    echo "== $name: replaying ${#files[@]} seeds (${dirs[*]##*/})"
    "$target" "${files[@]}"   # file arguments: each runs once, no mutation
  else
    work="$build/corpus/$name"
    mkdir -p "$work"
    echo "== $name: fuzzing for ${seconds}s"
    "$target" -max_total_time="$seconds" -print_final_stats=1 "$work" "${dirs[@]}"
  fi
done
