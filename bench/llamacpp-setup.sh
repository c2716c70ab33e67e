#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-batched-bench, llama-server and llama-speculative-simple natively, once, from the source that the npm
# package node-llama-cpp@3.21.1 ships (its llama/gitRelease.bundle), into $KITE_BENCH_CACHE
# (default ~/.cache/kite-bench). Prints the bin folder on stdout. Sourced or run by bench/vs-llamacpp
# bench/serve-vs-llamacpp and bench/spec-vs-llamacpp.
set -euo pipefail

NODE_LLAMA_CPP_VERSION=3.21.1
cache=${KITE_BENCH_CACHE:-$HOME/.cache/kite-bench}
npm_dir=$cache/npm
src=$cache/llama.cpp-src
build=$cache/llama.cpp-build
mkdir -p "$cache"

log() { printf '[setup] %s\n' "$*" >&2; }

if [[ -x $build/bin/llama-bench && -x $build/bin/llama-batched-bench && -x $build/bin/llama-server &&
      -x $build/bin/llama-speculative-simple ]]; then
    echo "$build/bin"
    exit 0
fi

bundle=$npm_dir/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [[ ! -f $bundle ]]; then
    log "installing node-llama-cpp@$NODE_LLAMA_CPP_VERSION into $npm_dir (scripts off: only its source bundle is needed)"
    mkdir -p "$npm_dir"
    [[ -f $npm_dir/package.json ]] || echo '{"name":"kite-bench-peer","private":true}' >"$npm_dir/package.json"
    npm install --prefix "$npm_dir" --ignore-scripts --no-audit --no-fund -E "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >&2
fi
if [[ ! -d $src/.git ]]; then
    log "cloning $bundle"
    rm -rf "$src"
    git clone --quiet "$bundle" "$src" >&2
fi
log "llama.cpp source: $(git -C "$src" describe --tags --always 2>/dev/null || echo unknown) ($(git -C "$src" rev-parse --short HEAD))"

flags=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
       -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF)
# On a CPU with AMX, -march=native compiles ggml's AMX matmul in, and on the 2-core Intel Xeon VMs with AMX
# this project ran on it crashed (SIGSEGV in ggml_backend_amx_mul_mat at the first prompt pass,
# 2026-12-02). So the peer is built with every other extension this CPU has (kite's own AMX tiles are on
# unless KITE_AMX=0: compare with that for like-for-like figures).
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
    log "AMX CPU: building llama.cpp without AMX (native AMX builds crash here), with AVX-512 VNNI/VBMI/BF16"
    flags=("${flags[@]/-DGGML_NATIVE=ON/-DGGML_NATIVE=OFF}" -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
           -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON
           -DGGML_AVX512_BF16=ON)
fi
# In recent trees llama-bench, llama-batched-bench and llama-server live under tools/, behind
# LLAMA_BUILD_TOOLS (the server also behind LLAMA_BUILD_SERVER).
if grep -q LLAMA_BUILD_TOOLS "$src/CMakeLists.txt"; then flags+=(-DLLAMA_BUILD_TOOLS=ON); fi
log "configuring: cmake ${flags[*]}"
cmake -S "$src" -B "$build" "${flags[@]}" >&2
log "building llama-bench, llama-batched-bench, llama-server and llama-speculative-simple (about 4+ minutes on 2 cores)"
cmake --build "$build" -j"$(nproc)" --target llama-bench llama-batched-bench llama-server llama-speculative-simple >&2
echo "$build/bin"
