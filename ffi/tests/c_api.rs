//! C and C++ programs built against the *installed* library and header
//! (`scripts/install.sh` into a scratch prefix, found with pkg-config or
//! CMake) and run: round trips, threads, bad input, the documented example,
//! and valgrind memcheck; and two processes doing collectives.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The directory cargo built this test run's libraries in (target/debug).
fn built_lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    assert!(
        dir.join("libdipu_runtime.so").exists(),
        "{} has no libdipu_runtime.so: run `cargo build -p dipu-ffi` first",
        dir.display()
    );
    // `cargo test` does not rebuild a cdylib-only library: catch a stale one.
    let built = std::fs::metadata(dir.join("libdipu_runtime.so"))
        .and_then(|m| m.modified())
        .expect("libdipu_runtime.so mtime");
    for entry in std::fs::read_dir(crate_dir().join("src")).expect("ffi/src") {
        let path = entry.expect("dir entry").path();
        let changed = std::fs::metadata(&path).and_then(|m| m.modified()).unwrap();
        assert!(
            changed <= built,
            "{} is newer than {}/libdipu_runtime.so: run `cargo build -p dipu-ffi` before the tests",
            path.display(),
            dir.display()
        );
    }
    dir.to_path_buf()
}

/// Installs once per test run with scripts/install.sh (no cargo run:
/// `cargo test` holds the build directory lock) and returns the prefix.
fn prefix() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dipu-ffi-prefix");
        let _ = std::fs::remove_dir_all(&prefix);
        let out = Command::new(crate_dir().join("../scripts/install.sh"))
            .arg(&prefix)
            .env("DIPU_NO_BUILD", "1")
            .env("DIPU_LIB_DIR", built_lib_dir())
            .output()
            .expect("run scripts/install.sh");
        assert_ok(&out, "scripts/install.sh");
        for f in [
            "lib/libdipu_runtime.so",
            "lib/libdipu_runtime.a",
            "include/dipu_runtime.h",
            "lib/pkgconfig/dipu_runtime.pc",
            "lib/cmake/dipu_runtime/dipu_runtimeConfig.cmake",
            "lib/cmake/dipu_runtime/dipu_runtimeConfigVersion.cmake",
        ] {
            assert!(prefix.join(f).exists(), "install.sh did not install {f}");
        }
        prefix
    })
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

/// `pkg-config <args> dipu_runtime` against the installed prefix.
fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("dipu_runtime")
        .env("PKG_CONFIG_PATH", prefix().join("lib/pkgconfig"))
        .output()
        .expect("run pkg-config (install it: apt-get install pkg-config)");
    assert_ok(&out, "pkg-config");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Compiles `tests/c/<src>` with `compiler` and the pkg-config flags into
/// `dir`, with an rpath to the installed library.
fn build(dir: &Path, compiler: &str, std: &str, src: &str) -> PathBuf {
    build_with(dir, compiler, std, src, &[])
}

/// [`build`] with `extra` compiler flags (the executable's name says them).
fn build_with(dir: &Path, compiler: &str, std: &str, src: &str, extra: &[&str]) -> PathBuf {
    let exe = dir.join(format!("{}{}", src.replace('.', "_"), extra.concat()));
    let out = Command::new(compiler)
        .arg(format!("-std={std}"))
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-pthread", "-g"])
        .args(extra)
        .args(pkg_config(&["--cflags"]))
        .arg("-I")
        .arg(crate_dir().join("tests/c"))
        .arg(crate_dir().join("tests/c").join(src))
        .arg("-o")
        .arg(&exe)
        .args(pkg_config(&["--libs"]))
        .arg(format!("-Wl,-rpath,{}", prefix().join("lib").display()))
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{compiler}`: {e}"));
    assert_ok(&out, &format!("compiling {src}"));
    exe
}

fn run(exe: &Path) -> Output {
    let out = Command::new(exe)
        .env_remove("DIPU_VENDOR")
        .output()
        .expect("run the test program");
    assert_ok(&out, &exe.display().to_string());
    out
}

#[test]
fn pkg_config_names_the_installed_library() {
    let flags = pkg_config(&["--cflags", "--libs"]);
    let include = format!("-I{}", prefix().join("include").display());
    assert!(flags.contains(&include), "{flags:?}");
    assert!(flags.contains(&"-ldipu_runtime".to_owned()), "{flags:?}");
    let version = pkg_config(&["--modversion"]);
    assert_eq!(version, [env!("CARGO_PKG_VERSION")]);
}

#[test]
fn c_roundtrip() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&build(dir.path(), "gcc", "c11", "roundtrip.c"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("roundtrip ok"));
}

#[test]
fn cxx_roundtrip() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&build(dir.path(), "g++", "c++17", "roundtrip.cpp"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("roundtrip.cpp ok"));
}

#[test]
fn c_threads_with_their_own_streams() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&build(dir.path(), "gcc", "c11", "threads.c"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("threads ok"));
}

/// `tests/c/callback_store.c`: two ranks as threads meeting through a
/// store of C callbacks; bool and complex all-reduces; abort ends a blocked
/// wait with an error; a failing store callback fails the collective.
#[test]
fn c_callback_store_bool_complex_and_abort() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "gcc", "c11", "callback_store.c");
    let out = Command::new(&exe)
        .env_remove("DIPU_VENDOR")
        .env_remove("DIPU_COMM_TIMEOUT")
        .env_remove("DIPU_COMM_BLOCKING_WAIT")
        .env("DIPU_HOST_DEVICES", "2")
        .output()
        .expect("run callback_store");
    assert_ok(&out, "callback_store");
    assert!(String::from_utf8_lossy(&out.stdout).contains("callback store ok"));
}

#[test]
fn c_bad_input_returns_documented_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&build(dir.path(), "gcc", "c11", "bad_input.c"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("bad_input ok"), "{stdout}");
    assert!(stdout.lines().filter(|l| l.starts_with("ok: ")).count() >= 50);
    // The boundary catches panics, but none of these inputs should cause one.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn c_fork_child_gets_a_clear_error_and_a_clean_child_works() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&build(dir.path(), "gcc", "c11", "fork.c"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("child got the fork error"), "{stdout}");
    assert!(stdout.contains("fork ok"), "{stdout}");
}

#[test]
fn c_framework_queries() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&build(dir.path(), "gcc", "c11", "framework.c"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("framework ok"));
}

#[test]
fn documented_example_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&build(dir.path(), "gcc", "c11", "example.c"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("back from the device: hello, device"),
        "{stdout}"
    );
}

#[test]
fn docs_example_is_the_tested_file() {
    let doc = std::fs::read_to_string(crate_dir().join("../docs/c-api.md")).expect("docs/c-api.md");
    let file = std::fs::read_to_string(crate_dir().join("tests/c/example.c")).unwrap();
    let start = doc
        .find("```c\n/* Copies a buffer")
        .expect("docs/c-api.md has the example's code block")
        + "```c\n".len();
    let len = doc[start..].find("```").expect("the code block ends");
    assert!(
        doc[start..start + len] == file,
        "the example in docs/c-api.md differs from ffi/tests/c/example.c: copy the file into the doc"
    );
}

#[test]
fn valgrind_memcheck_roundtrip() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "gcc", "c11", "roundtrip.c");
    let out = Command::new("valgrind")
        .args([
            "--error-exitcode=1",
            "--leak-check=full",
            // Rust's thread-locals and the runtime's process-lifetime
            // DeviceContext are "still reachable" by design; only memory
            // nobody can reach any more is a leak.
            "--errors-for-leak-kinds=definite",
            "--show-leak-kinds=definite",
            "--quiet",
        ])
        .arg(&exe)
        .env_remove("DIPU_VENDOR")
        // Each host device is one shared-memory mapping of its whole
        // capacity, which memcheck shadows page by page as the allocator
        // touches it: at the default 4 GiB the run took 50 s (half of it in
        // the kernel), at 256 MiB 5 s, and roundtrip.c needs a few MiB.
        .env("DIPU_HOST_MEMORY", "256MiB")
        .output()
        .expect("run valgrind (install it: apt-get install valgrind)");
    assert_ok(&out, "valgrind memcheck of roundtrip.c");
}

#[test]
fn cmake_find_package_builds_and_runs() {
    if Command::new("cmake").arg("--version").output().is_err() {
        panic!(
            "cmake is not installed: the find_package(dipu_runtime) test needs it. \
             Run scripts/setup.sh (as root it installs cmake) or apt-get install cmake"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let build_dir = dir.path().join("build");
    let out = Command::new("cmake")
        .arg("-S")
        .arg(crate_dir().join("tests/c/cmake"))
        .arg("-B")
        .arg(&build_dir)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix().display()))
        .output()
        .expect("run cmake");
    assert_ok(&out, "cmake configure");
    let out = Command::new("cmake")
        .arg("--build")
        .arg(&build_dir)
        .output()
        .expect("run cmake --build");
    assert_ok(&out, "cmake --build");
    for exe in ["example_shared", "example_static"] {
        let out = run(&build_dir.join(exe));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("hello, device"), "{exe}: {stdout}");
    }
}

/// Runs `tests/c/leaks.c` (built with `extra` flags) with the memory
/// checker and backtraces on; returns its stdout and the checker's log.
fn run_leaks(extra: &[&str]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut flags = vec!["-O0", "-rdynamic"];
    flags.extend_from_slice(extra);
    let exe = build_with(dir.path(), "gcc", "c11", "leaks.c", &flags);
    let log = dir.path().join("memcheck.log");
    let out = Command::new(&exe)
        .env_remove("DIPU_VENDOR")
        .env("DIPU_MEM_CHECK", "1")
        .env("DIPU_MEM_CHECK_ENABLE_BACKTRACE", "1")
        .env("DIPU_MEM_CHECK_LOG_FILE", &log)
        .output()
        .expect("run leaks.c");
    assert_ok(&out, "leaks.c");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("leaks done"), "{stdout}");
    let log = std::fs::read_to_string(&log).expect("the checker wrote DIPU_MEM_CHECK_LOG_FILE");
    (stdout, log)
}

#[test]
fn memcheck_reports_c_leaks_with_their_functions() {
    let (_, log) = run_leaks(&[]);
    let report = &log[log.find("==== dipu memcheck report").expect(&log)..];
    assert!(report.contains("\n3 blocks, "), "{report}");
    let alpha = report
        .find("leak 1: 1 block(s), 1048576 bytes")
        .expect(report);
    let beta = report.find("leak 2: 1 block(s), 4096 bytes").expect(report);
    // Reused from the thread's cache: reported with its second allocation.
    let gamma = report.find("leak 3: 1 block(s), 2048 bytes").expect(report);
    assert!(!report.contains("leak 4:"), "{report}");
    assert!(report[alpha..beta].contains("leak_from_alpha"), "{report}");
    assert!(!report[alpha..beta].contains("leak_from_beta"), "{report}");
    assert!(report[beta..gamma].contains("leak_from_beta"), "{report}");
    assert!(report[beta..gamma].contains("leaks.c:"), "{report}");
    assert!(report[gamma..].contains("leak_from_gamma"), "{report}");
    assert!(!report.contains("free_one_block"), "{report}");
}

#[test]
fn memcheck_reports_c_bad_frees_with_both_backtraces() {
    let (stdout, log) = run_leaks(&["-DBAD_FREES"]);
    assert!(stdout.contains("second free: dipu_free:"), "{stdout}");
    assert!(stdout.contains("first freed at:"), "{stdout}");
    assert!(stdout.contains("never allocated"), "{stdout}");
    let double = log.find("dipu memcheck: double free:").expect(&log);
    let unknown = log
        .find("dipu memcheck: free of an unknown pointer:")
        .expect(&log);
    let section = &log[double..unknown];
    for part in ["first freed at:", "allocated at:", "this call at:"] {
        assert!(section.contains(part), "no `{part}` in {section}");
    }
    // The first free, the allocation and the second free: all in free_one_block.
    assert!(section.matches("free_one_block").count() >= 3, "{section}");
    assert!(log.contains("\n3 blocks, "), "{log}");
}

/// Runs `tests/c/guards.c` with the checker, 16 guard bytes and
/// `DIPU_MEM_CHECK_ABORT=abort`; returns its output and the checker's log.
fn run_guards(abort: &str) -> (Output, String) {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_with(dir.path(), "gcc", "c11", "guards.c", &["-O0", "-rdynamic"]);
    let log = dir.path().join("memcheck.log");
    let out = Command::new(&exe)
        .env_remove("DIPU_VENDOR")
        .env("DIPU_MEM_CHECK", "1")
        .env("DIPU_MEM_CHECK_ENABLE_BACKTRACE", "1")
        .env("DIPU_MEM_CHECK_GUARD_BYTES", "16")
        .env("DIPU_MEM_CHECK_ABORT", abort)
        .env("DIPU_MEM_CHECK_LOG_FILE", &log)
        .output()
        .expect("run guards.c");
    let log = std::fs::read_to_string(&log).expect("the checker wrote DIPU_MEM_CHECK_LOG_FILE");
    (out, log)
}

#[test]
fn memcheck_check_all_reports_a_c_overflow_once() {
    let (out, log) = run_guards("0");
    assert_ok(&out, "guards.c");
    assert!(String::from_utf8_lossy(&out.stdout).contains("guards done"));
    let line = "dipu memcheck: out-of-bounds write: the guard after the end of";
    assert_eq!(log.matches(line).count(), 1, "{log}");
    assert!(log.contains("offset +1002 (2 bytes past the end)"), "{log}");
    assert!(log.contains("1000 bytes on device 0"), "{log}");
    assert!(
        log.contains("guards.c:"),
        "the allocation's backtrace: {log}"
    );
    // The exit report counts it.
    let report = &log[log.find("==== dipu memcheck report").expect(&log)..];
    assert!(report.contains("out-of-bounds write"), "{report}");
}

#[test]
fn memcheck_abort_stops_at_the_first_violation() {
    let (out, log) = run_guards("1");
    assert!(!out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("checked once"),
        "aborted in the check: {stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DIPU_MEM_CHECK_ABORT=1"), "{stderr}");
    assert!(log.contains("offset +1002 (2 bytes past the end)"), "{log}");
}

/// `tests/c/poison.c` with the checker, backtraces and poison: the
/// freed block reads as the poison, and the byte stored after the free is
/// reported once, with the free's function, and in the exit report.
#[test]
fn memcheck_poison_shows_a_c_read_after_free_and_reports_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_with(dir.path(), "gcc", "c11", "poison.c", &["-O0", "-rdynamic"]);
    let log = dir.path().join("memcheck.log");
    let out = Command::new(&exe)
        .env_remove("DIPU_VENDOR")
        .env("DIPU_MEM_CHECK", "1")
        .env("DIPU_MEM_CHECK_ENABLE_BACKTRACE", "1")
        .env("DIPU_MEM_CHECK_POISON", "1")
        .env("DIPU_MEM_CHECK_LOG_FILE", &log)
        .output()
        .expect("run poison.c");
    assert_ok(&out, "poison.c");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("read after free: dd dd dd dd"), "{stdout}");
    assert!(stdout.contains("poison done"), "{stdout}");
    let log = std::fs::read_to_string(&log).expect("the checker wrote DIPU_MEM_CHECK_LOG_FILE");
    let line = "dipu memcheck: write after free: ";
    assert_eq!(log.matches(line).count(), 1, "{log}");
    assert!(
        log.contains("1 of its 4096 bytes changed, offsets +100 to +100"),
        "{log}"
    );
    assert!(log.contains("found by a check"), "{log}");
    let freed = &log[log.find("freed at:").expect(&log)..];
    assert!(
        freed.contains("free_the_block"),
        "the free's backtrace: {log}"
    );
    let report = &log[log.find("==== dipu memcheck report").expect(&log)..];
    assert!(report.contains("write after free"), "{report}");
    assert!(report.contains("0 blocks"), "{report}");
}

/// A TCP port of 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// Runs `tests/c/allreduce.c` as ranks 0 and 1 of a two-process job
/// (torchrun's variables: rank 0 hosts the TCP store on a free port):
/// store calls, all-reduce SUM and AVG, broadcast, all-gather, send/recv,
/// barrier, bad input and a timed-out receive, each rank on device 0 of its
/// own runtime (the host vendor's collectives meet in shared memory).
#[test]
fn c_two_processes_all_reduce() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "gcc", "c11", "allreduce.c");
    two_ranks(dir.path(), &exe, &[], "host");
}

/// A fake vendor library laid out under its real names: the vendor, the
/// fake, the names it takes in `lib64`, the variable naming the install
/// folder, and whether `lib64` goes on the dynamic linker's path (CUDA's
/// driver is found there).
struct Fake {
    vendor: &'static str,
    library: &'static str,
    names: &'static [&'static str],
    home: &'static str,
    on_linker_path: bool,
}

const FAKES: [Fake; 3] = [
    Fake {
        vendor: "cuda",
        library: "libdipu_fake_cuda.so",
        names: &["libcudart.so.13", "libcuda.so.1", "libnccl.so.2"],
        home: "DIPU_CUDA_HOME",
        on_linker_path: true,
    },
    Fake {
        vendor: "ascend",
        library: "libdipu_fake_ascend.so",
        names: &["libascendcl.so", "libhccl.so"],
        home: "ASCEND_HOME_PATH",
        on_linker_path: false,
    },
    Fake {
        vendor: "cambricon",
        library: "libdipu_fake_cambricon.so",
        names: &["libcnrt.so", "libcncl.so", "libcndrv.so"],
        home: "NEUWARE_HOME",
        on_linker_path: false,
    },
];

/// The same two-process program on each fake vendor (NCCL, HCCL and CNCL
/// ranks as processes), found through `DIPU_VENDOR`, the plugin beside the
/// runtime library and the fake under its real names, as a user's job
/// finds the real libraries. Needs the workspace built (`cargo build
/// --workspace`: the plugins and fakes are other crates' libraries).
#[test]
fn c_two_processes_all_reduce_on_each_fake() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "gcc", "c11", "allreduce.c");
    let target = built_lib_dir();
    for fake in FAKES {
        let library = target.join(fake.library);
        let plugin = target.join(format!("libdipu_vendor_{}.so", fake.vendor));
        for built in [&library, &plugin] {
            assert!(
                built.exists(),
                "{} is missing: run `cargo build --workspace` before this test",
                built.display()
            );
        }
        let home = dir.path().join(fake.vendor);
        let lib64 = home.join("lib64");
        std::fs::create_dir_all(&lib64).unwrap();
        for name in fake.names {
            std::os::unix::fs::symlink(&library, lib64.join(name)).unwrap();
        }
        let mut env = vec![
            ("DIPU_VENDOR", fake.vendor.to_owned()),
            ("DIPU_VENDOR_PATH", target.display().to_string()),
            (fake.home, home.display().to_string()),
        ];
        if fake.on_linker_path {
            env.push(("LD_LIBRARY_PATH", lib64.display().to_string()));
        }
        two_ranks(&home, &exe, &env, fake.vendor);
    }
}

/// Runs `exe` as ranks 0 and 1 with `env`, their standard error logged in
/// `dir`, and asserts that both passed (a rank still running after
/// [`HANG`] is killed and fails the test).
fn two_ranks(dir: &Path, exe: &Path, env: &[(&str, String)], what: &str) {
    let port = free_port().to_string();
    let mut ranks: Vec<KillOnDrop> = (0..2)
        .map(|rank| {
            let stderr = std::fs::File::create(dir.join(format!("rank{rank}.stderr")))
                .expect("create a log file");
            let mut cmd = Command::new(exe);
            for var in [
                "DIPU_VENDOR",
                "DIPU_COMM_TIMEOUT",
                "DIPU_COMM_BLOCKING_WAIT",
                "DIPU_FAKE_FAULTS",
                "DIPU_FAKE_TRACE",
                "CUDA_HOME",
            ] {
                cmd.env_remove(var);
            }
            cmd.envs(env.iter().map(|(k, v)| (k, v)))
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "2")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .stdout(Stdio::piped())
                .stderr(stderr);
            KillOnDrop(cmd.spawn().expect("start a rank"))
        })
        .collect();
    // A rank's standard output closes when it exits: a thread per rank
    // reads it to the end and says so.
    let (done, exited) = mpsc::channel();
    for (rank, child) in ranks.iter_mut().enumerate() {
        let mut stdout = child.0.stdout.take().expect("piped stdout");
        let done = done.clone();
        std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            let _ = done.send((rank, out));
        });
    }
    drop(done);
    // A rank that fails leaves the other waiting for it (up to the
    // program's own timeouts): the limit only tells a hang.
    let deadline = Instant::now() + HANG;
    let mut stdouts: Vec<Option<String>> = vec![None; ranks.len()];
    while stdouts.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((rank, out)) = exited.recv_timeout(left) else {
            break;
        };
        stdouts[rank] = Some(out);
    }
    let mut report = String::new();
    let mut statuses = Vec::new();
    for (rank, child) in ranks.iter_mut().enumerate() {
        // Still running: killed (its status then says so).
        if stdouts[rank].is_none() {
            let _ = child.0.kill();
        }
        let status = child.0.wait().expect("wait for a rank");
        let stderr =
            std::fs::read_to_string(dir.join(format!("rank{rank}.stderr"))).unwrap_or_default();
        report.push_str(&format!(
            "--- {what} rank {rank}: {status}{}\n--- stdout\n{}--- stderr\n{stderr}",
            if stdouts[rank].is_none() {
                " (killed: still running after the hang limit)"
            } else {
                ""
            },
            stdouts[rank].as_deref().unwrap_or_default(),
        ));
        statuses.push(status);
    }
    for (rank, status) in statuses.iter().enumerate() {
        assert!(
            status.success(),
            "{what}: rank {rank} failed or hung:\n{report}"
        );
        let stdout = stdouts[rank].as_deref().unwrap_or_default();
        assert!(
            stdout.contains(&format!("allreduce ok: rank {rank}")),
            "{report}"
        );
        assert!(
            stdout.contains(&format!("vendor {what}")),
            "rank {rank} ran on another vendor:\n{report}"
        );
    }
    assert!(!report.contains("panicked"), "{report}");
}

/// How long a test waits for something that must happen before calling it
/// a hang: never reached by a machine that is merely slow.
const HANG: Duration = Duration::from_secs(120);

/// A child process, killed and reaped when dropped: a failed test leaves no
/// process behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tests/c/memory_history.c` dumps a snapshot that Python's own pickle
/// module reads in PyTorch's layout: three allocations from the named C
/// function (and, after the native frames, the frames hook's), one free,
/// the segments with the two live blocks.
#[test]
fn memory_history_dump_from_c_is_a_torch_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_with(
        dir.path(),
        "gcc",
        "c11",
        "memory_history.c",
        &["-O0", "-rdynamic"],
    );
    let snap = dir.path().join("snap.pickle");
    let out = Command::new(&exe)
        .arg(&snap)
        .env_remove("DIPU_VENDOR")
        .output()
        .expect("run memory_history.c");
    assert_ok(&out, "memory_history.c");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("history done"), "{stdout}");
    assert!(
        stdout.contains("cannot write /nonexistent-dir/x.pickle"),
        "{stdout}"
    );
    let script = r#"
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
t = d["device_traces"][0]
allocs = [e for e in t if e["action"] == "alloc"]
print("allocs", [e["size"] for e in allocs])
print("frees", [e["size"] for e in t if e["action"] == "free_requested"])
print("segment_allocs", sum(e["action"] == "segment_alloc" for e in t))
print("gamma", all(any(f["name"] == "alloc_from_gamma" for f in e["frames"]) for e in allocs))
print("hook_last", all(e["frames"][-1]["filename"] == "model.py" and e["frames"][-1]["name"] == "layer" for e in allocs))
live = sorted(b["requested_size"] for s in d["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
print("live", live)
print("sizes_add_up", all(sum(b["size"] for b in s["blocks"]) == s["total_size"] for s in d["segments"]))
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&snap)
        .output()
        .expect("run python3");
    assert_ok(&out, "reading the snapshot with python3's pickle");
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "allocs [1000, 3145728, 4096]",
        "frees [3145728]",
        "gamma True",
        "hook_last True",
        "live [1000, 4096]",
        "sizes_add_up True",
    ] {
        assert!(text.contains(line), "no `{line}` in:\n{text}");
    }
    assert!(!text.contains("segment_allocs 0"), "{text}");
}

/// Runs `tests/c/profiler.c` with `arg` and `env`; returns its output.
fn run_profiler(dir: &Path, arg: &str, env: &[(&str, &Path)]) -> Output {
    let exe = build_with(dir, "gcc", "c11", "profiler.c", &[]);
    let mut cmd = Command::new(&exe);
    cmd.env_remove("DIPU_VENDOR")
        .env_remove("DIPU_PROFILE")
        .arg(arg);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run profiler.c");
    assert_ok(&out, "profiler.c");
    out
}

/// The names of a trace file's events of category `cat`.
fn trace_names(path: &Path, cat: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("the trace file");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("the trace is JSON");
    doc["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["cat"] == cat)
        .map(|e| e["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn profiler_dumps_a_chrome_trace_from_c() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.json");
    let out = run_profiler(dir.path(), path.to_str().unwrap(), &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("profiler done"));
    let vendor = trace_names(&path, "vendor");
    assert!(vendor.iter().any(|n| n == "memcpy_async"), "{vendor:?}");
    let alloc = trace_names(&path, "allocator");
    assert!(alloc.iter().any(|n| n == "allocate"), "{alloc:?}");
    assert!(alloc.iter().any(|n| n == "free"), "{alloc:?}");
    let stream = trace_names(&path, "stream");
    // The record's flow start and the wait's flow end.
    assert!(
        stream.iter().filter(|n| *n == "event").count() >= 2,
        "{stream:?}"
    );
}

#[test]
fn dipu_profile_writes_the_trace_at_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("exit.json");
    let out = run_profiler(dir.path(), "exit", &[("DIPU_PROFILE", &path)]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("profiler exit done"));
    let alloc = trace_names(&path, "allocator");
    assert_eq!(
        alloc.iter().filter(|n| *n == "allocate").count(),
        1,
        "{alloc:?}"
    );
}

/// Runs `tests/c/exit_overrun.c <mode>` with the checker and 64 guard
/// bytes (nothing checks or shuts down before exit); returns its output and
/// the checker's log.
fn run_exit_overrun(mode: &str) -> (Output, String) {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_with(
        dir.path(),
        "gcc",
        "c11",
        "exit_overrun.c",
        &["-O0", "-rdynamic"],
    );
    let log = dir.path().join("memcheck.log");
    let out = Command::new(&exe)
        .arg(mode)
        .env_remove("DIPU_VENDOR")
        .env("DIPU_MEM_CHECK", "1")
        .env("DIPU_MEM_CHECK_ENABLE_BACKTRACE", "1")
        .env("DIPU_MEM_CHECK_GUARD_BYTES", "64")
        .env("DIPU_MEM_CHECK_LOG_FILE", &log)
        .output()
        .expect("run exit_overrun.c");
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    (out, log)
}

/// An overrun of a freed block that nothing checked is reported at process
/// exit (return from `main`, `exit`, a kept block, a block not kept),
/// naming the allocation and the line that allocated it.
#[test]
fn memcheck_reports_an_unchecked_c_overrun_at_exit() {
    for (mode, bytes) in [("return", 1000), ("exit", 1000), ("big", 8 << 20)] {
        let (out, log) = run_exit_overrun(mode);
        assert_ok(&out, "exit_overrun.c");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("overran and freed"), "{mode}: {stdout}");
        let line = "dipu memcheck: out-of-bounds write: the guard after the end of";
        assert_eq!(log.matches(line).count(), 1, "{mode}: {log}");
        let at = format!("offset +{bytes} (0 bytes past the end)");
        assert!(log.contains(&at), "{mode}: {log}");
        assert!(
            log.contains(&format!("{bytes} bytes on device 0")),
            "{mode}: {log}"
        );
        assert!(log.contains("found at its free"), "{mode}: {log}");
        assert!(
            log.contains("overrun_and_free"),
            "{mode}: the allocation's function: {log}"
        );
        let report = &log[log.find("==== dipu memcheck report").expect(&log)..];
        assert!(
            report.contains("1 invalid frees/accesses"),
            "{mode}: {report}"
        );
    }
}
