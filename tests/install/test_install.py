#!/usr/bin/env python3
"""cmake --install of this build tree into a temporary prefix, then what a user of the installed kite
does: the files in place (versioned soname, one public header), libkite.so exporting only kite.h's
functions, the C example built with pkg-config and with find_package(kite) (shared and static), and
every binary run on the installed default model."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from reference import PROMPT, check_story  # noqa: E402

SRC = os.environ["KITE_SOURCE_DIR"]
BUILD = os.environ["KITE_BUILD_DIR"]
CC = os.environ["KITE_CC"]
CC_FLAGS = shlex.split(os.environ.get("KITE_CC_FLAGS", ""))
CMAKE = os.environ["KITE_CMAKE"]
MODEL_FILE = os.environ["KITE_DEFAULT_MODEL_FILE"]
passed = 0


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, timeout=90, **kw)
    assert r.returncode == 0, (cmd, r.stdout.decode()[-2000:], r.stderr.decode()[-2000:])
    return r


def needed_libkite(binary):
    """The libkite a binary loads, as the dynamic loader resolves it (None when it has none)."""
    out = run(["ldd", binary], env=ENV).stdout.decode()
    m = re.search(r"libkite\.so\S*\s+=>\s+(\S+)", out)
    return os.path.realpath(m.group(1)) if m else None


work = tempfile.mkdtemp(prefix="kite-install-")
try:
    prefix = os.path.join(work, "prefix")
    run([CMAKE, "--install", BUILD, "--prefix", prefix])

    # ---- the files
    lib = os.path.join(prefix, "lib")
    for rel in ["bin/kite", "lib/libkite.a", "lib/libkite.so.0.1.0", "include/kite.h", "lib/pkgconfig/kite.pc",
                "lib/cmake/kite/kiteConfig.cmake", "lib/cmake/kite/kiteConfigVersion.cmake",
                "lib/cmake/kite/kiteTargets.cmake", "lib/cmake/kite/kiteStaticTargets.cmake",
                f"share/kite/models/{MODEL_FILE}", "share/kite/models/README.md", "share/kite/models/LICENSE"]:
        assert os.path.isfile(os.path.join(prefix, rel)), rel
    assert os.readlink(os.path.join(lib, "libkite.so")) == "libkite.so.0"
    assert os.readlink(os.path.join(lib, "libkite.so.0")) == "libkite.so.0.1.0"
    dynamic = run(["readelf", "-d", os.path.join(lib, "libkite.so.0.1.0")]).stdout.decode()
    assert "Library soname: [libkite.so.0]" in dynamic, dynamic
    assert os.listdir(os.path.join(prefix, "include")) == ["kite.h"]
    model = os.path.join(prefix, "share", "kite", "models", MODEL_FILE)
    with open(model, "rb") as a, open(os.path.join(SRC, "models", MODEL_FILE), "rb") as b:
        assert a.read() == b.read()
    passed += 1

    # ---- libkite.so exports kite.h's functions and nothing else, and needs no internal symbol
    header = open(os.path.join(prefix, "include", "kite.h")).read()
    header = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    declared = set(re.findall(r"\b(kite_[a-z0-9_]+)\s*\(", header))
    so = os.path.join(lib, "libkite.so.0.1.0")
    sanitizer = re.compile(r"^(__asan|__odr_asan|__ubsan|__sanitizer|__lsan)")
    exported = {s for s in run(["nm", "-D", "--defined-only", "--format=just-symbols", so]).stdout.decode().split()
                if not sanitizer.match(s)}
    assert exported, "libkite.so exports nothing"
    assert exported <= declared, f"exported but not in kite.h: {sorted(exported - declared)}"
    assert "kite_default_model_path" in exported and "kite_model_open" in exported
    undefined = run(["nm", "-D", "--undefined-only", "--format=just-symbols", so]).stdout.decode().split()
    assert not [s for s in undefined if s.startswith("kite_")], [s for s in undefined if s.startswith("kite_")]
    passed += 1

    # ---- the example with pkg-config (shared), as the README shows it, loaded from the prefix
    ENV = dict(os.environ, PKG_CONFIG_PATH=os.path.join(lib, "pkgconfig"), LD_LIBRARY_PATH=lib)
    ENV.pop("KITE_DEFAULT_MODEL", None)
    flags = shlex.split(run(["pkg-config", "--cflags", "--libs", "kite"], env=ENV).stdout.decode())
    example = os.path.join(SRC, "examples", "simple.c")
    simple_pc = os.path.join(work, "simple_pkgconfig")
    run([CC] + CC_FLAGS + ["-o", simple_pc, example] + flags, env=ENV)
    assert needed_libkite(simple_pc) == os.path.realpath(so), needed_libkite(simple_pc)
    check_story(run([simple_pc, model, PROMPT], env=ENV).stdout, "pkg-config build")
    passed += 1

    # ---- the example with find_package(kite): kite::kite (shared) and kite::kite_static
    project = os.path.join(work, "consumer")
    os.mkdir(project)
    shutil.copy(example, project)
    with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
        f.write("cmake_minimum_required(VERSION 3.20)\n"
                "project(kite_consumer LANGUAGES C)\n"
                "find_package(kite 0.1 REQUIRED COMPONENTS static)\n"
                "add_executable(simple_shared simple.c)\n"
                "target_link_libraries(simple_shared PRIVATE kite::kite)\n"
                "add_executable(simple_static simple.c)\n"
                "target_link_libraries(simple_static PRIVATE kite::kite_static)\n")
    build = os.path.join(work, "consumer-build")
    cmake_env = dict(ENV)
    cmake_env.pop("LD_LIBRARY_PATH")  # CMake gives the build-tree binaries an rpath to the prefix
    run([CMAKE, "-S", project, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}", f"-DCMAKE_C_COMPILER={CC}",
         f"-DCMAKE_C_FLAGS={' '.join(CC_FLAGS)}", f"-DCMAKE_EXE_LINKER_FLAGS={' '.join(CC_FLAGS)}"], env=cmake_env)
    run([CMAKE, "--build", build], env=cmake_env)
    shared_bin, static_bin = os.path.join(build, "simple_shared"), os.path.join(build, "simple_static")
    ENV = cmake_env
    assert needed_libkite(shared_bin) == os.path.realpath(so), needed_libkite(shared_bin)
    assert needed_libkite(static_bin) is None, needed_libkite(static_bin)
    check_story(run([shared_bin, model, PROMPT], env=cmake_env).stdout, "find_package kite::kite")
    check_story(run([static_bin, model, PROMPT], env=cmake_env).stdout, "find_package kite::kite_static")
    passed += 1

    # ---- the installed CLI without --model finds the model of its own prefix (not the configured one)
    r = run([os.path.join(prefix, "bin", "kite"), "run", "--prompt", PROMPT, "--temperature", "0", "--max-tokens", "32"],
            env=cmake_env)
    assert f"using the default model {os.path.realpath(model)}\n".encode() in r.stderr, r.stderr
    check_story(r.stdout, "installed kite run")
    passed += 1

    # ---- ...and so does a program linking the installed libkite.so, through kite_default_model_path
    probe = os.path.join(work, "default_path.c")
    with open(probe, "w") as f:
        f.write('#include <stdio.h>\n#include "kite.h"\n'
                'int main(void) {\n    const char *path;\n    char err[512];\n'
                '    if (kite_default_model_path(&path, err, sizeof err)) { fprintf(stderr, "%s\\n", err); return 1; }\n'
                '    printf("%s\\n", path);\n    return 0;\n}\n')
    probe_bin = os.path.join(work, "default_path")
    run([CC] + CC_FLAGS + ["-o", probe_bin, probe] + flags, env=ENV)
    # Run from another folder: the answer comes from where libkite.so is, not from this program or the cwd.
    r = run([probe_bin], env=dict(ENV, LD_LIBRARY_PATH=lib), cwd="/")
    assert r.stdout.decode() == os.path.realpath(model) + "\n", (r.stdout, model)
    passed += 1
finally:
    shutil.rmtree(work, ignore_errors=True)
print(f"{passed} passed, 0 failed")
