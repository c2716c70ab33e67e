#!/usr/bin/env bash
# Sets up and runs every test kite has, from a fresh Debian machine:
#   1. Debian packages (scripts/install-deps.sh) and the npm oracle (node-llama-cpp, pinned);
#   2. a Release build with -Werror (gcc) and ctest;
#   3. a clang ASan+UBSan build and the same ctest;
#   4. the kernel and golden tests on the CPU levels this machine would not pick, under qemu
#      (scripts/test-cross.sh: x86-64 AVX2 without AVX-512, SSE only, AArch64 NEON cross-built);
#   5. each libFuzzer target for a fixed time on its committed corpus.
# Test data comes from KITE_TEST_DATA (default: ../shared beside the repository).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export KITE_TEST_DATA="${KITE_TEST_DATA:-$(cd "$ROOT/.." && pwd)/shared}"
FUZZ_SECONDS="${KITE_FUZZ_SECONDS:-30}"
JOBS="${KITE_JOBS:-2}"
# Each stage prints the seconds since the start, so a slow CI shows where its time went.
stage() { echo "== [$SECONDS s] $*"; }

stage "dependencies"
bash scripts/install-deps.sh
if [ -f tests/oracle/package.json ]; then
  (cd tests/oracle && npm ci --no-audit --no-fund --loglevel=error)
fi

# ccache, when present (install-deps installs it), keeps the compiled objects of earlier runs on this machine
# (in ~/.cache/ccache): CMake reads the launcher from the environment for every build below and in
# test-cross.sh. Paths are hashed relative to the clone and the build folder is not hashed, so another clone
# of the same sources hits the same entries. KITE_CCACHE=0 builds everything from scratch.
if [ "${KITE_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=true
fi

stage "release build (gcc, -Werror)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKITE_WERROR=ON -DKITE_BUILD_TESTS=ON -DKITE_TEST_DATA="$KITE_TEST_DATA" >/dev/null
cmake --build build -j"$JOBS"
(cd build && ctest --output-on-failure -j"$JOBS")

stage "sanitizer build (clang, ASan+UBSan)"
CC=clang cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_WERROR=ON -DKITE_SANITIZE=ON -DKITE_BUILD_TESTS=ON \
  -DKITE_TEST_DATA="$KITE_TEST_DATA" >/dev/null
cmake --build build-asan -j"$JOBS"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$JOBS")

stage "cross-level kernel tests (qemu)"
bash scripts/test-cross.sh

stage "fuzzing (${FUZZ_SECONDS}s per target)"
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_FUZZ=ON -DKITE_BUILD_TESTS=ON \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DKITE_TEST_DATA="$KITE_TEST_DATA" >/dev/null
targets=$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')
cmake --build build-fuzz -j"$JOBS" --target $targets
# One fuzzer per core at a time (each libFuzzer run is single-threaded): the same time per target,
# the stage in 1/JOBS of the wall time. Each target's output is kept and printed in order.
fuzz_logs=$(mktemp -d)
fuzz_one() {
  local t=$1 work
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/${t#fuzz_}"/. "$work"/
  if ./build-fuzz/tests/"$t" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=0 \
       "$work" >"$fuzz_logs/$t.log" 2>&1; then
    rm -rf "$work"
  else
    rm -rf "$work"
    echo "FAILED" >>"$fuzz_logs/$t.log"
    return 1
  fi
}
export -f fuzz_one
export FUZZ_SECONDS fuzz_logs
fuzz_rc=0
printf '%s\n' $targets | xargs -P "$JOBS" -I{} bash -c 'fuzz_one {}' || fuzz_rc=$?
for t in $targets; do
  echo "-- $t"
  if grep -q '^FAILED$' "$fuzz_logs/$t.log"; then cat "$fuzz_logs/$t.log"; else tail -n 2 "$fuzz_logs/$t.log"; fi
done
rm -rf "$fuzz_logs"
[ "$fuzz_rc" -eq 0 ] || { echo "== fuzzing FAILED"; exit 1; }
stage "all tests passed"
