//! The integration tests load a C kernel library that calls diopirt back:
//! their executables export their symbols (`-rdynamic`), as the `dipu`
//! executable does (cli/build.rs).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-tests=-rdynamic");
    }
}
