//! The panic guard of every exported function (traced, with injected
//! faults, from `dipu-fakekit`), and small helpers.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use dipu_fakekit::config::Config;

pub(crate) use dipu_fakekit::handles::Table as Handles;

/// The configuration, read on first use (`DIPU_FAKE_DEVICES`,
/// `DIPU_FAKE_MEMORY`, `DIPU_FAKE_LATENCY_US`, `DIPU_FAKE_FAULTS`; see
/// `dipu-fakekit`).
pub(crate) fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(Config::from_env)
}

/// Whether this allocation is the one `DIPU_FAKE_FAULTS`' `oom@N` fails.
pub(crate) fn oom() -> bool {
    config().faults.oom()
}

/// Runs `body` for exported function `name`: traced (`DIPU_FAKE_TRACE`),
/// failing with the code of an injected `fail:NAME...` fault, and returning
/// `panicked` if it panics (no panic crosses the C boundary).
pub(crate) fn guard(name: &'static str, panicked: i32, body: impl FnOnce() -> i32) -> i32 {
    if let Some(code) = config().faults.fail(name) {
        dipu_fakekit::trace::call(name, || format!("-> injected fault {code}"));
        return code;
    }
    dipu_fakekit::trace::call(name, String::new);
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(panicked)
}

/// A 64-bit FNV-1a hash (the clique id's hash).
pub(crate) fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Writes `value` through `out`; `false` for a null pointer.
pub(crate) fn put<T>(out: *mut T, value: T) -> bool {
    if out.is_null() {
        return false;
    }
    // SAFETY: non-null; the C prototype makes `out` a valid, aligned
    // out-pointer of this type.
    unsafe { out.write(value) };
    true
}

/// Copies `bytes` bytes from `src` to `dst` (ranges may overlap).
pub(crate) fn copy_bytes(dst: usize, src: usize, bytes: usize) {
    if bytes == 0 || dst == src {
        return;
    }
    // SAFETY: the caller checked both ranges are live memory of the fake's
    // (device memory) or the caller's (host memory) for `bytes` bytes.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
}

/// Declares exported C functions of one library: each is traced, can be
/// failed by an injected fault, catches panics, and passes its result to
/// `$after` (CNRT records it as the thread's last error).
macro_rules! export {
    ($lib:literal, $fault:expr, $after:path;
     $(fn $name:ident($($a:ident: $t:ty),* $(,)?) $body:block)*) => {$(
        #[doc = concat!("`", stringify!($name), "` of the fake ", $lib, ".")]
        ///
        /// # Safety
        /// The contract of its C prototype in `dipu_cambricon_api.h`.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> std::ffi::c_int {
            let code = $crate::common::guard(stringify!($name), $fault, || $body);
            $after(code)
        }
    )*};
}
pub(crate) use export;
