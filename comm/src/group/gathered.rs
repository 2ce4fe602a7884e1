//! 64-bit float reductions on a vendor without a 64-bit float type (CNCL
//! has none, and its vendor answers `Unsupported`): there is no wider type
//! to widen to, and narrowing to `F32` would lose precision, so the process
//! group all-gathers the ranks' buffers as bytes (data movement needs no
//! type) and reduces the gathered rows on the host, in rank order, into the
//! result. Every rank sums in the same order, so all get the same bits, and
//! nothing is rounded but the reduction's own arithmetic, as a `float64`
//! all-reduce on ProcessGroupNCCL would give. The cost is world-size times
//! the traffic of a native reduction.
//!
//! As for the `I16` widening ([`super::widen`]), the host work goes through
//! pinned memory on the communication stream: a copy down, a host callback,
//! a copy up; no device kernels are needed.

use std::ffi::c_void;

use dipu_deviceapi::{CopyKind, DataType, Error, ErrorKind, ReduceOp, Result};

use super::comms::Comm;
use super::Inner;

/// How two elements combine under an operator (`Avg` sums, then divides).
type Combine = fn(f64, f64) -> f64;

/// The combination for `op`, if there is one.
fn combiner(op: ReduceOp) -> Option<Combine> {
    Some(match op {
        ReduceOp::Sum | ReduceOp::Avg => |a, b| a + b,
        ReduceOp::Prod => |a, b| a * b,
        ReduceOp::Min => f64::min,
        ReduceOp::Max => f64::max,
        _ => return None,
    })
}

/// Reduces, in place, the `ranks` rows of `count` `f64` at `at` into the
/// first row: element by element over the rows in rank order, then divided
/// by `ranks` when `average`.
fn reduce_rows(at: usize, count: usize, ranks: usize, combine: Combine, average: bool) {
    // SAFETY: `at` is the pinned staging buffer of `ranks * count` f64,
    // ours alone while the stream runs this callback; pinned allocations
    // are aligned for every type.
    let rows = unsafe { std::slice::from_raw_parts_mut(at as *mut f64, ranks * count) };
    let (first, rest) = rows.split_at_mut(count);
    for row in rest.chunks_exact(count) {
        for (acc, &x) in first.iter_mut().zip(row) {
            *acc = combine(*acc, x);
        }
    }
    if average {
        for acc in first.iter_mut() {
            *acc /= ranks as f64;
        }
    }
}

impl Inner {
    /// The `F64` reduction of `count` elements from `send` into `recv`
    /// (all-reduce, or reduce to `root`) through an all-gather and a host
    /// reduction.
    pub(super) fn reduce_f64_gathered(
        &self,
        c: &Comm,
        (send, recv): (*const c_void, *mut c_void),
        count: usize,
        op: ReduceOp,
        root: Option<i32>,
    ) -> Result<()> {
        self.f64_gathered(c, (send, recv), count, op, root, 0..count)
    }

    /// The `F64` reduce-scatter of `flat` (one block of `block` elements
    /// per rank) into `recv`: the whole of `flat` reduced as above, and
    /// this rank's block copied up.
    pub(super) fn reduce_scatter_f64_gathered(
        &self,
        c: &Comm,
        (flat, recv): (*const c_void, *mut c_void),
        block: usize,
        op: ReduceOp,
    ) -> Result<()> {
        let ranks = usize::try_from(c.size).unwrap_or(1).max(1);
        let rank = usize::try_from(c.rank).unwrap_or(0);
        let mine = rank * block..(rank + 1) * block;
        self.f64_gathered(c, (flat, recv), block * ranks, op, None, mine)
    }

    /// Gathers every rank's `count` elements at `send`, reduces them on the
    /// host, and copies the elements `part` of the result to `recv` (on
    /// every rank, or on `root` only).
    fn f64_gathered(
        &self,
        c: &Comm,
        (send, recv): (*const c_void, *mut c_void),
        count: usize,
        op: ReduceOp,
        root: Option<i32>,
        part: std::ops::Range<usize>,
    ) -> Result<()> {
        let combine = combiner(op).ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!("{op:?} of F64: the vendor has no 64-bit floats and there is no host reduction for {op:?}"),
            )
        })?;
        let average = op == ReduceOp::Avg;
        if count == 0 {
            return Ok(());
        }
        let ranks = usize::try_from(c.size).unwrap_or(1).max(1);
        let row = count * DataType::F64.size_in_bytes();
        let all = row * ranks;
        let scratch = self.runtime.allocate(all, c.stream)?;
        // SAFETY: `send` holds `row` bytes of live device memory of the
        // group's device (the buffer contract) and `scratch` `ranks * row`,
        // the stream's own allocation; the communicator is ours.
        unsafe {
            c.all_gather((send, scratch.as_ptr()), row, DataType::U8)?;
        }
        if root.is_some_and(|r| r != c.rank) {
            // Not the root: its buffer stays as it was. The scratch is held
            // until the gather is queued (the end of a coalesced batch).
            return self.after_group(c, move |_, _| {
                drop(scratch);
                Ok(())
            });
        }
        let staging = self.runtime.allocate_host(all)?;
        let (host, dst) = (staging.as_ptr() as usize, recv as usize);
        let width = DataType::F64.size_in_bytes();
        let (from, bytes) = (host + part.start * width, part.len() * width);
        // After the gather, which a coalesced batch launches at its end.
        self.after_group(c, move |g, c| {
            let (scratch, staging) = (scratch, staging);
            let stream = c.stream.raw();
            // SAFETY: `scratch` holds `all` bytes and `dst` `bytes` bytes of
            // live device memory of the group's device; `host` is pinned
            // memory of `all` bytes (`part` lies in its first row) that
            // outlives the queued work (its free waits for the event
            // recorded below).
            unsafe {
                g.api.memcpy_async(
                    host as *mut c_void,
                    scratch.as_ptr(),
                    all,
                    CopyKind::DeviceToHost,
                    stream,
                )?;
                g.api.launch_host_func(
                    stream,
                    Box::new(move || reduce_rows(host, count, ranks, combine, average)),
                )?;
                g.api.memcpy_async(
                    dst as *mut c_void,
                    from as *const c_void,
                    bytes,
                    CopyKind::HostToDevice,
                    stream,
                )?;
            }
            // Freed once the stream has passed this work: the scratch is
            // the stream's own allocation, the staging waits for an event.
            drop(scratch);
            staging.record_event(c.stream)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_reduce_in_rank_order_without_rounding_to_f32() {
        let tiny = f64::powi(2.0, -40); // lost in f32 next to 1.0
        for (op, want) in [
            (ReduceOp::Sum, [3.0 + 6.0 * tiny, -3.0]),
            (ReduceOp::Avg, [1.0 + 2.0 * tiny, -1.0]),
            (
                ReduceOp::Prod,
                [(1.0 + tiny) * (1.0 + 2.0 * tiny) * (1.0 + 3.0 * tiny), -1.0],
            ),
            (ReduceOp::Min, [1.0 + tiny, -1.0]),
            (ReduceOp::Max, [1.0 + 3.0 * tiny, -1.0]),
        ] {
            let mut rows = [
                1.0 + tiny,
                -1.0,
                1.0 + 2.0 * tiny,
                -1.0,
                1.0 + 3.0 * tiny,
                -1.0,
            ];
            let combine = combiner(op).unwrap();
            reduce_rows(
                rows.as_mut_ptr() as usize,
                2,
                3,
                combine,
                op == ReduceOp::Avg,
            );
            assert_eq!(rows[..2], want, "{op:?}");
        }
    }
}
