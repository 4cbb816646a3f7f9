#!/usr/bin/env bash
# run_fuzz.sh — runs one libFuzzer target for a while over a fresh copy of its
# seed corpora; what ctest and scripts/fuzz call.
#
#   run_fuzz.sh BINARY SECONDS WORK_DIR SEED_DIR...
#
# WORK_DIR/corpus gets the seeds (missing seed directories are skipped) and the
# inputs the run finds; WORK_DIR/artifacts/ any crashing, leaking or slow
# input. A dictionary tests/fuzz/<target>.dict is used when present. Exits
# nonzero when the target finds a crash. Flags in tests/fuzz/<target>.options
# are added too. FTC_FUZZ_KEEP=1 keeps an existing
# corpus (the long runs grow it); FTC_FUZZ_ARGS adds libFuzzer flags.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 BINARY SECONDS WORK_DIR SEED_DIR..." >&2
  exit 2
fi
bin=$1 secs=$2 work=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
name=$(basename "$bin")

if [ "${FTC_FUZZ_KEEP:-0}" != 1 ]; then
  rm -rf "$work/corpus"
fi
mkdir -p "$work/corpus" "$work/artifacts"
for d in "$@"; do
  if [ -d "$d" ] && [ -n "$(ls -A "$d")" ]; then
    cp -r "$d"/. "$work/corpus"/
  fi
done

args=(-max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -max_len=65536
      -print_final_stats=1 -artifact_prefix="$work/artifacts/")
if [ -f "$here/$name.dict" ]; then
  args+=(-dict="$here/$name.dict")
fi
# per-target libFuzzer flags (one line), e.g. -close_fd_mask=3 for a target
# whose code prints usage errors on every input
if [ -f "$here/$name.options" ]; then
  # shellcheck disable=SC2207
  args+=($(cat "$here/$name.options"))
fi
# shellcheck disable=SC2206
args+=(${FTC_FUZZ_ARGS:-})
echo "$name: $(ls "$work/corpus" | wc -l) seed inputs, ${secs}s" >&2
exec "$bin" "${args[@]}" "$work/corpus"
