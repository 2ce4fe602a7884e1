//! The per-device default random generators (Philox seed and offset).

use crate::status::{dipu_status, ffi_boundary, non_null, write_buffer, write_out};

/// Seeds `device`'s default generator with `seed` and restarts its offset
/// at 0. Errors: DIPU_STATUS_INVALID_DEVICE. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_generator_manual_seed(device: i32, seed: u64) -> dipu_status {
    ffi_boundary!("dipu_generator_manual_seed", {
        dipu_runtime::get()?
            .default_generator(device)?
            .manual_seed(seed);
        Ok(())
    })
}

/// Seeds every device's default generator with `seed` (offsets restart at
/// 0). Without a runtime it creates none: the seed is kept and applied
/// when the runtime is created, so a process that only seeded can fork
/// children that use dipu. Errors: DIPU_STATUS_VENDOR_INIT_FAILED in a
/// child forked after the runtime was created. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_generator_manual_seed_all(seed: u64) -> dipu_status {
    ffi_boundary!("dipu_generator_manual_seed_all", {
        dipu_runtime::manual_seed_all(seed)
    })
}

/// Seeds `device`'s default generator from the operating system's entropy
/// and stores the new seed in `*out`.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`, DIPU_STATUS_INTERNAL without entropy. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a uint64_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_generator_seed(device: i32, out: *mut u64) -> dipu_status {
    ffi_boundary!("dipu_generator_seed", {
        non_null(out, "out")?;
        let seed = dipu_runtime::get()?.default_generator(device)?.seed()?;
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", seed) }
    })
}

/// Stores the seed in use by `device`'s default generator in `*out`.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a uint64_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_generator_initial_seed(device: i32, out: *mut u64) -> dipu_status {
    ffi_boundary!("dipu_generator_initial_seed", {
        non_null(out, "out")?;
        let seed = dipu_runtime::get()?
            .default_generator(device)?
            .initial_seed();
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", seed) }
    })
}

/// Reserves `increment` Philox values of `device`'s default generator for
/// one kernel launch: stores the seed in `*seed` and the start of the
/// reserved range in `*offset`. The offset advances by `increment` rounded
/// up to a multiple of 4, so concurrent callers get disjoint ranges.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL out-pointer or an offset overflow (reseed). Thread-safe.
///
/// # Safety
/// `seed` and `offset` must be NULL or valid for writing a uint64_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_generator_philox_inputs(
    device: i32,
    increment: u64,
    seed: *mut u64,
    offset: *mut u64,
) -> dipu_status {
    ffi_boundary!("dipu_generator_philox_inputs", {
        non_null(seed, "seed")?;
        non_null(offset, "offset")?;
        let g = dipu_runtime::get()?;
        let (s, o) = g.default_generator(device)?.philox_inputs(increment)?;
        // SAFETY: forwarded caller's contract.
        unsafe {
            write_out(seed, "seed", s)?;
            write_out(offset, "offset", o)
        }
    })
}

/// Copies `device`'s default generator state (24 bytes: magic, version,
/// seed, offset) into `buf` of `len` bytes, and the size needed into
/// `*needed` when `needed` is not NULL. `buf` NULL with `len` 0 only asks
/// for the size.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT when
/// `buf` is too small (nothing is written to it). Thread-safe.
///
/// # Safety
/// `buf` must be NULL or valid for writing `len` bytes, `needed` NULL or
/// valid for writing a size_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_generator_get_state(
    device: i32,
    buf: *mut u8,
    len: usize,
    needed: *mut usize,
) -> dipu_status {
    ffi_boundary!("dipu_generator_get_state", {
        let state = dipu_runtime::get()?.default_generator(device)?.get_state();
        // SAFETY: forwarded caller's contract.
        unsafe { write_buffer(&state, buf, len, needed) }
    })
}

/// Restores `device`'s default generator from `len` bytes at `buf` (from
/// dipu_generator_get_state).
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `buf` or a state of the wrong length, magic or version (nothing
/// changes then). Thread-safe.
///
/// # Safety
/// `buf` must be NULL or valid for reading `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn dipu_generator_set_state(
    device: i32,
    buf: *const u8,
    len: usize,
) -> dipu_status {
    ffi_boundary!("dipu_generator_set_state", {
        non_null(buf, "buf")?;
        // SAFETY: not NULL, and readable for `len` bytes by the caller's contract.
        let bytes = unsafe { std::slice::from_raw_parts(buf, len) };
        dipu_runtime::get()?
            .default_generator(device)?
            .set_state(bytes)
    })
}

/// Stores the Philox offset the next caller of `device`'s default
/// generator will get in `*out`.
/// Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT for a
/// NULL `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a uint64_t.
#[no_mangle]
pub unsafe extern "C" fn dipu_generator_get_offset(device: i32, out: *mut u64) -> dipu_status {
    ffi_boundary!("dipu_generator_get_offset", {
        non_null(out, "out")?;
        let offset = dipu_runtime::get()?.default_generator(device)?.offset();
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", offset) }
    })
}

/// Sets the Philox offset of `device`'s default generator (the seed is
/// kept). Errors: DIPU_STATUS_INVALID_DEVICE, DIPU_STATUS_INVALID_ARGUMENT
/// for an offset that is not a multiple of 4. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_generator_set_offset(device: i32, offset: u64) -> dipu_status {
    ffi_boundary!("dipu_generator_set_offset", {
        dipu_runtime::get()?
            .default_generator(device)?
            .set_offset(offset)
    })
}
