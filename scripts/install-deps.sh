#!/usr/bin/env bash
# Installs the Debian packages kite needs. Run as root (or with sudo available).
#   bash scripts/install-deps.sh --build   what building and running kite need: the compiler, cmake,
#                                          pkg-config and the -dev libraries kite links
#   bash scripts/install-deps.sh           everything the tests need as well (scripts/test.sh runs this):
#                                          clang and its sanitizer runtimes, cmocka, python3, node and
#                                          npm, curl, QEMU and the AArch64 cross toolchain and libraries
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
MODE=test
case "${1:-}" in
  "") ;;
  --build) MODE=build ;;
  *) echo "usage: bash scripts/install-deps.sh [--build]" >&2; exit 2 ;;
esac
BUILD_PACKAGES=(
  build-essential cmake pkg-config
  libjansson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libedit-dev libcurl4-openssl-dev
)
PACKAGES=("${BUILD_PACKAGES[@]}")
if [ "$MODE" = test ]; then PACKAGES+=(
  clang libclang-rt-14-dev libcmocka-dev ccache
  python3 nodejs npm curl
  # Cross-level kernel tests (scripts/test-cross.sh): QEMU user-mode emulation, the AArch64 cross
  # compiler, and the arm64 (multiarch) builds of the libraries kite and its tests link.
  qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  libjansson-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libcmocka-dev:arm64
  libmicrohttpd-dev:arm64 libedit-dev:arm64 libcurl4-openssl-dev:arm64
); fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm may come from elsewhere than Debian (the CI image has them): accept those.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
if command -v python3 >/dev/null; then missing=("${missing[@]/python3}"); fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | grep -v '^$' || true)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  # The :arm64 packages need arm64 enabled as a foreign architecture (before apt-get update).
  if printf '%s\n' "${missing[@]}" | grep -q ':arm64$' && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
  fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
