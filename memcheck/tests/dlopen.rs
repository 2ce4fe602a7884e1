//! A backtrace through code loaded with `dlopen` after the checker's
//! unwinder first scanned the loaded objects: the unwinder scans again
//! when it meets the unknown return address and the trace goes on through
//! the plugin to its caller. (A test binary of its own: the checker's
//! state is per process.)

use std::ffi::{c_void, CString};
use std::process::Command;

use dipu_memcheck::{on_alloc, report, Location, MemCheck};

/// The plugin: calls back into Rust.
const PLUGIN: &str = r#"
void dipu_test_plugin_call_back(void (*f)(void)) {
    f();
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}
"#;

const PTR: usize = 0x6100_0000;

extern "C" fn record_from_c() {
    on_alloc(PTR, 256, Location::Host, None);
}

#[inline(never)]
fn allocate_before_the_plugin_is_loaded() {
    on_alloc(PTR + 4096, 16, Location::Host, None);
}

#[test]
fn traces_go_through_a_plugin_loaded_after_the_first_capture() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("plugin.c");
    let lib = dir.path().join("libplugin.so");
    std::fs::write(&src, PLUGIN).unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .expect("a C compiler (cc) for the plugin: run scripts/setup.sh");
    assert!(out.status.success(), "{out:?}");

    MemCheck::clear();
    MemCheck::enable(true);
    // A first capture: the unwinder scans the objects loaded now.
    allocate_before_the_plugin_is_loaded();

    let path = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path to the library just built; it has no
    // initialisers.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
    assert!(!handle.is_null(), "dlopen {}", lib.display());
    let name = CString::new("dipu_test_plugin_call_back").unwrap();
    // SAFETY: `handle` is the library opened above; the name is
    // NUL-terminated.
    let sym: *mut c_void = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!sym.is_null());
    // SAFETY: the symbol is the C function above, of this signature.
    let call_back: extern "C" fn(extern "C" fn()) = unsafe { std::mem::transmute(sym) };
    call_back(record_from_c);

    let r = report();
    MemCheck::disable();
    MemCheck::clear();
    let group = r
        .groups
        .iter()
        .find(|g| g.blocks.iter().any(|b| b.ptr == PTR))
        .expect("the block allocated from the plugin's callback");
    let names: Vec<&str> = group.frames.iter().map(|f| f.function.as_str()).collect();
    assert!(names.len() >= 3, "the trace stopped early: {names:#?}");
    assert!(names[0].ends_with("dlopen::record_from_c"), "{names:#?}");
    assert_eq!(names[1], "dipu_test_plugin_call_back", "{names:#?}");
    assert!(
        names[2].ends_with("dlopen::traces_go_through_a_plugin_loaded_after_the_first_capture"),
        "{names:#?}"
    );
    // The library stays loaded: its code may still be in a trace.
}
