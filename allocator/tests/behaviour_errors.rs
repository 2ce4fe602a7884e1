//! Edge cases every device allocator shares (issue 4), one test per
//! algorithm: zero-byte requests, and frees, `record_stream` calls and
//! streams that must be rejected without changing anything.

#[macro_use]
mod common;

use std::ffi::c_void;

use common::{Env, KIB};
use dipu_allocator::Algorithm;
use dipu_deviceapi::ErrorKind;

per_algorithm!(
    zero_bytes_is_null,
    bad_frees_are_rejected_and_change_nothing,
    stream_of_another_device_is_rejected,
);

/// Zero bytes: a null pointer, no error, no statistic changes; null frees.
fn zero_bytes_is_null(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let stream = env.ctx.default_stream(0).unwrap();
    let before = alloc.stats();
    let a = alloc
        .allocate(0, stream)
        .unwrap_or_else(|e| panic!("{alg}: allocate(0): {e}"));
    assert!(
        a.ptr.is_null(),
        "{alg}: allocate(0) gave {:p}, not null (the trait promises null)",
        a.ptr
    );
    assert_eq!(
        alloc.stats(),
        before,
        "{alg}: allocate(0) changed the statistics"
    );
    alloc
        .free(a.ptr)
        .unwrap_or_else(|e| panic!("{alg}: free(null): {e}"));
    assert_eq!(
        alloc.stats(),
        before,
        "{alg}: free(null) changed the statistics"
    );
    assert_eq!(env.used(0), 0, "{alg}: allocate(0) took device memory");
}

/// Double free, unknown and interior pointers, and `record_stream` of an
/// unknown pointer fail with `InvalidArgument` and a message, and change
/// no statistic.
fn bad_frees_are_rejected_and_change_nothing(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let stream = env.ctx.default_stream(0).unwrap();
    let a = alloc.allocate(4 * KIB, stream).unwrap();
    let b = alloc.allocate(4 * KIB, stream).unwrap();
    alloc.free(a.ptr).unwrap();
    let before = alloc.stats();
    let unknown = 0x1234_5600usize as *mut c_void;
    let interior = (b.ptr as usize + 512) as *mut c_void;
    for (what, ptr) in [
        ("double free", a.ptr),
        ("unknown pointer", unknown),
        ("interior pointer", interior),
    ] {
        let e = alloc
            .free(ptr)
            .expect_err(&format!("{alg}: {what} was accepted"));
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{alg}: {what}: {e}");
        assert!(
            e.message().len() > 10,
            "{alg}: {what}: no useful message: {e}"
        );
        assert_eq!(
            alloc.stats(),
            before,
            "{alg}: {what} changed the statistics"
        );
    }
    for (what, ptr) in [("freed pointer", a.ptr), ("unknown pointer", unknown)] {
        let e = alloc
            .record_stream(ptr, stream)
            .expect_err(&format!("{alg}: record_stream of {what}"));
        assert_eq!(
            e.kind(),
            ErrorKind::InvalidArgument,
            "{alg}: record_stream of {what}: {e}"
        );
    }
    let data = common::pattern(4 * KIB, 9);
    env.upload(0, b.ptr, &data);
    assert!(
        env.download(0, b.ptr, 4 * KIB) == data,
        "{alg}: the live block survives"
    );
    alloc.free(b.ptr).unwrap();
    assert_eq!(
        alloc.stats().allocation.current,
        0,
        "{alg}: everything freed"
    );
}

/// A stream of device 1 passed to the allocator of device 0 is rejected.
fn stream_of_another_device_is_rejected(alg: Algorithm) {
    let env = Env::new(64 << 20);
    let alloc = env.allocator(0, alg);
    let before = alloc.stats();
    for stream in [env.ctx.default_stream(1).unwrap(), env.stream(1)] {
        let e = alloc
            .allocate(4 * KIB, stream)
            .expect_err(&format!("{alg}: stream of device 1 accepted"));
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{alg}: {e}");
        assert!(
            e.message().contains("device 1"),
            "{alg}: the message should name the device: {e}"
        );
    }
    assert_eq!(
        alloc.stats(),
        before,
        "{alg}: a rejected allocation changed the statistics"
    );
    assert_eq!(
        (env.used(0), env.used(1)),
        (0, 0),
        "{alg}: a rejected allocation took memory"
    );
}
