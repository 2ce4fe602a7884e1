//! Gives the shared library the soname `libdipu_runtime.so`, so programs
//! linked against an installed copy record that name (not a path).

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdipu_runtime.so");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
