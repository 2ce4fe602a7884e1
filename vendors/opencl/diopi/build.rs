//! The integration tests load libdiopi_impl_opencl.so into the test
//! executable, whose diopirt functions (from dipu-diopi) must be exported
//! for the library's undefined references to resolve.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-tests=-rdynamic");
    }
}
