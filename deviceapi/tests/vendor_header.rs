//! `include/dipu_vendor.h` must equal what cbindgen generates from the ABI
//! source; `DIPU_BLESS=1` rewrites it. The vtable is defined by a macro from
//! the method list, which cbindgen cannot expand: its definition comes as
//! the text the macro also emits.

use std::path::Path;

#[test]
fn vendor_header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../include/dipu_vendor.h");
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let vtable = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dipu_vendor_vtable.rs");
    std::fs::write(
        &vtable,
        dipu_deviceapi::plugin::abi::DIPU_VENDOR_VTABLE_SOURCE,
    )
    .expect("write the vtable's source");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/plugin/abi.rs"))
        .with_src(&vtable)
        .with_src(crate_dir.join("src/error.rs"))
        .with_src(crate_dir.join("src/types.rs"))
        .generate()
        .expect("cbindgen generates the vendor header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("utf-8 header");
    if std::env::var_os("DIPU_BLESS").is_some() {
        std::fs::write(&header, &generated).expect("write header");
        return;
    }
    let checked_in = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/dipu_vendor.h is out of date: run `DIPU_BLESS=1 cargo test -p dipu-deviceapi --test vendor_header`"
    );
}
