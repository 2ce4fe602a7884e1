//! DIOPI through the C ABI of the built `libdipu_runtime.so`: a tiny
//! kernel library in C (`tests/c/diopi_mini.c`, float32 Add and Fill
//! queued on the stream with dipu_launch_host_func_raw) driven by a C
//! program (`tests/c/diopi_driver.c`): asynchronous ops right after a
//! synchronize, missing ops as NULL, RequireTensor memory freed at
//! context destroy (memory stats), generator seed/offset round trips, bad
//! input; a library needing a missing diopirt symbol refused by name;
//! a library built against include/diopi that tests DIOPI's optional
//! (weak) runtime functions for NULL loads in a framework without them
//! (`tests/c/diopi_weak_framework.c`) and finds them all under dipu-rs;
//! DIPU_DIOPI_LIBRARY and the default search (beside the runtime and the
//! executable, or beside a vendor plugin); the runtime itself opened
//! RTLD_LOCAL. Run `cargo build -p dipu-ffi` first (cargo test does not
//! rebuild the cdylib; a stale one is detected).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// target/<profile>, holding a libdipu_runtime.so newer than the sources.
fn built_lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let lib = dir.join("libdipu_runtime.so");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build -p dipu-ffi` first",
        lib.display()
    );
    let built = std::fs::metadata(&lib).and_then(|m| m.modified()).unwrap();
    for src in ["src", "../diopi/src"] {
        for entry in std::fs::read_dir(crate_dir().join(src)).expect("source dir") {
            let path = entry.unwrap().path();
            let changed = std::fs::metadata(&path).and_then(|m| m.modified()).unwrap();
            assert!(
                changed <= built,
                "{} is newer than {}: run `cargo build -p dipu-ffi` before the tests",
                path.display(),
                lib.display()
            );
        }
    }
    dir.to_path_buf()
}

fn work_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("diopi-c")
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn cc(args: &[&str], what: &str) {
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg("-I")
        .arg(crate_dir().join("../include"))
        .arg("-I")
        .arg(crate_dir().join("tests/c"))
        .args(args)
        .output()
        .expect("run cc");
    assert_ok(&out, what);
}

/// The compiled programs and libraries (built once per test run).
struct Built {
    lib_dir: PathBuf,
    mini: PathBuf,
    missing: PathBuf,
    driver: PathBuf,
    dlopen: PathBuf,
    /// `diopi_weak_probe.c` as is, and with ordinary references.
    weak_probe: PathBuf,
    strong_probe: PathBuf,
    /// `diopi_weak_framework.c`: a framework without the optional functions.
    framework: PathBuf,
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let lib_dir = built_lib_dir();
        let dir = work_dir();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let c = |f: &str| {
            crate_dir()
                .join("tests/c")
                .join(f)
                .to_string_lossy()
                .into_owned()
        };
        let p = |f: &str| dir.join(f);
        let s = |p: &Path| p.to_string_lossy().into_owned();
        let mini = p("libdiopi_mini.so");
        cc(
            &["-shared", "-fPIC", "-o", &s(&mini), &c("diopi_mini.c")],
            "diopi_mini.c",
        );
        let missing = p("libdiopi_needs_missing.so");
        cc(
            &[
                "-shared",
                "-fPIC",
                "-o",
                &s(&missing),
                &c("diopi_needs_missing.c"),
            ],
            "diopi_needs_missing.c",
        );
        let driver = p("diopi_driver");
        let rpath = format!("-Wl,-rpath,{}", lib_dir.display());
        let libs = format!("-L{}", lib_dir.display());
        cc(
            &[
                "-o",
                &s(&driver),
                &c("diopi_driver.c"),
                &libs,
                "-ldipu_runtime",
                &rpath,
                "-lpthread",
            ],
            "diopi_driver.c",
        );
        let dlopen = p("diopi_dlopen");
        cc(
            &["-o", &s(&dlopen), &c("diopi_dlopen.c"), "-ldl"],
            "diopi_dlopen.c",
        );
        let weak_probe = p("libdiopi_weak_probe.so");
        cc(
            &[
                "-shared",
                "-fPIC",
                "-o",
                &s(&weak_probe),
                &c("diopi_weak_probe.c"),
            ],
            "diopi_weak_probe.c",
        );
        // The same source with DIOPI_ATTR_WEAK empty: ordinary references,
        // whose `if (fn)` the compiler rightly calls always true.
        let strong_probe = p("libdiopi_strong_probe.so");
        cc(
            &[
                "-DDIOPI_ATTR_WEAK=",
                "-Wno-address",
                "-shared",
                "-fPIC",
                "-o",
                &s(&strong_probe),
                &c("diopi_weak_probe.c"),
            ],
            "diopi_weak_probe.c with DIOPI_ATTR_WEAK empty",
        );
        let framework = p("diopi_weak_framework");
        cc(
            &[
                "-rdynamic",
                "-o",
                &s(&framework),
                &c("diopi_weak_framework.c"),
                "-ldl",
            ],
            "diopi_weak_framework.c",
        );
        Built {
            lib_dir,
            mini,
            missing,
            driver,
            dlopen,
            weak_probe,
            strong_probe,
            framework,
        }
    })
}

/// Runs `program` with `args` and a clean DIOPI environment plus `env`.
fn run(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_remove("DIPU_DIOPI_LIBRARY")
        .env_remove("DIPU_VENDOR")
        .env_remove("DIPU_HOST_DEVICES")
        // cargo's LD_LIBRARY_PATH would win over the programs' rpath.
        .env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run the test program")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn ops_run_asynchronously_with_contexts_generators_and_bad_input() {
    let b = built();
    let out = run(&b.driver, &["ops", s(&b.mini)], &[]);
    assert_ok(&out, "diopi_driver ops");
}

#[test]
fn another_library_and_another_devices_memory_are_refused() {
    let b = built();
    let out = run(
        &b.driver,
        &["two", s(&b.mini), s(&b.missing)],
        &[("DIPU_HOST_DEVICES", "2")],
    );
    assert_ok(&out, "diopi_driver two");
}

#[test]
fn lookups_without_a_library_are_errors() {
    let out = run(&built().driver, &["no-library"], &[]);
    assert_ok(&out, "diopi_driver no-library");
}

#[test]
fn a_library_needing_a_missing_symbol_is_refused_naming_it() {
    let b = built();
    let out = run(&b.driver, &["missing", s(&b.missing)], &[]);
    assert_ok(&out, "diopi_driver missing");
}

#[test]
fn a_library_using_optional_runtime_functions_loads_in_a_framework_without_them() {
    let b = built();
    let out = run(&b.framework, &[s(&b.weak_probe), "loads"], &[]);
    assert_ok(
        &out,
        "the weak probe in a framework without the optional functions",
    );
    // Declared as ordinary references, the same library is refused there.
    let out = run(&b.framework, &[s(&b.strong_probe), "refused"], &[]);
    assert_ok(
        &out,
        "the strong probe in a framework without the optional functions",
    );
}

#[test]
fn dipu_rs_provides_every_optional_runtime_function() {
    let b = built();
    let out = run(&b.driver, &["weak", s(&b.weak_probe)], &[]);
    assert_ok(&out, "diopi_driver weak");
}

#[test]
fn dipu_diopi_library_names_the_library() {
    let b = built();
    let out = run(
        &b.driver,
        &["open-default", s(&b.mini)],
        &[("DIPU_DIOPI_LIBRARY", s(&b.mini))],
    );
    assert_ok(&out, "DIPU_DIOPI_LIBRARY=mini");
    let nowhere = "/nonexistent/libdiopi_impl.so";
    let expect =
        format!("fail:DIPU_DIOPI_LIBRARY={nowhere}: DIOPI kernel library {nowhere} does not exist");
    let out = run(
        &b.driver,
        &["open-default", &expect],
        &[("DIPU_DIOPI_LIBRARY", nowhere)],
    );
    assert_ok(&out, "DIPU_DIOPI_LIBRARY=nowhere");
}

#[test]
fn the_default_search_looks_beside_the_runtime_then_the_executable() {
    let b = built();
    // A runtime and an executable of their own, in two directories.
    let root = work_dir().join("search");
    let _ = std::fs::remove_dir_all(&root);
    let (rt_dir, exe_dir) = (root.join("lib"), root.join("bin"));
    for d in [&rt_dir, &exe_dir] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::copy(
        b.lib_dir.join("libdipu_runtime.so"),
        rt_dir.join("libdipu_runtime.so"),
    )
    .unwrap();
    let driver = exe_dir.join("diopi_driver");
    let rpath = format!("-Wl,-rpath,{}", rt_dir.display());
    let libs = format!("-L{}", rt_dir.display());
    let src = crate_dir().join("tests/c/diopi_driver.c");
    cc(
        &[
            "-o",
            s(&driver),
            s(&src),
            &libs,
            "-ldipu_runtime",
            &rpath,
            "-lpthread",
        ],
        "diopi_driver.c (search)",
    );
    let expect = format!(
        "fail:no DIOPI kernel library found: looked for libdiopi_impl_host.so and libdiopi_impl.so \
         in {} (beside libdipu_runtime.so), {} (beside the executable)",
        rt_dir.display(),
        exe_dir.display()
    );
    assert_ok(
        &run(&driver, &["open-default", &expect], &[]),
        "nothing to find",
    );
    // The generic name beside the executable...
    std::fs::copy(&b.mini, exe_dir.join("libdiopi_impl.so")).unwrap();
    assert_ok(
        &run(&driver, &["open-default", "/bin/libdiopi_impl.so"], &[]),
        "libdiopi_impl.so beside the executable",
    );
    // ...loses to the vendor's own name anywhere.
    std::fs::copy(&b.mini, exe_dir.join("libdiopi_impl_host.so")).unwrap();
    assert_ok(
        &run(
            &driver,
            &["open-default", "/bin/libdiopi_impl_host.so"],
            &[],
        ),
        "libdiopi_impl_host.so beside the executable",
    );
    // And beside the runtime comes first.
    std::fs::copy(&b.mini, rt_dir.join("libdiopi_impl_host.so")).unwrap();
    assert_ok(
        &run(
            &driver,
            &["open-default", "/lib/libdiopi_impl_host.so"],
            &[],
        ),
        "libdiopi_impl_host.so beside the runtime",
    );
}

#[test]
fn a_runtime_opened_rtld_local_still_serves_the_kernel_library() {
    let b = built();
    let runtime = b.lib_dir.join("libdipu_runtime.so");
    let out = run(&b.dlopen, &[s(&runtime), s(&b.mini)], &[]);
    assert_ok(&out, "diopi_dlopen");
}

#[test]
fn a_plugin_vendor_s_library_is_looked_for_beside_the_plugin() {
    let b = built();
    let plugin_dir = work_dir().join("plugin");
    let _ = std::fs::remove_dir_all(&plugin_dir);
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let plugin = plugin_dir.join("libdipu_vendor_host.so");
    std::fs::copy(b.lib_dir.join("libdipu_vendor_host.so"), &plugin)
        .expect("target/<profile>/libdipu_vendor_host.so (built with dipu-vendor-host)");
    let env = [("DIPU_VENDOR", s(&plugin))];
    let expect = format!(
        "fail:looked for libdiopi_impl_host.so and libdiopi_impl.so in {} (beside the vendor plugin); \
         set DIPU_DIOPI_LIBRARY",
        plugin_dir.display()
    );
    assert_ok(
        &run(&b.driver, &["open-default", &expect], &env),
        "nothing beside the plugin",
    );
    std::fs::copy(&b.mini, plugin_dir.join("libdiopi_impl.so")).unwrap();
    assert_ok(
        &run(
            &b.driver,
            &["open-default", "/plugin/libdiopi_impl.so"],
            &env,
        ),
        "libdiopi_impl.so beside the plugin",
    );
}
