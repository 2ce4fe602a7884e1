//! The collectives of `dipu_process_group`: one exported function per c10d
//! collective, each returning a `dipu_work`.

use std::ffi::c_void;

use dipu_runtime::{Error, Result};

use crate::dtypes::data_type;
use crate::process_group::{dipu_dtype, dipu_process_group, dipu_reduce_op, launch, lookup};
use crate::status::{dipu_status, ffi_boundary};
use crate::work::dipu_work;

/// Reduces the `count` elements of `dtype` at `buf` in place across all
/// ranks with `op`, and stores the operation's work in `*out` (destroy it
/// with dipu_work_destroy).
///
/// Like every collective: the operation runs on the group's communication
/// stream after the work queued so far on the calling thread's current
/// stream of the group's device; wait for it with dipu_work_wait or
/// dipu_work_wait_host. Every rank must call the same collectives in the
/// same order. Buffers are device pointers: one inside a live dipu_malloc
/// allocation (on the group's device, the range within it) is protected
/// with record_stream, so dipu_free right after the call is safe; any other
/// pointer is taken as raw device memory that the caller keeps valid until
/// the operation completes. A NULL buffer is allowed only for 0 elements.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown group, dtype or op,
/// a NULL `out`, a buffer of another device or past its allocation's end,
/// or a group made before dipu_shutdown; the error the group was aborted
/// with, once it was. Thread-safe.
///
/// # Safety
/// `buf` must be device memory valid for `count` elements as described;
/// `out` NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_all_reduce(
    group: *mut dipu_process_group,
    buf: *mut c_void,
    count: usize,
    dtype: dipu_dtype,
    op: dipu_reduce_op,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_all_reduce", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                let op = dtype.reduce(op)?;
                g.pg.all_reduce(&g.buffer(buf, count, dtype, "buf")?, op)
            })
        }
    })
}

/// Copies `root`'s `count` elements at `buf` into every rank's `buf`; stores
/// the work in `*out`. As dipu_process_group_all_reduce otherwise.
/// Errors: as dipu_process_group_all_reduce, plus DIPU_STATUS_INVALID_ARGUMENT
/// for a root outside 0..world_size. Thread-safe.
///
/// # Safety
/// As dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_broadcast(
    group: *mut dipu_process_group,
    buf: *mut c_void,
    count: usize,
    dtype: dipu_dtype,
    root: i32,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_broadcast", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                g.pg.broadcast(&g.buffer(buf, count, dtype, "buf")?, root)
            })
        }
    })
}

/// Reduces the ranks' `buf` with `op` into `root`'s `buf` (the others'
/// are left as they were); stores the work in `*out`. As
/// dipu_process_group_all_reduce otherwise.
/// Errors: as dipu_process_group_broadcast. Thread-safe.
///
/// # Safety
/// As dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_reduce(
    group: *mut dipu_process_group,
    buf: *mut c_void,
    count: usize,
    dtype: dipu_dtype,
    root: i32,
    op: dipu_reduce_op,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_reduce", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                let op = dtype.reduce(op)?;
                g.pg.reduce(&g.buffer(buf, count, dtype, "buf")?, root, op)
            })
        }
    })
}

/// Gathers every rank's `input` (`input_count` elements) into
/// `outputs[r]` (`output_counts[r]` elements: rank r's input count; NULL
/// `output_counts`: all `input_count`) on every rank; `noutputs` must be the
/// world size. Stores the work in `*out`. As dipu_process_group_all_reduce
/// otherwise.
/// Errors: as dipu_process_group_all_reduce, plus
/// DIPU_STATUS_INVALID_ARGUMENT when `noutputs` is not the world size or
/// this rank's output count differs from `input_count`. Thread-safe.
///
/// # Safety
/// `outputs` (and `output_counts` unless NULL) must be valid for reading
/// `noutputs` elements; buffers as in dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_all_gather(
    group: *mut dipu_process_group,
    outputs: *const *mut c_void,
    output_counts: *const usize,
    noutputs: usize,
    input: *const c_void,
    input_count: usize,
    dtype: dipu_dtype,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_all_gather", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                let outs = g.buffers(
                    outputs.cast(),
                    output_counts,
                    noutputs,
                    input_count,
                    dtype,
                    "outputs",
                )?;
                g.pg.all_gather(&outs, &g.buffer(input, input_count, dtype, "input")?)
            })
        }
    })
}

/// Gathers every rank's `input` (`input_count` elements) into the flat
/// `output` of world_size * `input_count` elements, rank after rank
/// (all_gather_into_tensor); stores the work in `*out`. As
/// dipu_process_group_all_reduce otherwise.
/// Errors: as dipu_process_group_all_reduce. Thread-safe.
///
/// # Safety
/// As dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_all_gather_into(
    group: *mut dipu_process_group,
    output: *mut c_void,
    input: *const c_void,
    input_count: usize,
    dtype: dipu_dtype,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_all_gather_into", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                let total = flat_count(input_count, g.pg.world_size())?;
                let o = g.buffer(output, total, dtype, "output")?;
                g.pg.all_gather_into(&o, &g.buffer(input, input_count, dtype, "input")?)
            })
        }
    })
}

/// `count` times `world_size`, or `InvalidArgument` on overflow.
fn flat_count(count: usize, world_size: i32) -> Result<usize> {
    count.checked_mul(world_size as usize).ok_or_else(|| {
        Error::invalid_argument(format!(
            "{count} elements per rank times {world_size} ranks overflow"
        ))
    })
}

/// Reduces `inputs[r]` (`input_counts[r]` elements: rank r's output count;
/// NULL `input_counts`: all `output_count`) across ranks with `op` into rank
/// r's `output` (`output_count` elements); `ninputs` must be the world size.
/// Stores the work in `*out`. As dipu_process_group_all_reduce otherwise.
/// Errors: as dipu_process_group_all_gather. Thread-safe.
///
/// # Safety
/// `inputs` (and `input_counts` unless NULL) must be valid for reading
/// `ninputs` elements; buffers as in dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_reduce_scatter(
    group: *mut dipu_process_group,
    output: *mut c_void,
    output_count: usize,
    inputs: *const *const c_void,
    input_counts: *const usize,
    ninputs: usize,
    dtype: dipu_dtype,
    op: dipu_reduce_op,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_reduce_scatter", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                let op = dtype.reduce(op)?;
                let ins =
                    g.buffers(inputs, input_counts, ninputs, output_count, dtype, "inputs")?;
                let o = g.buffer(output, output_count, dtype, "output")?;
                g.pg.reduce_scatter(&o, &ins, op)
            })
        }
    })
}

/// Reduces the flat `input` (world_size blocks of `output_count` elements)
/// across ranks with `op`; rank r gets block r in `output`
/// (reduce_scatter_tensor). Stores the work in `*out`. As
/// dipu_process_group_all_reduce otherwise.
/// Errors: as dipu_process_group_all_reduce. Thread-safe.
///
/// # Safety
/// As dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_reduce_scatter_from(
    group: *mut dipu_process_group,
    output: *mut c_void,
    output_count: usize,
    input: *const c_void,
    dtype: dipu_dtype,
    op: dipu_reduce_op,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_reduce_scatter_from", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                let op = dtype.reduce(op)?;
                let total = flat_count(output_count, g.pg.world_size())?;
                let i = g.buffer(input, total, dtype, "input")?;
                g.pg.reduce_scatter_from(&g.buffer(output, output_count, dtype, "output")?, &i, op)
            })
        }
    })
}

/// Sends block r of `input` (`input_count` elements) to rank r and receives
/// rank r's block for this rank into block r of `output` (`output_count`
/// elements). With NULL splits the blocks are equal (count / world_size,
/// which must divide); else `output_splits` and `input_splits` are
/// world_size element counts each. Stores the work in `*out`. As
/// dipu_process_group_all_reduce otherwise.
/// Errors: as dipu_process_group_all_reduce, plus
/// DIPU_STATUS_INVALID_ARGUMENT for splits adding up to more than their
/// buffer, or a count that does not split evenly without them. Thread-safe.
///
/// # Safety
/// `output_splits` and `input_splits` must be NULL or valid for reading
/// world_size elements; buffers as in dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_all_to_all(
    group: *mut dipu_process_group,
    output: *mut c_void,
    output_count: usize,
    input: *const c_void,
    input_count: usize,
    dtype: dipu_dtype,
    output_splits: *const usize,
    input_splits: *const usize,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_all_to_all", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                let o = g.buffer(output, output_count, dtype, "output")?;
                let i = g.buffer(input, input_count, dtype, "input")?;
                let os = g.splits(output_splits, dtype, "output_splits")?;
                let is = g.splits(input_splits, dtype, "input_splits")?;
                g.pg.all_to_all(&o, &i, os.as_deref(), is.as_deref())
            })
        }
    })
}

/// Gathers every rank's `input` (`input_count` elements) into `outputs` on
/// `root`: there `noutputs` is the world size and `outputs[r]` has
/// `output_counts[r]` elements (NULL: all `input_count`); elsewhere
/// `noutputs` is 0. Stores the work in `*out`. As
/// dipu_process_group_all_reduce otherwise.
/// Errors: as dipu_process_group_all_gather, plus a bad root. Thread-safe.
///
/// # Safety
/// `outputs` (and `output_counts` unless NULL) must be valid for reading
/// `noutputs` elements; buffers as in dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_gather(
    group: *mut dipu_process_group,
    outputs: *const *mut c_void,
    output_counts: *const usize,
    noutputs: usize,
    input: *const c_void,
    input_count: usize,
    dtype: dipu_dtype,
    root: i32,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_gather", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                let outs = g.buffers(
                    outputs.cast(),
                    output_counts,
                    noutputs,
                    input_count,
                    dtype,
                    "outputs",
                )?;
                let i = g.buffer(input, input_count, dtype, "input")?;
                g.pg.gather(&outs, &i, root)
            })
        }
    })
}

/// Sends `inputs[r]` from `root` into rank r's `output` (`output_count`
/// elements): on the root `ninputs` is the world size and `inputs[r]` has
/// `input_counts[r]` elements (NULL: all `output_count`); elsewhere
/// `ninputs` is 0. Stores the work in `*out`. As
/// dipu_process_group_all_reduce otherwise.
/// Errors: as dipu_process_group_gather. Thread-safe.
///
/// # Safety
/// `inputs` (and `input_counts` unless NULL) must be valid for reading
/// `ninputs` elements; buffers as in dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_scatter(
    group: *mut dipu_process_group,
    output: *mut c_void,
    output_count: usize,
    inputs: *const *const c_void,
    input_counts: *const usize,
    ninputs: usize,
    dtype: dipu_dtype,
    root: i32,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_scatter", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                let ins =
                    g.buffers(inputs, input_counts, ninputs, output_count, dtype, "inputs")?;
                let o = g.buffer(output, output_count, dtype, "output")?;
                g.pg.scatter(&o, &ins, root)
            })
        }
    })
}

/// Sends the `count` elements at `buf` to rank `dst`, which must post a
/// matching dipu_process_group_recv (matched by order, as in NCCL; `tag` is
/// kept for c10d's signature). Outside a coalesced batch only the two ranks
/// take part. Stores the work in `*out`. As dipu_process_group_all_reduce
/// otherwise.
/// Errors: as dipu_process_group_all_reduce, plus
/// DIPU_STATUS_INVALID_ARGUMENT for a peer outside 0..world_size or this
/// rank. Thread-safe.
///
/// # Safety
/// As dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_send(
    group: *mut dipu_process_group,
    buf: *const c_void,
    count: usize,
    dtype: dipu_dtype,
    dst: i32,
    tag: i32,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_send", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                g.pg.send(&g.buffer(buf, count, dtype, "buf")?, dst, tag)
            })
        }
    })
}

/// Receives into the `count` elements at `buf` what rank `src` sends with
/// dipu_process_group_send. Stores the work in `*out`. As
/// dipu_process_group_all_reduce otherwise.
/// Errors: as dipu_process_group_send. Thread-safe.
///
/// # Safety
/// As dipu_process_group_all_reduce.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_recv(
    group: *mut dipu_process_group,
    buf: *mut c_void,
    count: usize,
    dtype: dipu_dtype,
    src: i32,
    tag: i32,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_recv", {
        // SAFETY: forwarded caller's contract.
        unsafe {
            launch(group, out, |g| {
                let dtype = data_type(dtype)?;
                g.pg.recv(&g.buffer(buf, count, dtype, "buf")?, src, tag)
            })
        }
    })
}

/// Waits on the host until every rank has reached the barrier (a one-element
/// all-reduce, as c10d does), up to the group's timeout.
/// Errors: DIPU_STATUS_TIMEOUT (and the group is aborted),
/// DIPU_STATUS_INVALID_ARGUMENT for an unknown group or one made before
/// dipu_shutdown, the error the group was aborted with. Thread-safe.
#[no_mangle]
pub extern "C" fn dipu_process_group_barrier(group: *mut dipu_process_group) -> dipu_status {
    ffi_boundary!("dipu_process_group_barrier", {
        let g = lookup(group)?;
        g.check_runtime()?;
        g.pg.barrier()
    })
}

/// Starts a coalesced batch: the collectives this thread issues on `group`
/// until dipu_process_group_end_coalescing are launched together and
/// complete as one operation (each returns a work for the whole batch,
/// usable once the batch has ended).
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown group or a batch
/// already open; the error the group was aborted with. Thread-safe (the
/// batch belongs to the calling thread; other threads' collectives on the
/// group fail while it is open).
#[no_mangle]
pub extern "C" fn dipu_process_group_start_coalescing(
    group: *mut dipu_process_group,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_start_coalescing", {
        let g = lookup(group)?;
        g.check_runtime()?;
        g.pg.start_coalescing()
    })
}

/// Ends the batch dipu_process_group_start_coalescing began, launching its
/// collectives, and stores the batch's work in `*out`.
/// Errors: DIPU_STATUS_INVALID_ARGUMENT for an unknown group, no open batch
/// or a NULL `out`; the vendor's status. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn dipu_process_group_end_coalescing(
    group: *mut dipu_process_group,
    out: *mut *mut dipu_work,
) -> dipu_status {
    ffi_boundary!("dipu_process_group_end_coalescing", {
        // SAFETY: forwarded caller's contract.
        unsafe { launch(group, out, |g| g.pg.end_coalescing()) }
    })
}
