//! `dipu_process_group`: dipu-comm's process group (c10d's collectives
//! over the vendor's) as an opaque handle, looked up in a registry of live
//! groups on every use; the element-type and reduce-operator codes.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use dipu_comm::{Buffer, Options, ProcessGroup, Work};
use dipu_runtime::{Error, Result, Runtime};

use crate::dtypes::Wire;
use crate::handles::{c_str, duration_ms, slice, Registry};
use crate::status::{dipu_status, ffi_boundary, non_null, write_out};
use crate::store::{self, dipu_store};
use crate::work::{self, dipu_work};

/// An element type of a collective's buffers: one of the `DIPU_DTYPE_*`
/// values (0..10 are the codes of the vendor ABI's DipuDataType; bool and
/// complex, 11..13, travel as vendor types: see DIPU_DTYPE_BOOL).
pub type dipu_dtype = i32;
/// IEEE half precision (2 bytes).
pub const DIPU_DTYPE_F16: dipu_dtype = 0;
/// bfloat16 (2 bytes).
pub const DIPU_DTYPE_BF16: dipu_dtype = 1;
/// IEEE single precision (4 bytes).
pub const DIPU_DTYPE_F32: dipu_dtype = 2;
/// IEEE double precision (8 bytes).
pub const DIPU_DTYPE_F64: dipu_dtype = 3;
/// Signed 8-bit integer.
pub const DIPU_DTYPE_I8: dipu_dtype = 4;
/// Unsigned 8-bit integer.
pub const DIPU_DTYPE_U8: dipu_dtype = 5;
/// Signed 32-bit integer.
pub const DIPU_DTYPE_I32: dipu_dtype = 6;
/// Signed 64-bit integer.
pub const DIPU_DTYPE_I64: dipu_dtype = 7;
/// Signed 16-bit integer.
pub const DIPU_DTYPE_I16: dipu_dtype = 8;
/// Unsigned 32-bit integer.
pub const DIPU_DTYPE_U32: dipu_dtype = 9;
/// Unsigned 64-bit integer.
pub const DIPU_DTYPE_U64: dipu_dtype = 10;

/// A reduction operator: one of the `DIPU_REDUCE_*` values (the codes of
/// the vendor ABI's DipuReduceOp).
pub type dipu_reduce_op = i32;
/// Element-wise sum.
pub const DIPU_REDUCE_SUM: dipu_reduce_op = 0;
/// Element-wise product.
pub const DIPU_REDUCE_PROD: dipu_reduce_op = 1;
/// Element-wise minimum.
pub const DIPU_REDUCE_MIN: dipu_reduce_op = 2;
/// Element-wise maximum.
pub const DIPU_REDUCE_MAX: dipu_reduce_op = 3;
/// Element-wise mean over the ranks (integers truncate; emulated as a sum
/// and a division where the vendor lacks it).
pub const DIPU_REDUCE_AVG: dipu_reduce_op = 4;

/// A group of ranks running collectives on one device (opaque; made by
/// dipu_process_group_create, freed by dipu_process_group_destroy).
pub struct dipu_process_group {
    pub(crate) pg: ProcessGroup,
    /// The runtime the group was made with (the group keeps it alive).
    rt: Arc<Runtime>,
}

/// Live process groups, by the address handed to C.
static GROUPS: Registry<dipu_process_group> = Registry::new("process group");

pub(crate) fn lookup(handle: *const dipu_process_group) -> Result<Arc<dipu_process_group>> {
    GROUPS.get(handle, "group")
}

impl dipu_process_group {
    /// `InvalidArgument` when the process-global runtime is not the one the
    /// group was made with (dipu_shutdown came in between).
    pub(crate) fn check_runtime(&self) -> Result<()> {
        let current = match dipu_runtime::is_initialized() {
            true => Some(dipu_runtime::get()?),
            false => None,
        };
        match current {
            Some(rt) if Arc::ptr_eq(&rt, &self.rt) => Ok(()),
            _ => Err(Error::invalid_argument(
                "the process group was created before dipu_shutdown, by another runtime: \
                 destroy it and create a new one",
            )),
        }
    }

    /// `count` elements of `dtype` at the device address `ptr`. A pointer
    /// into a live allocation of the runtime must lie within it on the
    /// group's device, and names it (so the group protects it with
    /// record_stream); any other pointer is taken as raw device memory.
    pub(crate) fn buffer(
        &self,
        ptr: *const c_void,
        count: usize,
        wire: Wire,
        what: &str,
    ) -> Result<Buffer> {
        let (count, dtype) = (wire.count(count, what)?, wire.dtype);
        let device = self.pg.device();
        let bytes = count
            .checked_mul(dtype.size_in_bytes())
            .filter(|b| *b <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "{what}: {count} elements of {dtype:?} are more than any buffer can hold"
                ))
            })?;
        if ptr.is_null() && count > 0 {
            return Err(Error::invalid_argument(format!(
                "{what} is NULL but has {count} elements"
            )));
        }
        // SAFETY: the C caller promises (dipu_process_group_* docs) device
        // memory valid for the operation; runtime allocations are checked
        // below and kept alive by record_stream.
        let raw = unsafe { Buffer::from_raw(ptr.cast_mut(), count, dtype, device) };
        let Some(a) = self.rt.find_allocation(ptr).filter(|_| !ptr.is_null()) else {
            return Ok(raw);
        };
        if a.device != device {
            return Err(Error::invalid_argument(format!(
                "{what} {ptr:p} was allocated on device {} but the group runs on device {device}",
                a.device
            )));
        }
        if (ptr as usize) + bytes > a.addr + a.len {
            return Err(Error::invalid_argument(format!(
                "{what}: {bytes} bytes at {ptr:p} run past the end of its allocation \
                 ({:#x}, {} bytes)",
                a.addr, a.len
            )));
        }
        // SAFETY: `a` is the live allocation containing the buffer (checked).
        Ok(unsafe { raw.with_allocation(a.as_ptr()) })
    }

    /// One buffer per element of `ptrs` (`n` of them), of `counts[i]`
    /// elements each, or `default_count` each when `counts` is NULL.
    ///
    /// # Safety
    /// `ptrs` and `counts` must be NULL or valid for reading `n` elements.
    pub(crate) unsafe fn buffers(
        &self,
        ptrs: *const *const c_void,
        counts: *const usize,
        n: usize,
        default_count: usize,
        dtype: Wire,
        what: &str,
    ) -> Result<Vec<Buffer>> {
        // SAFETY: forwarded caller's contract.
        let ptrs = unsafe { slice(ptrs, n, what) }?;
        let counts = match counts.is_null() {
            true => vec![default_count; n],
            // SAFETY: forwarded caller's contract.
            false => unsafe { slice(counts, n, "counts") }?.to_vec(),
        };
        ptrs.iter()
            .zip(counts)
            .enumerate()
            .map(|(i, (&p, count))| self.buffer(p, count, dtype, &format!("{what}[{i}]")))
            .collect()
    }

    /// `world_size` split sizes at `splits` in vendor elements of `wire`,
    /// or `None` for NULL.
    ///
    /// # Safety
    /// `splits` must be NULL or valid for reading world_size elements.
    pub(crate) unsafe fn splits(
        &self,
        splits: *const usize,
        wire: Wire,
        what: &str,
    ) -> Result<Option<Vec<usize>>> {
        if splits.is_null() {
            return Ok(None);
        }
        let n = self.pg.world_size() as usize;
        // SAFETY: forwarded caller's contract.
        let splits = unsafe { slice(splits, n, what) }?;
        splits
            .iter()
            .map(|&s| wire.count(s, what))
            .collect::<Result<_>>()
            .map(Some)
    }
}

/// Runs a collective on `group` and writes its work's handle to `out`.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
pub(crate) unsafe fn launch(
    group: *mut dipu_process_group,
    out: *mut *mut dipu_work,
    op: impl FnOnce(&dipu_process_group) -> Result<Work>,
) -> Result<()> {
    non_null(out, "out")?;
    let g = lookup(group)?;
    g.check_runtime()?;
    let work = op(&g)?;
    let handle = work::register(work, g.pg.options().timeout);
    // SAFETY: forwarded caller's contract.
    unsafe { write_out(out, "out", handle) }
}

/// Creates a process group of `world_size` ranks meeting through `store`,
/// this process being `rank`, running collectives on `device` of the
/// current runtime's vendor (created from the environment if none exists
/// yet). Communicators are made on first use (each rank's first collective
/// waits for the others through the store). `timeout_ms` bounds every
/// operation (positive: milliseconds; 0: DIPU_COMM_TIMEOUT seconds or 600
/// s; negative: no limit): the group's watchdog fails an overdue operation
/// and aborts the group. `blocking_wait` 1 makes dipu_work_wait block the
/// host, 0 not, -1 as DIPU_COMM_BLOCKING_WAIT says (default 0). The group
/// keeps the store alive. One store serves one group: give further groups
/// their own dipu_store_prefix_create.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown store, a rank outside
/// 0..world_size or a NULL `out`; DIPU_STATUS_INVALID_DEVICE;
/// DIPU_STATUS_UNSUPPORTED when the vendor has no collectives;
/// DIPU_STATUS_INVALID_CONFIG for a bad DIPU_COMM_* variable. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_create(
    store: *mut dipu_store,
    rank: i32,
    world_size: i32,
    device: i32,
    timeout_ms: i64,
    blocking_wait: i32,
    out: *mut *mut dipu_process_group,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_create", {
        non_null(out, "out")?;
        let s = store::lookup(store)?;
        let mut options = Options::from_env()?;
        options.timeout = duration_ms(timeout_ms, options.timeout);
        if blocking_wait >= 0 {
            options.blocking_wait = blocking_wait != 0;
        }
        let rt = dipu_runtime::get()?;
        let pg = ProcessGroup::new(
            Arc::clone(&rt),
            Arc::clone(&s.store),
            rank,
            world_size,
            device,
            options,
        )?;
        let handle = GROUPS.insert(dipu_process_group { pg, rt });
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", handle) }
    })
}

/// Destroys `group` (NULL is a no-op) without waiting: queued operations
/// run to completion, their works stay usable, and memory from dipu_malloc
/// they use stays protected; raw pointers must stay valid until they
/// complete. A call using it on another thread finishes first. Destroy
/// groups before dipu_shutdown.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for a handle that is not a live
/// group (a second destroy, for one). Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_process_group_destroy(group: *mut dipu_process_group) -> dipu_status {
    ffi_boundary!("dipu_process_group_destroy", { GROUPS.remove(group) })
}

/// Aborts `group`: its communicators are aborted, every pending operation
/// fails (a dipu_work_wait_host blocked on one returns that error), and
/// every later call on the group fails at once with an error saying it was
/// aborted and why (`reason`; NULL: "dipu_process_group_abort"). Aborting
/// twice keeps the first reason. The handle stays valid until
/// dipu_process_group_destroy.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown group or a reason
/// that is not UTF-8. Thread-safe.
///
/// # Safety
/// `reason` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_abort(
    group: *mut dipu_process_group,
    reason: *const c_char,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_abort", {
        let g = lookup(group)?;
        let reason = match reason.is_null() {
            true => "dipu_process_group_abort",
            // SAFETY: forwarded caller's contract.
            false => unsafe { c_str(reason, "reason") }?,
        };
        g.pg.abort(reason);
        Ok(())
    })
}

/// Stores this process's rank in the group in `*out`.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown group or a NULL
/// `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_rank(
    group: *mut dipu_process_group,
    out: *mut i32,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_rank", {
        non_null(out, "out")?;
        let rank = lookup(group)?.pg.rank();
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", rank) }
    })
}

/// Stores the number of ranks of the group in `*out`.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown group or a NULL
/// `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_world_size(
    group: *mut dipu_process_group,
    out: *mut i32,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_world_size", {
        non_null(out, "out")?;
        let size = lookup(group)?.pg.world_size();
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", size) }
    })
}

/// Stores the device the group runs on in `*out`.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown group or a NULL
/// `out`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing an int.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_device(
    group: *mut dipu_process_group,
    out: *mut i32,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_device", {
        non_null(out, "out")?;
        let device = lookup(group)?.pg.device();
        // SAFETY: forwarded caller's contract.
        unsafe { write_out(out, "out", device) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtypes::data_type;
    use dipu_deviceapi::{DataType, ReduceOp};

    #[test]
    fn codes_equal_the_vendor_abi() {
        let dtypes = [
            (DIPU_DTYPE_F16, DataType::F16),
            (DIPU_DTYPE_BF16, DataType::BF16),
            (DIPU_DTYPE_F32, DataType::F32),
            (DIPU_DTYPE_F64, DataType::F64),
            (DIPU_DTYPE_I8, DataType::I8),
            (DIPU_DTYPE_U8, DataType::U8),
            (DIPU_DTYPE_I32, DataType::I32),
            (DIPU_DTYPE_I64, DataType::I64),
            (DIPU_DTYPE_I16, DataType::I16),
            (DIPU_DTYPE_U32, DataType::U32),
            (DIPU_DTYPE_U64, DataType::U64),
        ];
        assert_eq!(dtypes.len(), DataType::ALL.len());
        for (code, t) in dtypes {
            assert_eq!(data_type(code).unwrap().dtype, t);
        }
        let ops = [
            (DIPU_REDUCE_SUM, ReduceOp::Sum),
            (DIPU_REDUCE_PROD, ReduceOp::Prod),
            (DIPU_REDUCE_MIN, ReduceOp::Min),
            (DIPU_REDUCE_MAX, ReduceOp::Max),
            (DIPU_REDUCE_AVG, ReduceOp::Avg),
        ];
        assert_eq!(ops.len(), ReduceOp::ALL.len());
        let f32 = data_type(DIPU_DTYPE_F32).unwrap();
        for (code, op) in ops {
            assert_eq!(f32.reduce(code).unwrap(), op);
        }
        assert!(data_type(-1).is_err());
        assert!(f32.reduce(5).is_err());
    }
}

#[cfg(test)]
mod group_tests {
    use super::*;
    use crate::collectives::*;
    use crate::memory::{dipu_free, dipu_malloc};
    use crate::runtime::dipu_shutdown;
    use crate::status::dipu_last_error_message;
    use crate::status::dipu_status::*;
    use crate::store::{dipu_store_destroy, dipu_store_hash_create};
    use crate::stream::dipu_stream;
    use crate::work::{dipu_work_destroy, dipu_work_wait, dipu_work_wait_host};
    use std::ffi::CStr;
    use std::ptr::{null, null_mut};

    fn last() -> String {
        // SAFETY: the function returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(dipu_last_error_message()) }
            .to_string_lossy()
            .into_owned()
    }

    /// One rank in this process (the only test of this binary that uses the
    /// runtime): allocations and foreign pointers, a coalesced batch, and a
    /// group outliving dipu_shutdown.
    #[test]
    fn a_group_of_one_rank() {
        let (mut store, mut pg, mut w, mut w2, mut dev) =
            (null_mut(), null_mut(), null_mut(), null_mut(), null_mut());
        let s = dipu_stream {
            device: 0,
            id: 0,
            raw: 0,
        };
        let sum = DIPU_REDUCE_SUM;
        // SAFETY: valid out-pointers and buffers of dipu_malloc; the host
        // Vec is rejected by the vendor before any use.
        unsafe {
            assert_eq!(dipu_store_hash_create(&mut store), DIPU_OK);
            let status = dipu_process_group_create(store, 0, 1, 0, 10_000, 0, &mut pg);
            assert_eq!(status, DIPU_OK, "{}", last());
            assert_eq!(dipu_malloc(64, s, &mut dev), DIPU_OK);
            let status = dipu_process_group_all_reduce(pg, dev, 16, DIPU_DTYPE_F32, sum, &mut w);
            assert_eq!(status, DIPU_OK, "{}", last());
            // The group protects the allocation: freeing it now is safe.
            assert_eq!(dipu_free(dev), DIPU_OK);
            assert_eq!(dipu_work_wait_host(w, 0), DIPU_OK, "{}", last());
            assert_eq!(dipu_work_destroy(w), DIPU_OK);

            // Host memory is not device memory of the host vendor: an error.
            let mut host = [1.0f32; 16];
            let ptr = host.as_mut_ptr().cast();
            let status = dipu_process_group_all_reduce(pg, ptr, 16, DIPU_DTYPE_F32, sum, &mut w);
            assert_eq!(status, DIPU_STATUS_INVALID_ARGUMENT);
            assert!(last().contains("not device memory"), "{}", last());
            let status =
                dipu_process_group_all_reduce(pg, null_mut(), 1, DIPU_DTYPE_F32, sum, &mut w);
            assert_eq!(status, DIPU_STATUS_INVALID_ARGUMENT);
            assert!(last().contains("buf is NULL"), "{}", last());

            // A coalesced batch: one work for both, usable once it ended.
            assert_eq!(dipu_malloc(64, s, &mut dev), DIPU_OK);
            assert_eq!(
                dipu_process_group_start_coalescing(pg),
                DIPU_OK,
                "{}",
                last()
            );
            assert_eq!(
                dipu_process_group_start_coalescing(pg),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            let status = dipu_process_group_all_reduce(pg, dev, 8, DIPU_DTYPE_F32, sum, &mut w);
            assert_eq!(status, DIPU_OK, "{}", last());
            assert_eq!(dipu_work_wait(w), DIPU_STATUS_INVALID_ARGUMENT);
            assert!(last().contains("end_coalescing"), "{}", last());
            let second = dev.cast::<f32>().wrapping_add(8).cast();
            let status = dipu_process_group_broadcast(pg, second, 8, DIPU_DTYPE_F32, 0, &mut w2);
            assert_eq!(status, DIPU_OK, "{}", last());
            assert_eq!(dipu_work_destroy(w2), DIPU_OK);
            assert_eq!(
                dipu_process_group_end_coalescing(pg, &mut w2),
                DIPU_OK,
                "{}",
                last()
            );
            assert_eq!(dipu_work_wait_host(w2, 0), DIPU_OK, "{}", last());
            assert_eq!(dipu_work_wait(w), DIPU_OK, "{}", last());
            assert_eq!(dipu_work_destroy(w), DIPU_OK);
            assert_eq!(dipu_work_destroy(w2), DIPU_OK);
            assert_eq!(
                dipu_process_group_end_coalescing(pg, &mut w2),
                DIPU_STATUS_INVALID_ARGUMENT
            );
            assert_eq!(dipu_process_group_barrier(pg), DIPU_OK, "{}", last());
            assert_eq!(dipu_free(dev), DIPU_OK);

            // Every other collective's arguments reach the group (one rank:
            // each is a copy at most).
            assert_eq!(dipu_malloc(64, s, &mut dev), DIPU_OK);
            let half = dev.cast::<f32>().wrapping_add(8).cast::<c_void>();
            let f32 = DIPU_DTYPE_F32;
            let one = [half.cast_const()];
            let outs = [half];
            let counts = [8usize];
            let splits = [8usize];
            // Launches one collective (storing its work in `w`), waits, destroys.
            macro_rules! run {
                ($what:literal, $call:expr) => {{
                    let status = $call;
                    assert_eq!(status, DIPU_OK, "{}: {}", $what, last());
                    assert_eq!(dipu_work_wait_host(w, 0), DIPU_OK, "{}: {}", $what, last());
                    assert_eq!(dipu_work_destroy(w), DIPU_OK);
                }};
            }
            run!(
                "reduce",
                dipu_process_group_reduce(pg, dev, 8, f32, 0, sum, &mut w)
            );
            run!(
                "all_gather_into",
                dipu_process_group_all_gather_into(pg, half, dev, 8, f32, &mut w)
            );
            run!(
                "reduce_scatter",
                dipu_process_group_reduce_scatter(
                    pg,
                    half,
                    8,
                    one.as_ptr(),
                    counts.as_ptr(),
                    1,
                    f32,
                    sum,
                    &mut w
                )
            );
            run!(
                "reduce_scatter_from",
                dipu_process_group_reduce_scatter_from(pg, half, 8, dev, f32, sum, &mut w)
            );
            run!(
                "all_to_all",
                dipu_process_group_all_to_all(pg, half, 8, dev, 8, f32, null(), null(), &mut w)
            );
            run!(
                "all_to_all splits",
                dipu_process_group_all_to_all(
                    pg,
                    half,
                    8,
                    dev,
                    8,
                    f32,
                    splits.as_ptr(),
                    splits.as_ptr(),
                    &mut w
                )
            );
            run!(
                "gather",
                dipu_process_group_gather(pg, outs.as_ptr(), null(), 1, dev, 8, f32, 0, &mut w)
            );
            run!(
                "scatter",
                dipu_process_group_scatter(pg, half, 8, one.as_ptr(), null(), 1, f32, 0, &mut w)
            );
            let status =
                dipu_process_group_all_to_all(pg, half, 7, dev, 8, f32, null(), null(), &mut w);
            assert_eq!(
                status,
                DIPU_OK,
                "one rank: 7 elements split evenly: {}",
                last()
            );
            assert_eq!(dipu_work_wait_host(w, 0), DIPU_OK);
            assert_eq!(dipu_work_destroy(w), DIPU_OK);
            let status = dipu_process_group_gather(pg, null(), null(), 1, dev, 8, f32, 0, &mut w);
            assert_eq!(status, DIPU_STATUS_INVALID_ARGUMENT);
            assert!(last().contains("outputs is NULL"), "{}", last());
            let status = dipu_process_group_send(pg, dev, 8, f32, 0, 0, &mut w);
            assert_eq!(status, DIPU_STATUS_INVALID_ARGUMENT);
            assert_eq!(dipu_free(dev), DIPU_OK);

            // After dipu_shutdown the group belongs to a runtime gone by.
            assert_eq!(dipu_shutdown(null_mut()), DIPU_OK);
            assert_eq!(dipu_process_group_barrier(pg), DIPU_STATUS_INVALID_ARGUMENT);
            assert!(last().contains("before dipu_shutdown"), "{}", last());
            assert_eq!(dipu_process_group_destroy(pg), DIPU_OK);
            assert_eq!(dipu_process_group_destroy(pg), DIPU_STATUS_INVALID_ARGUMENT);
            assert_eq!(dipu_store_destroy(store), DIPU_OK);
        }
    }
}
