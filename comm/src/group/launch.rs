//! How an operation is queued: [`ProcessGroup::launch`] (checks, the
//! communicator, stream ordering, events, `record_stream`), and the vendor
//! calls the collectives share (reductions with `Avg` emulation, groups,
//! point-to-point, copies, scratch memory).

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dipu_deviceapi::{CopyKind, DataType, Error, ErrorKind, ReduceOp, Result};
use dipu_stream::{DeviceGuard, Event, EventFlag};

use super::comms::{Comm, CommKey};
use super::{emulate, Buffer, Inner, ProcessGroup, Work};

const AVG_UNKNOWN: u8 = 0;
const AVG_NATIVE: u8 = 1;
const AVG_EMULATED: u8 = 2;

/// Who an operation talks to.
#[derive(Clone, Copy)]
pub(super) enum Peers {
    /// Every rank.
    All,
    /// One other rank (a standalone send or recv).
    One(i32),
}

impl ProcessGroup {
    /// Queues an operation: checks `buffers` are on the group's device,
    /// picks the communicator, `record_stream`s `buffers` onto its stream,
    /// orders that stream after the caller's current stream, runs `body`
    /// (the vendor calls), records the end event and hands the work to the
    /// watchdog.
    pub(super) fn launch(
        &self,
        name: &str,
        detail: String,
        peers: Peers,
        buffers: &[&Buffer],
        body: impl FnOnce(&Inner, &Comm) -> Result<()>,
    ) -> Result<Work> {
        let inner = &self.inner;
        let seq = inner.seq.fetch_add(1, Ordering::Relaxed);
        let what = format!("{name} #{seq} ({detail})");
        let context = |e: Error| e.context(format!("{}: {what}", inner.label()));
        inner.check_healthy().map_err(context)?;
        for b in buffers {
            if b.device() != inner.device {
                return Err(context(Error::invalid_argument(format!(
                    "a buffer is on device {} but the group runs on device {}",
                    b.device(),
                    inner.device
                ))));
            }
        }
        let _guard = DeviceGuard::new(inner.ctx, inner.device).map_err(context)?;
        let mut coalescing = inner.coalescing.lock();
        if let Some(batch) = coalescing.as_mut() {
            if batch.thread != std::thread::current().id() {
                return Err(context(Error::invalid_argument(
                    "a coalesced batch is open on another thread; a batch belongs to the thread \
                     that started it",
                )));
            }
            let comm = Arc::clone(
                batch
                    .comm
                    .as_ref()
                    .expect("an open batch has its communicator"),
            );
            record_streams(inner, &comm, buffers).map_err(context)?;
            body(inner, &comm).map_err(context)?;
            return Ok(inner.work(Arc::clone(&batch.work)));
        }
        drop(coalescing);
        let key = match peers {
            Peers::All => CommKey::All,
            Peers::One(peer) => CommKey::Pair(inner.rank.min(peer), inner.rank.max(peer)),
        };
        let comm = inner.comm(key).map_err(context)?;
        // Everything that may block (the allocator's lock) comes before the
        // vendor calls, and the work is watched as soon as they are queued:
        // an operation waiting on a peer is never left outside the
        // watchdog's reach while this thread waits on something else.
        record_streams(inner, &comm, buffers).map_err(context)?;
        let start = inner.order_after_current(&comm).map_err(context)?;
        body(inner, &comm).map_err(context)?;
        let mut end = Event::new(inner.ctx, EventFlag::Timing);
        end.record(&comm.stream).map_err(context)?;
        let state = inner.work_state(what, vec![comm]);
        *state.events.lock() = Some((start, end));
        inner.watch(Arc::clone(&state));
        Ok(inner.work(state))
    }
}

fn record_streams(inner: &Inner, comm: &Comm, buffers: &[&Buffer]) -> Result<()> {
    for b in buffers {
        if let Some(base) = b.allocation() {
            inner.runtime.record_stream_raw(base, comm.stream)?;
        }
    }
    Ok(())
}

/// The operator the vendor is given, and whether a division must follow.
#[derive(Clone, Copy)]
pub(super) struct VendorOp(pub(super) ReduceOp, pub(super) bool);

impl Inner {
    /// `op` as the vendor will run it: `Avg` becomes `Sum` + division when
    /// the vendor has been found not to average.
    pub(super) fn vendor_op(&self, op: ReduceOp) -> VendorOp {
        if op == ReduceOp::Avg && self.native_avg.load(Ordering::Relaxed) == AVG_EMULATED {
            VendorOp(ReduceOp::Sum, true)
        } else {
            VendorOp(op, false)
        }
    }

    /// Runs `call` with the vendor's operator for `op`, learning on the
    /// first `Avg` whether the vendor averages natively.
    pub(super) fn with_op(
        &self,
        op: ReduceOp,
        call: impl Fn(ReduceOp) -> Result<()>,
    ) -> Result<VendorOp> {
        let chosen = self.vendor_op(op);
        match call(chosen.0) {
            Err(e) if e.kind() == ErrorKind::Unsupported && op == ReduceOp::Avg && !chosen.1 => {
                self.native_avg.store(AVG_EMULATED, Ordering::Relaxed);
                tracing::debug!(target: "dipu::comm", "the vendor does not average ({e}); emulating");
                call(ReduceOp::Sum).map(|()| VendorOp(ReduceOp::Sum, true))
            }
            Err(e) => Err(e),
            Ok(()) => {
                if op == ReduceOp::Avg && !chosen.1 {
                    let _ = self.native_avg.compare_exchange(
                        AVG_UNKNOWN,
                        AVG_NATIVE,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                Ok(chosen)
            }
        }
    }

    /// Divides by the world size when `op` was an emulated average.
    pub(super) fn finish_avg(
        &self,
        c: &Comm,
        op: VendorOp,
        ptr: *mut c_void,
        count: usize,
        dtype: DataType,
    ) -> Result<()> {
        if !op.1 {
            return Ok(());
        }
        let at = ptr as usize;
        self.after_group(c, move |g, c| {
            emulate::divide_on_host(g, c, at as *mut c_void, count, dtype, c.size)
        })
    }

    /// Runs `f` once the vendor has been given the operation's collectives:
    /// now, or at the end of the open coalesced batch (the vendor launches
    /// a batch's collectives only at its end).
    pub(super) fn after_group(
        &self,
        c: &Comm,
        f: impl FnOnce(&Inner, &Comm) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        if self.batch_open.load(Ordering::Acquire) {
            self.after_batch.lock().push(Box::new(f));
            Ok(())
        } else {
            f(self, c)
        }
    }

    /// All-reduce (`root` None) or reduce to `root` of `count` elements.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduce_into(
        &self,
        c: &Comm,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        root: Option<i32>,
    ) -> Result<()> {
        if dtype == DataType::I16 && self.no_i16.load(Ordering::Relaxed) {
            return self.reduce_i16_widened(c, send, recv, count, op, root);
        }
        if dtype == DataType::F64 && self.no_f64.load(Ordering::Relaxed) {
            return self.reduce_f64_gathered(c, (send, recv), count, op, root);
        }
        let avg_before = self.native_avg.load(Ordering::Relaxed);
        let chosen = self.with_op(op, |vop| {
            // SAFETY: `send`/`recv` are live device memory of the group's
            // device (the buffer contract); the stream is the communicator's.
            unsafe {
                match root {
                    None => c.all_reduce((send, recv), count, dtype, vop),
                    Some(r) => c.reduce((send, recv), count, dtype, (vop, r)),
                }
            }
        });
        let chosen = match chosen {
            // No 16-bit integers (NCCL): widened to I32 from now on. The
            // refusal says nothing about averaging.
            Err(e) if e.kind() == ErrorKind::Unsupported && dtype == DataType::I16 => {
                self.native_avg.store(avg_before, Ordering::Relaxed);
                self.no_i16.store(true, Ordering::Relaxed);
                tracing::debug!(target: "dipu::comm", "the vendor has no I16 ({e}); widening to I32");
                return self.reduce_i16_widened(c, send, recv, count, op, root);
            }
            // No 64-bit floats (CNCL): gathered and reduced on the host
            // from now on.
            Err(e) if e.kind() == ErrorKind::Unsupported && dtype == DataType::F64 => {
                self.learn_no_f64(avg_before, &e);
                return self.reduce_f64_gathered(c, (send, recv), count, op, root);
            }
            r => r?,
        };
        if root.is_none_or(|r| r == c.rank) {
            self.finish_avg(c, chosen, recv, count, dtype)?;
        }
        Ok(())
    }

    pub(super) fn reduce_scatter_into(
        &self,
        c: &Comm,
        flat: *const c_void,
        o: Buffer,
        op: ReduceOp,
    ) -> Result<()> {
        let f64_gathered =
            |g: &Self| g.reduce_scatter_f64_gathered(c, (flat, o.as_ptr()), o.count(), op);
        if o.dtype() == DataType::F64 && self.no_f64.load(Ordering::Relaxed) {
            return f64_gathered(self);
        }
        let avg_before = self.native_avg.load(Ordering::Relaxed);
        let chosen = self.with_op(op, |vop| {
            // SAFETY: `flat` holds world_size blocks of `o`'s size, both live
            // device memory of the group's device.
            unsafe { c.reduce_scatter((flat, o.as_ptr()), o.count(), o.dtype(), vop) }
        });
        let chosen = match chosen {
            // No 64-bit floats (CNCL): as for the all-reduce above.
            Err(e) if e.kind() == ErrorKind::Unsupported && o.dtype() == DataType::F64 => {
                self.learn_no_f64(avg_before, &e);
                return f64_gathered(self);
            }
            r => r?,
        };
        self.finish_avg(c, chosen, o.as_ptr(), o.count(), o.dtype())
    }

    /// Remembers the vendor's refusal `e` of an `F64` reduction: such
    /// reductions are gathered and reduced on the host from now on. The
    /// refused call said nothing about averaging, so what was known before
    /// it (`avg_before`) is put back.
    fn learn_no_f64(&self, avg_before: u8, e: &Error) {
        self.native_avg.store(avg_before, Ordering::Relaxed);
        self.no_f64.store(true, Ordering::Relaxed);
        tracing::debug!(target: "dipu::comm", "the vendor has no F64 ({e}); gathering and reducing on the host");
    }

    /// Runs `f` between `c`'s group start and end (the end is called even
    /// when `f` fails, so the group state stays balanced).
    pub(super) fn grouped(&self, c: &Comm, f: impl FnOnce() -> Result<()>) -> Result<()> {
        c.group_start()?;
        let result = f();
        let end = c.group_end();
        result.and(end)
    }

    pub(super) fn send_raw(
        &self,
        c: &Comm,
        ptr: *const c_void,
        count: usize,
        dtype: DataType,
        peer: i32,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        // SAFETY: `ptr` is `count` elements of live device memory, which a
        // send only reads.
        unsafe { c.point_to_point(false, ptr.cast_mut(), (count, dtype), peer) }
    }

    pub(super) fn recv_raw(
        &self,
        c: &Comm,
        ptr: *mut c_void,
        count: usize,
        dtype: DataType,
        peer: i32,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        // SAFETY: `ptr` is `count` elements of live device memory.
        unsafe { c.point_to_point(true, ptr, (count, dtype), peer) }
    }

    /// The rank of group rank `peer` within communicator `c`.
    pub(super) fn comm_rank(&self, c: &Comm, peer: i32) -> i32 {
        match c.key {
            CommKey::All => peer,
            CommKey::Pair(a, _) => i32::from(peer != a),
        }
    }

    /// A device copy on the communicator's stream.
    pub(super) fn copy(
        &self,
        c: &Comm,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 || std::ptr::eq(dst, src) {
            return Ok(());
        }
        // SAFETY: both ranges are live device memory (the buffer contract or
        // scratch allocated for this stream).
        unsafe {
            self.api
                .memcpy_async(dst, src, bytes, CopyKind::DeviceToDevice, c.stream.raw())
        }
    }

    /// Device memory for one operation, allocated for the communicator's
    /// stream: dropping it after queuing the work is safe, since the
    /// allocator reuses it only for later work on that same stream.
    pub(super) fn scratch(&self, c: &Comm, bytes: usize) -> Result<dipu_runtime::DeviceBuffer> {
        self.runtime.allocate(bytes, c.stream)
    }
}
