//! Helpers of the distributed layer's C functions: registries of live
//! opaque handles, C strings and arrays, timeouts in milliseconds.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;
use std::time::Duration;

use dipu_runtime::{Error, Result};
use parking_lot::Mutex;

use crate::status::non_null;

/// The live objects of one handle type, by the address handed to C. Every
/// use looks the handle up, so a destroyed or made-up handle is an
/// `InvalidArgument` error, never a dereference; a call holds its own
/// `Arc`, so destroying a handle another thread is using is safe (that
/// call finishes first).
pub(crate) struct Registry<T> {
    /// What the handles are, for messages ("store").
    kind: &'static str,
    live: Mutex<Option<HashMap<usize, Arc<T>>>>,
}

impl<T> Registry<T> {
    /// An empty registry of `kind` handles.
    pub(crate) const fn new(kind: &'static str) -> Self {
        Registry {
            kind,
            live: Mutex::new(None),
        }
    }

    /// Keeps `value` alive and returns its handle.
    pub(crate) fn insert(&self, value: T) -> *mut T {
        let value = Arc::new(value);
        let handle = Arc::as_ptr(&value).cast_mut();
        self.live
            .lock()
            .get_or_insert_with(HashMap::new)
            .insert(handle as usize, value);
        handle
    }

    /// The live object `handle` names (`what` is the argument's name).
    pub(crate) fn get(&self, handle: *const T, what: &str) -> Result<Arc<T>> {
        non_null(handle, what)?;
        self.live
            .lock()
            .as_ref()
            .and_then(|m| m.get(&(handle as usize)).cloned())
            .ok_or_else(|| self.unknown(handle, what))
    }

    /// Forgets `handle` (NULL is a no-op); the object goes once no call
    /// uses it any more. Dropped outside the registry's lock, since dropping
    /// may take a while (a TCP server stopping, a watchdog joining).
    pub(crate) fn remove(&self, handle: *mut T) -> Result<()> {
        if handle.is_null() {
            return Ok(());
        }
        let removed = self
            .live
            .lock()
            .as_mut()
            .and_then(|m| m.remove(&(handle as usize)));
        match removed {
            Some(value) => {
                drop(value);
                Ok(())
            }
            None => Err(self.unknown(handle, "the handle")),
        }
    }

    fn unknown(&self, handle: *const T, what: &str) -> Error {
        Error::invalid_argument(format!(
            "{what} {handle:p} is not a live {} (never created, or already destroyed)",
            self.kind
        ))
    }
}

/// The UTF-8 string `ptr` points to (`what` names it in messages).
///
/// # Safety
/// `ptr` must be NULL or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn c_str<'a>(ptr: *const c_char, what: &str) -> Result<&'a str> {
    non_null(ptr, what)?;
    // SAFETY: not NULL, NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| Error::invalid_argument(format!("{what} is not UTF-8")))
}

/// `n` elements at `ptr` (NULL is allowed only for `n` 0).
///
/// # Safety
/// `ptr` must be NULL or valid for reading `n` elements for `'a`.
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, n: usize, what: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    non_null(ptr, what)?;
    if n.checked_mul(size_of::<T>())
        .is_none_or(|bytes| bytes > isize::MAX as usize)
    {
        return Err(Error::invalid_argument(format!(
            "{what}: {n} elements are more than any array can hold"
        )));
    }
    // SAFETY: not NULL, at most isize::MAX bytes (checked), readable by
    // the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) })
}

/// `len` bytes at `ptr` (NULL is allowed only for `len` 0).
///
/// # Safety
/// As for [`slice`].
pub(crate) unsafe fn bytes<'a>(ptr: *const c_void, len: usize, what: &str) -> Result<&'a [u8]> {
    // SAFETY: forwarded caller's contract.
    unsafe { slice(ptr.cast::<u8>(), len, what) }
}

/// `n` strings at `ptrs` (the array may be NULL only for `n` 0).
///
/// # Safety
/// `ptrs` must be NULL or valid for reading `n` pointers, each NULL or a
/// NUL-terminated string, all outliving `'a`.
pub(crate) unsafe fn c_strs<'a>(
    ptrs: *const *const c_char,
    n: usize,
    what: &str,
) -> Result<Vec<&'a str>> {
    // SAFETY: forwarded caller's contract.
    let ptrs = unsafe { slice(ptrs, n, what) }?;
    ptrs.iter()
        .enumerate()
        // SAFETY: each is NULL or a NUL-terminated string (caller's contract).
        .map(|(i, &p)| unsafe { c_str(p, &format!("{what}[{i}]")) })
        .collect()
}

/// A timeout given in milliseconds: positive is that long, 0 is `default`,
/// negative is no limit (`Duration::MAX`).
pub(crate) fn duration_ms(ms: i64, default: Duration) -> Duration {
    match ms {
        0 => default,
        ms if ms < 0 => Duration::MAX,
        ms => Duration::from_millis(ms.unsigned_abs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_rejects_unknown_and_destroyed_handles() {
        let registry: Registry<u32> = Registry::new("thing");
        let h = registry.insert(7);
        assert_eq!(*registry.get(h, "h").unwrap(), 7);
        let e = registry.get(h.wrapping_add(1), "h").unwrap_err();
        assert!(e.message().contains("not a live thing"), "{e}");
        assert!(registry.get(std::ptr::null(), "h").is_err());
        registry.remove(h).unwrap();
        assert!(registry.get(h, "h").is_err());
        assert!(registry.remove(h).is_err());
        assert!(registry.remove(std::ptr::null_mut()).is_ok());
    }

    #[test]
    fn arrays_and_timeouts() {
        // SAFETY: NULL with 0 elements reads nothing.
        assert!(unsafe { slice::<u8>(std::ptr::null(), 0, "a") }
            .unwrap()
            .is_empty());
        // SAFETY: NULL is checked before any read.
        assert!(unsafe { slice::<u8>(std::ptr::null(), 1, "a") }.is_err());
        let keys = [c"a".as_ptr(), c"b".as_ptr()];
        // SAFETY: two valid C strings.
        let strs = unsafe { c_strs(keys.as_ptr(), 2, "keys") };
        assert_eq!(strs.unwrap(), ["a", "b"]);
        let d = Duration::from_secs(3);
        assert_eq!(duration_ms(0, d), d);
        assert_eq!(duration_ms(-1, d), Duration::MAX);
        assert_eq!(duration_ms(250, d), Duration::from_millis(250));
    }
}
