//! 16-bit integer reductions on a vendor without a 16-bit integer type
//! (NCCL has none, and its vendor answers `Unsupported`, as the vendor
//! guide asks): the process group widens the buffer to `I32` on the
//! communication stream, reduces that, and narrows the result back, as
//! ProcessGroupNCCL's callers would expect an `int16` all-reduce to work.
//! Sums and products wrap as `int16` arithmetic does (the low 16 bits of
//! the 32-bit result); `Min`, `Max` and `Avg` are exact.
//!
//! The conversions are done on the host through pinned memory, queued on
//! the communication stream (as `Avg` emulation does): a copy down, a
//! host callback, a copy up; no device kernels are needed.

use std::ffi::c_void;

use dipu_deviceapi::{CopyKind, DataType, ReduceOp, Result};

use super::comms::Comm;
use super::Inner;

/// Widens `count` `i16` at `at` to `i32` in place (the buffer has room for
/// the `i32`s): from the last element down, so nothing is read after it
/// was overwritten.
fn widen(at: usize, count: usize) {
    let from = at as *const i16;
    let to = at as *mut i32;
    for i in (0..count).rev() {
        // SAFETY: `at` is the pinned staging buffer of `count` i32s, ours
        // alone while the stream runs this callback, and aligned for i32;
        // element i's i32 slot starts at or after its i16 slot, and every
        // i16 above i was read before (descending order).
        unsafe { to.add(i).write(i32::from(from.add(i).read())) };
    }
}

/// Narrows `count` `i32` at `at` to `i16` in place (wrapping): from the
/// first element up.
fn narrow(at: usize, count: usize) {
    let from = at as *const i32;
    let to = at as *mut i16;
    for i in 0..count {
        // SAFETY: as in `widen`; element i's i16 slot ends at or before its
        // i32 slot, and every i32 below i was read before (ascending).
        unsafe { to.add(i).write(from.add(i).read() as i16) };
    }
}

/// Queues on `comm`'s stream: `bytes` from `src` (on `kind`'s source side)
/// to the pinned `host`, `convert(host, count)`, and the result back to
/// `dst`: `up` bytes of it.
#[allow(clippy::too_many_arguments)]
fn through_host(
    group: &Inner,
    comm: &Comm,
    src: *const c_void,
    down: usize,
    host: usize,
    convert: fn(usize, usize),
    count: usize,
    dst: *mut c_void,
    up: usize,
) -> Result<()> {
    let stream = comm.stream.raw();
    // SAFETY: `src` holds `down` and `dst` `up` bytes of live device memory
    // of the group's device (the buffer contract, or our own scratch), and
    // `host` is pinned memory of `count` i32s that outlives the queued work
    // (its free waits for an event recorded after it).
    unsafe {
        group.api.memcpy_async(
            host as *mut c_void,
            src,
            down,
            CopyKind::DeviceToHost,
            stream,
        )?;
        group
            .api
            .launch_host_func(stream, Box::new(move || convert(host, count)))?;
        group.api.memcpy_async(
            dst,
            host as *const c_void,
            up,
            CopyKind::HostToDevice,
            stream,
        )?;
    }
    Ok(())
}

impl Inner {
    /// The `I16` reduction of `count` elements from `send` into `recv`
    /// (all-reduce, or reduce to `root`) through an `I32` scratch buffer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduce_i16_widened(
        &self,
        c: &Comm,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        op: ReduceOp,
        root: Option<i32>,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let wide = count * 4;
        let scratch = self.runtime.allocate(wide, c.stream)?;
        let staging = self.runtime.allocate_host(wide)?;
        let host = staging.as_ptr() as usize;
        through_host(
            self,
            c,
            send,
            count * 2,
            host,
            widen,
            count,
            scratch.as_ptr(),
            wide,
        )?;
        let s = scratch.as_ptr();
        self.reduce_into(c, s, s, count, DataType::I32, op, root)?;
        if root.is_some_and(|r| r != c.rank) {
            // Not the root: its buffer stays as it was. The scratch is held
            // until the reduction is queued (the end of a coalesced batch).
            return self.after_group(c, move |_, c| {
                drop(scratch);
                staging.record_event(c.stream)
            });
        }
        let (at, dst) = (s as usize, recv as usize);
        // After the reduction, which a coalesced batch launches at its end.
        self.after_group(c, move |g, c| {
            let (scratch, staging) = (scratch, staging);
            let at = at as *const c_void;
            through_host(
                g,
                c,
                at,
                wide,
                host,
                narrow,
                count,
                dst as *mut c_void,
                count * 2,
            )?;
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
    fn widening_and_narrowing_round_trip_and_wrap() {
        let mut buf = [0i32; 4];
        let src: [i16; 4] = [-32768, -1, 7, 32767];
        // SAFETY: `buf` has room for 4 i16s.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buf.as_mut_ptr().cast(), 4) };
        widen(buf.as_mut_ptr() as usize, 4);
        assert_eq!(buf, [-32768, -1, 7, 32767]);
        buf = [40000, -40000, 65536 + 5, -3];
        narrow(buf.as_mut_ptr() as usize, 4);
        // SAFETY: `buf` now holds 4 i16s at its start.
        let got = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<i16>(), 4) };
        assert_eq!(got, [40000u16 as i16, (-40000i32) as i16, 5, -3]);
    }
}
