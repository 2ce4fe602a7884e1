"""Builds torch_dipu: the Rust runtime, then torch_dipu._C, the PrivateUse1
backend over dipu-rs's C ABI (the package's metadata is in pyproject.toml).

`pip install --no-build-isolation ./adapters/torch_dipu` (or `pip wheel`)
runs build_ext below, which
1. builds libdipu_runtime.so and the host vendor's DIOPI kernel library
   libdiopi_impl_host.so with cargo (`cargo build -p dipu-ffi -p
   dipu-diopi-host`) in the checkout around this directory;
2. copies both into the package, beside _C: the extension finds the runtime
   through an $ORIGIN rpath (one process has one runtime, shared with any C
   user), and the runtime opens the DIOPI library beside itself;
3. generates csrc/gen/diopi_ops_*.cpp from diopi_functions.yaml;
4. compiles the extension with torch.utils.cpp_extension (ninja, MAX_JOBS).

Environment: DIPU_BUILD_PROFILE (cargo profile, default release; `dev` is
target/debug), DIPU_NO_BUILD=1 to skip cargo and take the libraries already
in target/<profile>, CARGO_TARGET_DIR (default <repo>/target).
build.sh beside this file is the developers' in-place build.
"""

import filecmp
import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.normpath(os.path.join(here, "..", ".."))
include = os.path.join(repo, "include")
profile = os.environ.get("DIPU_BUILD_PROFILE", "release")
target = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(repo, "target")),
                      "debug" if profile == "dev" else profile)
RUNTIME = "libdipu_runtime.so"
# The host vendor's DIOPI kernels; without them every op falls back to the CPU.
DIOPI = "libdiopi_impl_host.so"


def _fail(message):
    sys.exit(f"torch_dipu: {message}")


def _cargo_build():
    """The runtime and the DIOPI library into `target`, unless DIPU_NO_BUILD=1."""
    if not (os.path.isfile(os.path.join(repo, "Cargo.toml")) and os.path.isdir(include)):
        _fail(f"{repo} is not a dipu-rs checkout: torch_dipu builds only from "
              "adapters/torch_dipu inside one (it needs the cargo workspace and include/)")
    if os.environ.get("DIPU_NO_BUILD") == "1":
        return
    cmd = ["cargo", "build", "--locked", "--profile", profile, "-p", "dipu-ffi", "-p", "dipu-diopi-host"]
    try:
        subprocess.run(cmd, cwd=repo, check=True, stdout=sys.stderr)
    except FileNotFoundError:
        _fail("cargo is missing: install Rust (rustup) or build the runtime first and set DIPU_NO_BUILD=1")
    except subprocess.CalledProcessError as e:
        _fail(f"{' '.join(cmd)} failed with exit code {e.returncode}")


def _install_lib(name, dest, required):
    """Copies target/<profile>/<name> into the package directory `dest`, only
    when it changed and by rename, so a process that has the old copy mapped
    keeps a valid file. A missing optional library removes the stale copy."""
    src = os.path.join(target, name)
    out = os.path.join(dest, name)
    if not os.path.isfile(src):
        if required:
            _fail(f"{src} is missing: build it (cargo build -p dipu-ffi -p dipu-diopi-host, "
                  "profile DIPU_BUILD_PROFILE) or unset DIPU_NO_BUILD")
        print(f"torch_dipu: {src} is missing: ops will fall back to the CPU", file=sys.stderr)
        if os.path.exists(out):
            os.remove(out)
        return
    os.makedirs(dest, exist_ok=True)
    if os.path.isfile(out) and filecmp.cmp(src, out, shallow=False):
        return
    shutil.copy2(src, out + ".tmp")
    os.replace(out + ".tmp", out)


def _sources():
    gen = os.path.join("csrc", "gen", "*.cpp")
    return sorted(glob.glob(os.path.join("csrc", "*.cpp")) + glob.glob(gen))


def _find_ninja():
    """Puts the ninja of this python's environment (the `ninja` package) on
    PATH: pip runs the build without the venv's bin on PATH, and without
    ninja torch falls back to compiling one file at a time, from scratch."""
    try:
        import ninja

        bindir = ninja.BIN_DIR
    except (ImportError, AttributeError):
        bindir = os.path.dirname(sys.executable)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


class clean_build_py(build_py):
    """Starts the packages' build directories afresh, so a wheel holds what
    this build made, not files left there by an earlier one, and adds the
    tolerance policy's helper (adapters/dipu_tolerance.py, docs/tolerance.md)
    as torch_dipu.tolerance, which op_tools uses."""

    def run(self):
        for package in ("torch_dipu", "op_tools"):
            shutil.rmtree(os.path.join(self.build_lib, package), ignore_errors=True)
        super().run()
        policy = os.path.join(repo, "adapters", "dipu_tolerance.py")
        if not os.path.exists(policy):
            _fail(f"{policy} is missing: build from the dipu-rs checkout")
        self.copy_file(policy, os.path.join(self.build_lib, "torch_dipu", "tolerance.py"))


def _precompiled_header(cpp_extension):
    """Compiles csrc/precompiled.h once per build directory and puts it in
    front of every translation unit (-include), when the compiler is GCC: the
    torch headers are parsed once instead of once per file, which halves the
    extension's compile time. The header is rebuilt when its command (flags,
    compiler, torch version) changes. Anything unexpected (another compiler,
    a torch whose private build function differs) builds without it."""
    import inspect

    original = cpp_extension._write_ninja_file_and_compile_objects
    if getattr(original, "_dipu_precompiled", False):
        return
    try:
        signature = inspect.signature(original)
        compiler = cpp_extension.get_cxx_compiler()
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, ValueError, subprocess.CalledProcessError):
        return
    # GCC's PCH format (clang's differs; its --version names clang).
    if "clang" in version or "Free Software Foundation" not in version:
        return
    if not {"cflags", "post_cflags", "build_directory"} <= set(signature.parameters):
        return
    import torch

    def compile_objects(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        build_dir = bound.arguments["build_directory"]
        flags = list(bound.arguments["cflags"] or []) + list(bound.arguments["post_cflags"] or [])
        pch_dir = os.path.join(build_dir, "precompiled")
        header = os.path.join(pch_dir, "precompiled.h")
        gch = header + ".gch"
        command = [compiler, "-x", "c++-header", header, "-o", gch] + flags
        stamp = "\n".join([version, torch.__version__, open(os.path.join(here, "csrc", "precompiled.h")).read()] + command)
        stamp_file = gch + ".command"
        os.makedirs(pch_dir, exist_ok=True)
        current = open(stamp_file).read() if os.path.isfile(stamp_file) else None
        if current != stamp or not os.path.isfile(gch):
            shutil.copyfile(os.path.join(here, "csrc", "precompiled.h"), header)
            print("torch_dipu: precompiling the torch headers (csrc/precompiled.h)", file=sys.stderr)
            done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                print(f"torch_dipu: precompiled header failed, building without it:\n{done.stderr[-2000:]}", file=sys.stderr)
                return original(*bound.args, **bound.kwargs)
            with open(stamp_file, "w") as f:
                f.write(stamp)
        bound.arguments["post_cflags"] = list(bound.arguments["post_cflags"] or []) + ["-include", header, "-Winvalid-pch"]
        return original(*bound.args, **bound.kwargs)

    compile_objects._dipu_precompiled = True
    cpp_extension._write_ninja_file_and_compile_objects = compile_objects


# The torch version _C is compiled against, read by `import torch_dipu`
# before it loads _C (whose C++ symbols only that torch has).
BUILT_WITH = "_built_with.py"


def _write_built_with(package, torch_version):
    path = os.path.join(package, BUILT_WITH)
    text = ('"""Written by setup.py: the torch torch_dipu._C was built against."""\n\n'
            f"TORCH_VERSION = {torch_version!r}\n")
    os.makedirs(package, exist_ok=True)
    if not os.path.isfile(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)


def _extension_commands():
    """torch_dipu._C and the build_ext that builds it (imports torch)."""
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    # Before BuildExtension's constructor, which looks for ninja.
    _find_ninja()
    _precompiled_header(torch.utils.cpp_extension)

    class build_ext(BuildExtension.with_options(use_ninja=True)):
        """Runtime (cargo), its copy beside _C, generated sources, then _C."""

        def run(self):
            _cargo_build()
            package = os.path.join(here if self.inplace else self.build_lib, "torch_dipu")
            _install_lib(RUNTIME, package, required=True)
            # An in-place build (build.sh) may go on without the kernels, as
            # the tests of the fallback do; a wheel may not.
            _install_lib(DIOPI, package, required=not self.inplace)
            _write_built_with(package, torch.__version__)
            # The DIOPI registrations: csrc/gen/diopi_ops_*.cpp from
            # diopi_functions.yaml (each rewritten only when it changes).
            subprocess.check_call([sys.executable, os.path.join(here, "gen_diopi.py")])
            for ext in self.extensions:
                ext.sources = _sources()
            super().run()

        def get_outputs(self):
            outputs = super().get_outputs()
            if not self.inplace:
                package = os.path.join(self.build_lib, "torch_dipu")
                outputs += [os.path.join(package, n) for n in (RUNTIME, DIOPI, BUILT_WITH)
                            if os.path.isfile(os.path.join(package, n))]
            return outputs

    # kineto's headers, for the PrivateUse1 child profiler (csrc/kineto.cpp).
    kineto = os.path.join(os.path.dirname(torch.__file__), "include", "kineto")
    ext = CppExtension(
        "torch_dipu._C",
        _sources(),
        include_dirs=[include, os.path.join(here, "csrc"), kineto],
        library_dirs=[target],
        libraries=["dipu_runtime"],
        extra_compile_args=["-std=c++20", "-O1", "-Wall", "-Wno-unused-parameter", "-Wno-interference-size", "-g0"],
        extra_link_args=["-Wl,-rpath,$ORIGIN"],
    )
    return [ext], {"build_ext": build_ext}


# pip asks for the metadata first (egg_info, dist_info): that needs neither
# torch nor the extension, and importing torch takes seconds.
if {"egg_info", "dist_info"} & set(sys.argv[1:]) and not {"build", "build_ext", "bdist_wheel"} & set(sys.argv[1:]):
    ext_modules, cmdclass = [], {}
else:
    ext_modules, cmdclass = _extension_commands()
setup(ext_modules=ext_modules, cmdclass={**cmdclass, "build_py": clean_build_py})
