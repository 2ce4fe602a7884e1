//! `include/dipu_runtime.h` is what cbindgen generates from this crate
//! (`DIPU_BLESS=1` rewrites it), carries the crate's version, and compiles
//! on its own as C11 and C++17 with every warning an error.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn header_path() -> PathBuf {
    crate_dir().join("../include/dipu_runtime.h")
}

fn generate() -> String {
    let mut config =
        cbindgen::Config::from_file(crate_dir().join("cbindgen.toml")).expect("ffi/cbindgen.toml");
    // The version comes from Cargo.toml, so the header cannot disagree.
    config.after_includes = Some(format!(
        "\n// The version of this header; dipu_version() returns the library's.\n\
         #define DIPU_RUNTIME_VERSION \"{}\"{}",
        env!("CARGO_PKG_VERSION"),
        config.after_includes.as_deref().unwrap_or("")
    ));
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir().join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the runtime header")
        .write(&mut out);
    String::from_utf8(out).expect("utf-8 header")
}

#[test]
fn header_is_up_to_date() {
    let generated = generate();
    if std::env::var_os("DIPU_BLESS").is_some() {
        std::fs::write(header_path(), &generated).expect("write header");
        return;
    }
    let checked_in = std::fs::read_to_string(header_path()).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/dipu_runtime.h is out of date: run `DIPU_BLESS=1 cargo test -p dipu-ffi --test header`"
    );
}

#[test]
fn header_version_is_the_crate_version() {
    let header = std::fs::read_to_string(header_path()).expect("read header");
    let line = header
        .lines()
        .find(|l| l.starts_with("#define DIPU_RUNTIME_VERSION "))
        .expect("the header defines DIPU_RUNTIME_VERSION");
    let expected = format!(
        "#define DIPU_RUNTIME_VERSION \"{}\"",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(line.trim(), expected);
}

#[test]
fn every_function_is_documented() {
    let header = std::fs::read_to_string(header_path()).expect("read header");
    let lines: Vec<&str> = header.lines().collect();
    let mut count = 0;
    for (i, line) in lines.iter().enumerate() {
        let is_decl = (line.starts_with("dipu_status ") || line.starts_with("const char *"))
            && line.contains("dipu_");
        if !is_decl {
            continue;
        }
        count += 1;
        assert!(
            i > 0 && lines[i - 1].starts_with("//"),
            "`{line}` has no doc comment in the header"
        );
        let doc: String = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.starts_with("//"))
            .copied()
            .collect();
        assert!(
            doc.contains("hread-safe") || doc.contains("per thread"),
            "`{line}` does not say whether it is thread-safe"
        );
    }
    assert!(count >= 45, "only {count} functions found in the header");
}

fn compile(compiler: &str, lang: &str, std: &str) {
    let output = Command::new(compiler)
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"])
        .arg(format!("-std={std}"))
        .args(["-x", lang])
        .arg(header_path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{compiler}`: {e}"));
    assert!(
        output.status.success(),
        "dipu_runtime.h does not compile as {std}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn header_compiles_as_c11() {
    compile("cc", "c", "c11");
}

#[test]
fn header_compiles_as_cxx17() {
    compile("c++", "c++", "c++17");
}
