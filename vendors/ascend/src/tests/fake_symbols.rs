//! The fakes export what the vendor binds: every function of the binding
//! tables (checked against the CANN headers by `headers.rs`) is in the new
//! fake, and the old-CANN fake lacks exactly the optional ones.

use std::path::PathBuf;

use crate::{acl, hccl};

/// The fake's file, as cargo built it for this test run (a dev-dependency).
pub(super) fn fake(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let deps = exe.parent().expect("target/debug/deps");
    [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found: run `cargo build -p dipu-fake-ascend -p dipu-fake-ascend-old`"
            )
        })
}

pub(super) fn exported(library: &libloading::Library, symbol: &str) -> bool {
    let mut name = symbol.as_bytes().to_vec();
    name.push(0);
    // SAFETY: only the symbol's address is looked up, never called.
    unsafe { library.get::<*const std::ffi::c_void>(&name) }.is_ok()
}

fn bound() -> Vec<&'static str> {
    acl::Acl::SIGNATURES
        .iter()
        .chain(hccl::Hccl::SIGNATURES)
        .map(|s| s.name)
        .collect()
}

#[test]
fn the_new_fake_exports_every_bound_function() {
    // SAFETY: the fake's initialisers only set up Rust statics.
    let lib = unsafe { libloading::Library::new(fake("libdipu_fake_ascend.so")) }.unwrap();
    let missing: Vec<_> = bound().into_iter().filter(|n| !exported(&lib, n)).collect();
    assert!(missing.is_empty(), "the fake lacks {missing:?}");
}

#[test]
fn the_old_cann_fake_lacks_exactly_the_optional_functions() {
    // SAFETY: as above.
    let lib = unsafe { libloading::Library::new(fake("libdipu_fake_ascend_old.so")) }.unwrap();
    for name in bound() {
        let optional = acl::OPTIONAL.contains(&name) || hccl::OPTIONAL.contains(&name);
        assert_eq!(
            exported(&lib, name),
            !optional,
            "{name}: optional {optional}, but the old-CANN fake disagrees"
        );
    }
}
