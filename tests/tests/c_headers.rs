//! The installed C headers compile on their own, cleanly, as C11 and C++17.

mod common;

use std::process::Command;

fn compile_header(compiler: &str, lang: &str, std: &str, header: &str) {
    let path = common::workspace_root().join("include").join(header);
    let output = Command::new(compiler)
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"])
        .arg(format!("-std={std}"))
        .args(["-x", lang])
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{compiler}`: {e}"));
    assert!(
        output.status.success(),
        "{header} does not compile as {std}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn vendor_header_compiles_as_c11() {
    compile_header("cc", "c", "c11", "dipu_vendor.h");
}

#[test]
fn vendor_header_compiles_as_cxx17() {
    compile_header("c++", "c++", "c++17", "dipu_vendor.h");
}
