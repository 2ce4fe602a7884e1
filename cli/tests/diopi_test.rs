//! `dipu diopi-test` end to end: the host vendor's kernel library passes
//! every op it has (also on a busy stream) and the missing ones are
//! listed; a library with known bugs fails exactly where it should (one
//! computing on the calling thread only on a busy stream).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `dipu` without the variables it reads from the caller's environment.
fn dipu(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dipu"));
    cmd.args(args);
    for var in [
        "DIPU_VENDOR",
        "DIPU_VENDOR_PATH",
        "DIPU_LOG",
        "DIPU_DIOPI_LIBRARY",
        "DIPU_HOST_DEVICES",
        "DIPU_HOST_MEMORY",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// (exit code, stdout, stderr).
fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("run dipu");
    (
        out.status.code().expect("dipu exited by a signal"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `libdiopi_impl_host.so`, built by cargo (a dev-dependency) next to the
/// `dipu` binary or in its deps/.
fn host_library() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_dipu"));
    let dir = exe.parent().expect("target directory");
    for candidate in [dir.to_path_buf(), dir.join("deps")] {
        let so = candidate.join("libdiopi_impl_host.so");
        if so.exists() {
            return so;
        }
    }
    panic!("libdiopi_impl_host.so not found in {} or its deps/; build it with `cargo build -p dipu-diopi-host`", dir.display());
}

/// The JSON object of op `name` in a `--json` report (text from its
/// `{"name":` to the next op's).
fn op_json<'a>(json: &'a str, name: &str) -> &'a str {
    let start = json
        .find(&format!("{{\"name\":\"{name}\""))
        .unwrap_or_else(|| panic!("{name} not in {json}"));
    let rest = &json[start + 1..];
    let end = rest
        .find("{\"name\":")
        .map_or(json.len(), |e| start + 1 + e);
    &json[start..end]
}

#[test]
fn host_library_passes_every_op_it_has() {
    let lib = host_library();
    let (code, out, err) = run(&mut dipu(&[
        "diopi-test",
        "--library",
        lib.to_str().expect("utf-8 path"),
    ]));
    let summary = out
        .lines()
        .rev()
        .find(|l| l.contains(" passed, "))
        .unwrap_or_else(|| panic!("no summary\n{out}\n{err}"));
    println!("{summary}");
    let missing: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("missing "))
        .collect();
    println!("{} ops not in the host library:", missing.len());
    for m in &missing {
        println!("{m}");
    }
    assert_eq!(code, 0, "failures on the host library:\n{out}\n{err}");
    assert!(summary.contains(" 0 failed"), "{summary}");
    let passed: usize = summary
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count first");
    assert!(passed >= 20, "only {passed} ops passed: the host library should have at least its elementwise ops\n{out}");
    // Every missing op is named in the closing list too.
    if !missing.is_empty() {
        let list = out
            .lines()
            .find(|l| l.starts_with("not in library: "))
            .expect("the list of missing ops");
        for m in &missing {
            let name = m.split_whitespace().nth(1).expect("name");
            assert!(
                list.split_whitespace().any(|n| n == name),
                "{name} not listed in {list}"
            );
        }
    }
}

#[test]
fn filter_json_and_bad_arguments() {
    let lib = host_library();
    let lib = lib.to_str().expect("utf-8 path");
    let (code, out, err) = run(&mut dipu(&[
        "diopi-test",
        "--library",
        lib,
        "--filter",
        "^(Add|Relu)$",
        "--json",
    ]));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.starts_with('{') && out.trim_end().ends_with('}'),
        "{out}"
    );
    assert!(out.contains("\"failed\":0"), "{out}");
    assert!(
        op_json(&out, "diopiAdd").contains("\"status\":\"passed\""),
        "{out}"
    );
    assert!(
        op_json(&out, "diopiRelu").contains("\"status\":\"passed\""),
        "{out}"
    );
    assert!(
        !out.contains("diopiAddInp"),
        "the filter is anchored by the caller: {out}"
    );

    // --dump-cases writes the selected cases.
    let dir = tempfile::tempdir().expect("temp dir");
    let dump = dir.path().join("cases.json");
    let (code, out, err) = run(&mut dipu(&[
        "diopi-test",
        "--library",
        lib,
        "--filter",
        "^Add$",
        "--dump-cases",
        dump.to_str().expect("utf-8 path"),
    ]));
    assert_eq!(code, 0, "{out}\n{err}");
    let cases = std::fs::read_to_string(&dump).expect("the dump");
    assert!(
        cases.starts_with("[{\"op\":\"diopiAdd\",") && cases.ends_with("}]"),
        "{cases}"
    );
    assert_eq!(cases.matches("{\"op\":").count(), 9, "Add has 9 cases");

    // Without --library: DIPU_DIOPI_LIBRARY names it.
    let (code, out, err) =
        run(dipu(&["diopi-test", "--filter", "^Mul$"]).env("DIPU_DIOPI_LIBRARY", lib));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.starts_with(&format!("library: {lib}\n")), "{out}");
    assert!(
        out.contains("1 passed, 0 failed, 0 not in library"),
        "{out}"
    );

    let (code, _, err) = run(&mut dipu(&[
        "diopi-test",
        "--library",
        lib,
        "--filter",
        "NoSuchOp",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("selects no op"), "{err}");
    let (code, _, err) = run(&mut dipu(&[
        "diopi-test",
        "--library",
        lib,
        "--filter",
        "(",
    ]));
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&mut dipu(&[
        "diopi-test",
        "--library",
        "/nonexistent/libdiopi_impl.so",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent/libdiopi_impl.so"), "{err}");
}

/// Builds `tests/c/diopi_bad_kernels.c` into `dir`.
fn bad_library(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = dir.join("libdiopi_bad.so");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&compiler)
        .args([
            "-std=c11", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I",
        ])
        .arg(root.join("../include"))
        .arg(root.join("tests/c/diopi_bad_kernels.c"))
        .args(["-lm", "-o"])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
    assert!(status.success(), "{compiler} failed on diopi_bad_kernels.c");
    out
}

#[test]
fn a_library_with_known_bugs_fails_where_it_should() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lib = bad_library(dir.path());
    let (code, out, err) = run(&mut dipu(&[
        "diopi-test",
        "--library",
        lib.to_str().expect("utf-8 path"),
        "--filter",
        "^(Add|Neg|Abs|Sqrt|Relu|UniformInp|Exp)$",
        "--json",
    ]));
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("\"passed\":0,\"failed\":6,\"not_in_library\":1"),
        "{out}"
    );
    assert!(
        op_json(&out, "diopiAdd").contains("\"status\":\"not in library\""),
        "{out}"
    );

    let neg = op_json(&out, "diopiNeg");
    assert!(
        neg.contains("returned diopiErrorOccurred (1): bad kernels: Neg always fails"),
        "{neg}"
    );

    // Abs ignores strides: contiguous float32 runs pass, strided ones fail.
    let abs = op_json(&out, "diopiAbs");
    assert!(
        abs.contains("\"variant\":\"strided inputs\"")
            && abs.contains("\"variant\":\"strided outputs\""),
        "{abs}"
    );
    assert!(
        !abs.contains("\"case\":\"float32[3, 4] -> float32[3, 4]\",\"variant\":\"contiguous\""),
        "{abs}"
    );

    let sqrt = op_json(&out, "diopiSqrt");
    assert!(
        sqrt.contains("input argument 2 float32[3, 4] was modified"),
        "{sqrt}"
    );

    let uniform = op_json(&out, "diopiUniformInp");
    assert!(
        uniform.contains("the generator's offset did not advance"),
        "{uniform}"
    );
    assert!(
        !uniform.contains("\"variant\":\"contiguous\""),
        "the values themselves pass the statistical checks: {uniform}"
    );

    // Exp queues its work on the default stream: contiguous float32 runs
    // on the default stream pass, the run on another stream fails.
    let exp = op_json(&out, "diopiExp");
    assert!(
        exp.contains(
            "\"case\":\"float32[3, 4] -> float32[3, 4]\",\"variant\":\"non-default stream\""
        ),
        "{exp}"
    );
    assert!(
        !exp.contains("\"case\":\"float32[3, 4] -> float32[3, 4]\",\"variant\":\"contiguous\""),
        "{exp}"
    );

    // Relu computes on the calling thread: right for float32 on an idle
    // stream (strided, 0-dim, empty, aliased, other stream), wrong on a
    // busy one, with a message saying why; the half types it does not
    // support fail everywhere.
    let relu = op_json(&out, "diopiRelu");
    let f32_failures: Vec<&str> = relu
        .split("{\"case\":")
        .skip(1)
        .filter(|f| f.starts_with("\"float32"))
        .collect();
    assert_eq!(
        f32_failures.len(),
        3,
        "each non-empty float32 case fails once, on the busy stream: {relu}"
    );
    for f in f32_failures {
        assert!(
            f.contains("\"variant\":\"busy stream\"")
                && f.contains("wrong only behind work queued on its stream before the call")
                && f.contains("on the calling thread"),
            "{f}"
        );
    }
    assert!(relu.contains("float16"), "{relu}");
}
