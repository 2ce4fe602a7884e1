//! ABI major 1 as it was frozen before the vtable came to be generated from
//! the method list (`tests/c/abi1/dipu_vendor.h`, the header of commit
//! a670b0d): a C compiler lays out its `DipuVendorVTable` exactly as Rust
//! lays out today's, and a vendor built against it loads and works.

mod common;

use std::ffi::c_void;

use common::{build_c, workspace_root};
use dipu_deviceapi::plugin::DipuVendorVTable;
use dipu_deviceapi::{CopyKind, ErrorKind, Loader, VendorSpec};

#[test]
fn the_frozen_header_lays_the_table_out_as_rust_does() {
    let dir = tempfile::tempdir().unwrap();
    let include = workspace_root().join("tests/c/abi1");
    let exe = build_c(
        dir.path(),
        "vtable_layout.c",
        &[],
        "layout",
        &include,
        false,
    );
    let out = std::process::Command::new(&exe).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut c: Vec<(String, usize)> = text
        .lines()
        .map(|l| {
            let (name, offset) = l.split_once(' ').expect("`name offset`");
            (name.to_owned(), offset.parse().expect("an offset"))
        })
        .collect();
    let (last, size) = c.pop().expect("the size line");
    assert_eq!(last, "sizeof");
    let rust: Vec<(String, usize)> = DipuVendorVTable::field_offsets()
        .into_iter()
        .map(|(n, o)| (n.to_owned(), o))
        .collect();
    assert_eq!(c.len(), 56, "ABI 1 has 56 fields");
    // Entries added since ABI 1 are appended, never inserted: the frozen
    // table is a prefix of Rust's, and a plugin's shorter table leaves them
    // absent (the loader then uses each one's default).
    assert_eq!(
        &rust[..c.len()],
        &c[..],
        "Rust's fields and offsets against the frozen header's"
    );
    let added: Vec<&str> = rust[c.len()..].iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(added, ["native_stream"], "the entries appended since ABI 1");
    assert_eq!(size + 8, std::mem::size_of::<DipuVendorVTable>());
}

#[test]
fn a_vendor_built_against_the_frozen_header_loads_and_works() {
    let dir = tempfile::tempdir().unwrap();
    let include = workspace_root().join("tests/c/abi1");
    let name = "libdipu_vendor_abi1.so";
    let path = build_c(dir.path(), "minimal_vendor.c", &[], name, &include, true);
    let loaded = Loader::new()
        .load(&VendorSpec::Path(path))
        .expect("the ABI 1 vendor loads");
    let api = &loaded.api;
    assert_eq!(api.name(), "c-minimal");
    assert_eq!(api.device_count().unwrap(), 1);
    assert_eq!(api.device_properties(0).unwrap().name, "c-minimal device 0");
    let src: Vec<u8> = (0..=255).collect();
    let mut back = vec![0u8; src.len()];
    let p = api.malloc(src.len()).unwrap();
    assert!(!p.is_null());
    let s = api.stream_create(0).unwrap();
    let e = api.event_create(true).unwrap();
    // SAFETY: `p` holds 256 bytes of this vendor; `src` and `back` are
    // host buffers of 256 bytes; stream and event are this vendor's.
    unsafe {
        api.memcpy_async(p, src.as_ptr().cast(), src.len(), CopyKind::HostToDevice, s)
            .unwrap();
        api.memset(p.cast::<u8>().add(16).cast::<c_void>(), 7, 4)
            .unwrap();
        api.event_record(e, s).unwrap();
        api.stream_synchronize(s).unwrap();
        assert!(api.event_query(e).unwrap());
        api.memcpy(
            back.as_mut_ptr().cast(),
            p,
            back.len(),
            CopyKind::DeviceToHost,
        )
        .unwrap();
        let err = api
            .memcpy(back.as_mut_ptr().cast(), p, 0, CopyKind::DeviceToHost)
            .map(|_| ());
        assert!(err.is_ok(), "a zero-byte copy is fine: {err:?}");
        api.event_destroy(e).unwrap();
        api.stream_destroy(s).unwrap();
        api.free(p).unwrap();
    }
    let mut expected = src.clone();
    expected[16..20].fill(7);
    assert_eq!(back, expected);
    // The vendor leaves the virtual-memory functions NULL.
    assert_eq!(
        api.vmm_granularity().unwrap_err().kind(),
        ErrorKind::Unsupported
    );
}
