# Cross-compiling kite for 64-bit Arm Linux (AArch64) on a Debian x86-64 machine:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# Needs gcc-aarch64-linux-gnu and the arm64 multiarch -dev packages of kite's libraries (jansson, pcre2,
# utf8proc, cmocka); scripts/install-deps.sh installs them. The binaries run under qemu-aarch64
# (scripts/test-cross.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# pkg-config must see the arm64 .pc files only, never the host's (this file is read at every configure,
# so the setting holds when a build re-runs CMake).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
