#!/usr/bin/env bash
# Kernel tests on the dispatch levels this machine's CPU would never pick by itself, under QEMU user-mode
# emulation with chosen CPU models (scripts/test.sh runs this after the sanitizer build):
#   - x86-64 AVX2 without AVX-512 (-cpu Haswell) and SSE only, no AVX at all (-cpu Nehalem): the Release
#     build in build-qemu-x86;
#   - AArch64 NEON with dotprod (qemu-aarch64 -cpu max): cross-built in build-aarch64 with
#     cmake/aarch64-linux-gnu.cmake (test_kernels tests every set the CPU offers, whatever KITE_CPU says).
# Each leg first asserts the kernel set kite's dispatcher (src/kernels/dispatch.c) picks on that CPU model
# (`test_kernels --print-level` prints kite_kernels()->name), then runs test_kernels (every kernel set the
# CPU offers against the reference, batch invariance, dispatch; its "level available" lines must name
# exactly the expected sets) and test_golden (the real models' greedy references, through the forward
# pass on the picked set). QEMU 7.2 (Debian bookworm) TCG emulates AVX2/FMA/F16C but no AVX-512 (asking
# for Skylake-Server or Icelake-Server gives an AVX2 CPU), so the AVX-512 set is tested natively only.
# TCG raises SIGILL for an instruction the CPU model lacks (AVX on Nehalem, AVX-512 on Haswell), so a
# stray one on a level's path fails too.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export KITE_TEST_DATA="${KITE_TEST_DATA:-$(cd "$ROOT/.." && pwd)/shared}"
JOBS="${KITE_JOBS:-2}"

fail() { echo "test-cross: FAILED: $*" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || fail "needs an x86-64 host (this is $(uname -m))"
for tool in qemu-x86_64 qemu-aarch64 aarch64-linux-gnu-gcc; do
  command -v "$tool" >/dev/null || fail "$tool not found: run scripts/install-deps.sh"
done
[ -f "$KITE_TEST_DATA/models/reference_greedy.json" ] || fail "no test data in KITE_TEST_DATA=$KITE_TEST_DATA"

# CPU models. Haswell is the first AVX2+FMA+F16C CPU; its noTSX variant minus the system features TCG
# lacks (which would only print warnings). Nehalem has SSE4.2 and no AVX.
X86_AVX2=(qemu-x86_64 -cpu "Haswell-noTSX,-pcid,-x2apic,-tsc-deadline,-invpcid")
X86_SSE=(qemu-x86_64 -cpu Nehalem)
ARM_DOTPROD=(qemu-aarch64 -cpu max)
ARM_V80=(qemu-aarch64 -cpu cortex-a57) # ARMv8.0: NEON without dotprod, which kite's NEON set requires

# expect_level BUILD WANT KITE_CPU EMULATOR...: the set the dispatcher picks (KITE_CPU "" = unset).
expect_level() {
  local build=$1 want=$2 cpu=$3 got
  shift 3
  if [ -n "$cpu" ]; then got=$(env KITE_CPU="$cpu" "$@" "$build/tests/test_kernels" --print-level)
  else got=$(env -u KITE_CPU "$@" "$build/tests/test_kernels" --print-level); fi
  printf '   %-70s KITE_CPU=%-7s -> %s\n' "$*" "${cpu:-(unset)}" "$got"
  [ "$got" = "$want" ] || fail "$* with KITE_CPU=${cpu:-(unset)} picked '$got', expected '$want'"
}

# run_tests BUILD "LEVELS" KITE_CPU EMULATOR...: test_kernels, test_trellis, test_deltanet_kernels and test_golden
# under the emulator.
run_tests() {
  local build=$1 levels=$2 cpu=$3 log got t0=$SECONDS
  shift 3
  local -a envs=(env -u KITE_CPU)
  [ -z "$cpu" ] || envs=(env KITE_CPU="$cpu")
  log=$(mktemp)
  echo "   test_kernels under: $* (KITE_CPU=${cpu:-(unset)})"
  # test_dispatch re-runs test_kernels in child processes: under the same emulator and CPU model.
  "${envs[@]}" KITE_TEST_EMULATOR="$*" "$@" "$build/tests/test_kernels" >"$log" 2>&1 || { cat "$log"; fail "test_kernels under $*"; }
  cat "$log"
  got=$(sed -n 's/^level available: \([^ ]*\).*/\1/p' "$log" | tr '\n' ' ' | sed 's/ $//')
  rm -f "$log"
  [ "$got" = "$levels" ] || fail "test_kernels under $* tested the sets '$got', expected '$levels'"
  echo "   test_trellis under: $* (KITE_CPU=${cpu:-(unset)})"
  "${envs[@]}" "$@" "$build/tests/test_trellis" || fail "test_trellis under $*"
  echo "   test_deltanet_kernels under: $* (KITE_CPU=${cpu:-(unset)})"
  "${envs[@]}" "$@" "$build/tests/test_deltanet_kernels" || fail "test_deltanet_kernels under $*"
  echo "   test_golden under: $* (KITE_CPU=${cpu:-(unset)})"
  "${envs[@]}" "$@" "$build/tests/test_golden" || fail "test_golden under $*"
  echo "   ($((SECONDS - t0)) s)"
}

start=$SECONDS
echo "-- x86-64 build (build-qemu-x86, gcc, Release, -Werror)"
CC=gcc cmake -S . -B build-qemu-x86 -DCMAKE_BUILD_TYPE=Release -DKITE_BUILD_TESTS=ON -DKITE_WERROR=ON -DKITE_TEST_DATA="$KITE_TEST_DATA" >/dev/null
cmake --build build-qemu-x86 -j"$JOBS" --target test_kernels test_trellis test_deltanet_kernels test_golden >/dev/null

echo "-- x86-64 AVX2, no AVX-512: ${X86_AVX2[*]}"
expect_level build-qemu-x86 avx2 "" "${X86_AVX2[@]}"
expect_level build-qemu-x86 avx2 avx512 "${X86_AVX2[@]}" # not on this CPU: falls back to the best
expect_level build-qemu-x86 ref ref "${X86_AVX2[@]}"
run_tests build-qemu-x86 "ref avx2" "" "${X86_AVX2[@]}"

echo "-- x86-64 SSE only: ${X86_SSE[*]}"
expect_level build-qemu-x86 ref "" "${X86_SSE[@]}"
expect_level build-qemu-x86 ref avx2 "${X86_SSE[@]}"
expect_level build-qemu-x86 ref "" qemu-x86_64 -cpu "SandyBridge,-x2apic,-tsc-deadline" # AVX without AVX2
run_tests build-qemu-x86 "ref" "" "${X86_SSE[@]}"

echo "-- aarch64 cross build (build-aarch64, aarch64-linux-gnu-gcc, Release, -Werror)"
cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/aarch64-linux-gnu.cmake" -DCMAKE_BUILD_TYPE=Release -DKITE_BUILD_TESTS=ON \
  -DKITE_WERROR=ON -DKITE_TEST_DATA="$KITE_TEST_DATA" >/dev/null
cmake --build build-aarch64 -j"$JOBS" --target test_kernels test_trellis test_deltanet_kernels test_golden >/dev/null

echo "-- aarch64 NEON dotprod: ${ARM_DOTPROD[*]}"
expect_level build-aarch64 neon-dotprod "" "${ARM_DOTPROD[@]}"
expect_level build-aarch64 neon-dotprod neon "${ARM_DOTPROD[@]}"
expect_level build-aarch64 ref ref "${ARM_DOTPROD[@]}"
expect_level build-aarch64 ref "" "${ARM_V80[@]}"
expect_level build-aarch64 ref neon "${ARM_V80[@]}"
run_tests build-aarch64 "ref neon-dotprod" "" "${ARM_DOTPROD[@]}"

echo "-- cross-level kernel tests passed ($((SECONDS - start)) s)"
