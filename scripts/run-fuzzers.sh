#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang, ASan + UBSan) and runs each for a bounded
# time from its committed seed corpus (tests/fuzz/corpus/<target>). Fails on any crash, leak,
# sanitizer report, timeout or out-of-memory; the input that did it is left in
# $BUILD/artifacts/ (reproduce: $BUILD/<target> <that file>). See docs/testing.md.
#
#   scripts/run-fuzzers.sh [seconds per target (60)] [targets run at once (nproc)]
# Env: FUZZ_BUILD (build-fuzz), FUZZ_TARGETS (all built ones), CXX (clang++).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
PARALLEL=${2:-$(nproc)}
BUILD=${FUZZ_BUILD:-build-fuzz}

cmake -S tests/fuzz -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER="${CXX:-clang++}" >/dev/null
cmake --build "$BUILD" -j "$(nproc)"

# Largest input per target: big enough for the seeds and the formats' structure, small enough
# that the fuzzer explores rather than copies.
declare -A MAX_LEN=([fuzz_safetensors]=4096 [fuzz_gguf]=8192 [fuzz_tokenizer]=4096 [fuzz_audio]=16384
                    [fuzz_openai_requests]=4096 [fuzz_ollama_requests]=4096 [fuzz_xclbin]=4096 [fuzz_insts]=4096
                    [fuzz_image]=16384 [fuzz_torch_checkpoint]=8192 [fuzz_nemo_archive]=12288)
targets=${FUZZ_TARGETS:-$(cd "$BUILD" && ls fuzz_* 2>/dev/null | grep -v '\.' || true)}
mkdir -p "$BUILD/artifacts" "$BUILD/logs"

run_one() {  # target -> 0 when it ran its time with nothing found
  local t=$1 name=${1#fuzz_}
  # New inputs go to a corpus kept in the build dir; the committed seeds are only read.
  mkdir -p "$BUILD/corpus/$name"
  if "$BUILD/$t" "$BUILD/corpus/$name" "tests/fuzz/corpus/$name" -max_total_time="$SECONDS_EACH" \
      -max_len="${MAX_LEN[$t]:-4096}" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
      -artifact_prefix="$BUILD/artifacts/$t-" -print_final_stats=1 >"$BUILD/logs/$t.log" 2>&1; then
    local execs speed cov
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$BUILD/logs/$t.log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$BUILD/logs/$t.log")
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$BUILD/logs/$t.log" | tail -1)
    echo "$t: ok, $execs runs ($speed/s), $cov"
  else
    echo "$t: FAILED (log: $BUILD/logs/$t.log)"
    grep -A25 -m1 '^==[0-9]*==\|^INFO: a leak\|runtime error\|^ALARM\|out-of-memory\|deadly signal' \
      "$BUILD/logs/$t.log" | head -40
    local f
    for f in "$BUILD/artifacts/$t-"*; do [ -e "$f" ] && echo "reproduce: $BUILD/$t $f"; done
    return 1
  fi
}
export -f run_one
export BUILD SECONDS_EACH
export MAX_LEN_DECL="$(declare -p MAX_LEN)"

echo "== fuzzing $(echo $targets | wc -w) targets, ${SECONDS_EACH}s each, $PARALLEL at a time =="
# shellcheck disable=SC2016
printf '%s\n' $targets | xargs -P "$PARALLEL" -I{} bash -c 'eval "$MAX_LEN_DECL"; run_one {}'
