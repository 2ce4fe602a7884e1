//! The collectives of [`ProcessGroup`], c10d's set: each checks its
//! arguments, then queues vendor calls on a communicator's stream through
//! [`ProcessGroup::launch`].

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
enum Peers {
    /// Every rank.
    All,
    /// One other rank (a standalone send or recv).
    One(i32),
}

impl ProcessGroup {
    /// Queues an operation: checks `buffers` are on the group's device,
    /// picks the communicator, orders its stream after the caller's current
    /// stream, runs `body` (the vendor calls), records the end event, and
    /// `record_stream`s `buffers` onto the communicator's stream.
    fn launch(
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
            body(inner, &comm).map_err(context)?;
            record_streams(inner, &comm, buffers).map_err(context)?;
            return Ok(inner.work(Arc::clone(&batch.work)));
        }
        drop(coalescing);
        let key = match peers {
            Peers::All => CommKey::All,
            Peers::One(peer) => CommKey::Pair(inner.rank.min(peer), inner.rank.max(peer)),
        };
        let comm = inner.comm(key).map_err(context)?;
        let start = inner.order_after_current(&comm).map_err(context)?;
        body(inner, &comm).map_err(context)?;
        let mut end = Event::new(inner.ctx, EventFlag::Timing);
        end.record(&comm.stream).map_err(context)?;
        record_streams(inner, &comm, buffers).map_err(context)?;
        let state = inner.work_state(what, vec![comm]);
        *state.events.lock() = Some((start, end));
        inner.watch(Arc::clone(&state));
        Ok(inner.work(state))
    }

    /// Reduces `buffer` in place across all ranks with `op` (c10d
    /// `allreduce`). `Avg` on a vendor without it is a sum then a division.
    pub fn all_reduce(&self, buffer: &Buffer, op: ReduceOp) -> Result<Work> {
        let b = *buffer;
        self.launch(
            "all_reduce",
            format!("{}, {op:?}", b.describe()),
            Peers::All,
            &[buffer],
            |g, c| g.reduce_into(c, b.as_ptr(), b.as_ptr(), b.count(), b.dtype(), op, None),
        )
    }

    /// Copies `root`'s `buffer` into every rank's `buffer`.
    pub fn broadcast(&self, buffer: &Buffer, root: i32) -> Result<Work> {
        self.check_root(root)?;
        let b = *buffer;
        self.launch(
            "broadcast",
            format!("{}, root {root}", b.describe()),
            Peers::All,
            &[buffer],
            // SAFETY: `b` is live device memory of the group's device (the
            // buffer's contract), queued on the communicator's own stream.
            |g, c| unsafe {
                g.api.broadcast(
                    b.as_ptr(),
                    b.as_ptr(),
                    b.count(),
                    b.dtype(),
                    root,
                    c.handle,
                    c.stream.raw(),
                )
            },
        )
    }

    /// Reduces `buffer` across ranks into `root`'s `buffer` (the others'
    /// buffers are left as they were).
    pub fn reduce(&self, buffer: &Buffer, root: i32, op: ReduceOp) -> Result<Work> {
        self.check_root(root)?;
        let b = *buffer;
        self.launch(
            "reduce",
            format!("{}, {op:?}, root {root}", b.describe()),
            Peers::All,
            &[buffer],
            |g, c| {
                g.reduce_into(
                    c,
                    b.as_ptr(),
                    b.as_ptr(),
                    b.count(),
                    b.dtype(),
                    op,
                    Some(root),
                )
            },
        )
    }

    /// Gathers every rank's `input` into `outputs[rank]` on every rank.
    /// Inputs may differ in size between ranks: `outputs[r]` has rank r's
    /// size.
    pub fn all_gather(&self, outputs: &[Buffer], input: &Buffer) -> Result<Work> {
        self.check_list("all_gather outputs", outputs, input)?;
        let me = self.inner.rank as usize;
        same_count(
            "all_gather: this rank's output",
            &outputs[me],
            input.count(),
        )?;
        let equal = outputs.iter().all(|o| o.count() == input.count());
        let i = *input;
        let outs = outputs.to_vec();
        let mut buffers: Vec<&Buffer> = outputs.iter().collect();
        buffers.push(input);
        self.launch(
            "all_gather",
            format!(
                "{} from each of {} ranks{}",
                i.describe(),
                outs.len(),
                uneven(equal)
            ),
            Peers::All,
            &buffers,
            |g, c| {
                if equal {
                    let flat = g.scratch(c, i.bytes() * outs.len())?;
                    // SAFETY: `i` is live device memory (the buffer's
                    // contract) and `flat` holds one input per rank.
                    unsafe {
                        g.api.all_gather(
                            i.as_ptr(),
                            flat.as_ptr(),
                            i.count(),
                            i.dtype(),
                            c.handle,
                            c.stream.raw(),
                        )?;
                    }
                    g.after_group(c, move |g, c| {
                        for (r, out) in outs.iter().enumerate() {
                            g.copy(
                                c,
                                out.as_ptr(),
                                flat.as_ptr().wrapping_byte_add(r * i.bytes()),
                                i.bytes(),
                            )?;
                        }
                        drop(flat);
                        Ok(())
                    })
                } else {
                    g.grouped(|| {
                        for (r, out) in outs.iter().enumerate() {
                            let src = if r == g.rank as usize {
                                i.as_ptr()
                            } else {
                                out.as_ptr()
                            };
                            // SAFETY: as above; on the root `src` is the input.
                            unsafe {
                                g.api.broadcast(
                                    src,
                                    out.as_ptr(),
                                    out.count(),
                                    out.dtype(),
                                    r as i32,
                                    c.handle,
                                    c.stream.raw(),
                                )?;
                            }
                        }
                        Ok(())
                    })
                }
            },
        )
    }

    /// Gathers every rank's `input` into the flat `output`, rank after
    /// rank (c10d `_allgather_base` / `all_gather_into_tensor`).
    pub fn all_gather_into(&self, output: &Buffer, input: &Buffer) -> Result<Work> {
        self.check_flat("all_gather_into", output, input, output, input.count())?;
        let (o, i) = (*output, *input);
        self.launch(
            "all_gather_into",
            format!("{} from each rank", i.describe()),
            Peers::All,
            &[output, input],
            // SAFETY: both are live device memory of the group's device and
            // `o` holds world_size inputs (checked above).
            |g, c| unsafe {
                g.api.all_gather(
                    i.as_ptr(),
                    o.as_ptr(),
                    i.count(),
                    i.dtype(),
                    c.handle,
                    c.stream.raw(),
                )
            },
        )
    }

    /// Reduces `inputs[r]` across ranks into rank r's `output`. Sizes may
    /// differ between r: `inputs[r]` has the size of rank r's output.
    pub fn reduce_scatter(&self, output: &Buffer, inputs: &[Buffer], op: ReduceOp) -> Result<Work> {
        self.check_list("reduce_scatter inputs", inputs, output)?;
        let me = self.inner.rank as usize;
        same_count(
            "reduce_scatter: this rank's input",
            &inputs[me],
            output.count(),
        )?;
        let equal = inputs.iter().all(|x| x.count() == output.count());
        let o = *output;
        let ins = inputs.to_vec();
        let mut buffers: Vec<&Buffer> = inputs.iter().collect();
        buffers.push(output);
        self.launch(
            "reduce_scatter",
            format!(
                "{} to each of {} ranks, {op:?}{}",
                o.describe(),
                ins.len(),
                uneven(equal)
            ),
            Peers::All,
            &buffers,
            |g, c| {
                if equal {
                    let flat = g.scratch(c, o.bytes() * ins.len())?;
                    for (r, x) in ins.iter().enumerate() {
                        g.copy(
                            c,
                            flat.as_ptr().wrapping_byte_add(r * o.bytes()),
                            x.as_ptr(),
                            o.bytes(),
                        )?;
                    }
                    g.reduce_scatter_into(c, flat.as_ptr(), o, op)
                } else {
                    let op = g.vendor_op(op);
                    g.grouped(|| {
                        for (r, x) in ins.iter().enumerate() {
                            let recv = if r == g.rank as usize {
                                o.as_ptr()
                            } else {
                                x.as_ptr()
                            };
                            // SAFETY: live device buffers (the buffer contract).
                            unsafe {
                                g.api.reduce(
                                    x.as_ptr(),
                                    recv,
                                    x.count(),
                                    x.dtype(),
                                    op.0,
                                    r as i32,
                                    c.handle,
                                    c.stream.raw(),
                                )?;
                            }
                        }
                        Ok(())
                    })?;
                    g.finish_avg(c, op, o.as_ptr(), o.count(), o.dtype())
                }
            },
        )
    }

    /// Reduces the flat `input` (world_size blocks of `output`'s size)
    /// across ranks; rank r gets block r (c10d `_reduce_scatter_base` /
    /// `reduce_scatter_tensor`).
    pub fn reduce_scatter_from(
        &self,
        output: &Buffer,
        input: &Buffer,
        op: ReduceOp,
    ) -> Result<Work> {
        self.check_flat("reduce_scatter_from", input, output, input, output.count())?;
        let (o, i) = (*output, *input);
        self.launch(
            "reduce_scatter_from",
            format!("{} to each rank, {op:?}", o.describe()),
            Peers::All,
            &[output, input],
            |g, c| g.reduce_scatter_into(c, i.as_ptr(), o, op),
        )
    }

    /// Sends block r of `input` to rank r and receives rank r's block for
    /// this rank into block r of `output`. Without splits, blocks are equal
    /// (`count / world_size`); with them, `input_splits[r]` and
    /// `output_splits[r]` are element counts.
    pub fn all_to_all(
        &self,
        output: &Buffer,
        input: &Buffer,
        output_splits: Option<&[usize]>,
        input_splits: Option<&[usize]>,
    ) -> Result<Work> {
        same_dtype("all_to_all", output, input)?;
        let outs = self.splits("all_to_all output", output, output_splits)?;
        let ins = self.splits("all_to_all input", input, input_splits)?;
        let (o, i) = (*output, *input);
        let size = o.dtype().size_in_bytes();
        self.launch(
            "all_to_all",
            format!("{} in, {} out", i.describe(), o.describe()),
            Peers::All,
            &[output, input],
            |g, c| {
                let me = g.rank as usize;
                g.copy(
                    c,
                    o.as_ptr().wrapping_byte_add(outs[me].0 * size),
                    i.as_ptr().wrapping_byte_add(ins[me].0 * size),
                    ins[me].1.min(outs[me].1) * size,
                )?;
                g.grouped(|| {
                    for peer in (0..g.size as usize).filter(|p| *p != me) {
                        g.send_raw(
                            c,
                            i.as_ptr().wrapping_byte_add(ins[peer].0 * size),
                            ins[peer].1,
                            i.dtype(),
                            peer as i32,
                        )?;
                        g.recv_raw(
                            c,
                            o.as_ptr().wrapping_byte_add(outs[peer].0 * size),
                            outs[peer].1,
                            o.dtype(),
                            peer as i32,
                        )?;
                    }
                    Ok(())
                })
            },
        )
    }

    /// Gathers every rank's `input` into `outputs` on `root` (`outputs` is
    /// world_size buffers on the root, empty elsewhere).
    pub fn gather(&self, outputs: &[Buffer], input: &Buffer, root: i32) -> Result<Work> {
        self.check_root(root)?;
        let on_root = self.inner.rank == root;
        if on_root {
            self.check_list("gather outputs", outputs, input)?;
            same_count(
                "gather: the root's output",
                &outputs[root as usize],
                input.count(),
            )?;
        } else if !outputs.is_empty() {
            return Err(Error::invalid_argument(format!(
                "gather: only the root (rank {root}) passes outputs; rank {} passed {}",
                self.inner.rank,
                outputs.len()
            )));
        }
        let i = *input;
        let outs = outputs.to_vec();
        let mut buffers: Vec<&Buffer> = outputs.iter().collect();
        buffers.push(input);
        self.launch(
            "gather",
            format!("{}, root {root}", i.describe()),
            Peers::All,
            &buffers,
            |g, c| {
                if !on_root {
                    return g.grouped(|| g.send_raw(c, i.as_ptr(), i.count(), i.dtype(), root));
                }
                g.copy(c, outs[root as usize].as_ptr(), i.as_ptr(), i.bytes())?;
                g.grouped(|| {
                    for (r, out) in outs.iter().enumerate().filter(|(r, _)| *r as i32 != root) {
                        g.recv_raw(c, out.as_ptr(), out.count(), out.dtype(), r as i32)?;
                    }
                    Ok(())
                })
            },
        )
    }

    /// Sends `inputs[r]` from `root` into rank r's `output` (`inputs` is
    /// world_size buffers on the root, empty elsewhere).
    pub fn scatter(&self, output: &Buffer, inputs: &[Buffer], root: i32) -> Result<Work> {
        self.check_root(root)?;
        let on_root = self.inner.rank == root;
        if on_root {
            self.check_list("scatter inputs", inputs, output)?;
            same_count(
                "scatter: the root's input",
                &inputs[root as usize],
                output.count(),
            )?;
        } else if !inputs.is_empty() {
            return Err(Error::invalid_argument(format!(
                "scatter: only the root (rank {root}) passes inputs; rank {} passed {}",
                self.inner.rank,
                inputs.len()
            )));
        }
        let o = *output;
        let ins = inputs.to_vec();
        let mut buffers: Vec<&Buffer> = inputs.iter().collect();
        buffers.push(output);
        self.launch(
            "scatter",
            format!("{}, root {root}", o.describe()),
            Peers::All,
            &buffers,
            |g, c| {
                if !on_root {
                    return g.grouped(|| g.recv_raw(c, o.as_ptr(), o.count(), o.dtype(), root));
                }
                g.copy(c, o.as_ptr(), ins[root as usize].as_ptr(), o.bytes())?;
                g.grouped(|| {
                    for (r, x) in ins.iter().enumerate().filter(|(r, _)| *r as i32 != root) {
                        g.send_raw(c, x.as_ptr(), x.count(), x.dtype(), r as i32)?;
                    }
                    Ok(())
                })
            },
        )
    }

    /// Sends `buffer` to rank `dst`, which must post a matching
    /// [`ProcessGroup::recv`]. Outside a coalesced batch it uses the pair's
    /// own communicator, so other ranks need not take part. `tag` is kept
    /// for c10d's signature; as with NCCL, matching is by order, not tag.
    pub fn send(&self, buffer: &Buffer, dst: i32, tag: i32) -> Result<Work> {
        self.check_peer(dst)?;
        let b = *buffer;
        self.launch(
            "send",
            format!("{} to rank {dst}, tag {tag}", b.describe()),
            Peers::One(dst),
            &[buffer],
            |g, c| g.send_raw(c, b.as_ptr(), b.count(), b.dtype(), g.comm_rank(c, dst)),
        )
    }

    /// Receives into `buffer` what rank `src` sends (see [`ProcessGroup::send`]).
    pub fn recv(&self, buffer: &Buffer, src: i32, tag: i32) -> Result<Work> {
        self.check_peer(src)?;
        let b = *buffer;
        self.launch(
            "recv",
            format!("{} from rank {src}, tag {tag}", b.describe()),
            Peers::One(src),
            &[buffer],
            |g, c| g.recv_raw(c, b.as_ptr(), b.count(), b.dtype(), g.comm_rank(c, src)),
        )
    }

    /// Waits on the host until every rank has reached the barrier (an
    /// all-reduce of one element, as c10d does), up to the group's timeout.
    pub fn barrier(&self) -> Result<()> {
        let inner = &self.inner;
        let stream = inner.ctx.current_stream(inner.device)?;
        let token = inner.runtime.allocate(4, stream)?;
        token.fill(0, Some(stream))?;
        let buffer = Buffer::from_device_buffer(&token, DataType::I32)?;
        let work = self.all_reduce(&buffer, ReduceOp::Sum)?;
        drop(token);
        work.wait_host(inner.options.timeout)
    }

    fn check_root(&self, root: i32) -> Result<()> {
        if (0..self.inner.size).contains(&root) {
            Ok(())
        } else {
            Err(Error::invalid_argument(format!(
                "root {root} is not a rank of a group of {}",
                self.inner.size
            )))
        }
    }

    fn check_peer(&self, peer: i32) -> Result<()> {
        self.check_root(peer)?;
        if peer == self.inner.rank {
            return Err(Error::invalid_argument(format!(
                "rank {peer} cannot send to or receive from itself"
            )));
        }
        Ok(())
    }

    /// A list of one buffer per rank, each of `like`'s type.
    fn check_list(&self, what: &str, list: &[Buffer], like: &Buffer) -> Result<()> {
        if list.len() != self.inner.size as usize {
            return Err(Error::invalid_argument(format!(
                "{what}: {} buffers for a group of {} ranks",
                list.len(),
                self.inner.size
            )));
        }
        list.iter().try_for_each(|b| same_dtype(what, b, like))
    }

    /// `big` holds world_size blocks of `block` elements.
    fn check_flat(
        &self,
        what: &str,
        big: &Buffer,
        small: &Buffer,
        _b: &Buffer,
        block: usize,
    ) -> Result<()> {
        same_dtype(what, big, small)?;
        let want = block.checked_mul(self.inner.size as usize);
        if want != Some(big.count()) {
            return Err(Error::invalid_argument(format!(
                "{what}: the flat buffer has {} elements, not {} x {block} (world size x block)",
                big.count(),
                self.inner.size
            )));
        }
        Ok(())
    }

    /// (offset, count) of each rank's block of `buffer`.
    fn splits(
        &self,
        what: &str,
        buffer: &Buffer,
        splits: Option<&[usize]>,
    ) -> Result<Vec<(usize, usize)>> {
        let n = self.inner.size as usize;
        let counts: Vec<usize> = match splits {
            None => {
                if buffer.count() % n != 0 {
                    return Err(Error::invalid_argument(format!(
                        "{what}: {} elements do not split evenly over {n} ranks; pass splits",
                        buffer.count()
                    )));
                }
                vec![buffer.count() / n; n]
            }
            Some(s) if s.len() != n => {
                return Err(Error::invalid_argument(format!(
                    "{what}: {} splits for a group of {n} ranks",
                    s.len()
                )))
            }
            Some(s) => s.to_vec(),
        };
        let mut offset = 0usize;
        let mut out = Vec::with_capacity(n);
        for c in counts {
            out.push((offset, c));
            offset = offset
                .checked_add(c)
                .filter(|o| *o <= buffer.count())
                .ok_or_else(|| {
                    Error::invalid_argument(format!(
                        "{what}: the splits add up to more than the buffer's {} elements",
                        buffer.count()
                    ))
                })?;
        }
        Ok(out)
    }
}

fn same_dtype(what: &str, a: &Buffer, b: &Buffer) -> Result<()> {
    if a.dtype() == b.dtype() {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "{what}: element types differ ({:?} and {:?})",
            a.dtype(),
            b.dtype()
        )))
    }
}

fn same_count(what: &str, b: &Buffer, count: usize) -> Result<()> {
    if b.count() == count {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "{what} has {} elements, but this rank contributes {count}",
            b.count()
        )))
    }
}

fn uneven(equal: bool) -> &'static str {
    if equal {
        ""
    } else {
        ", uneven"
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
struct VendorOp(ReduceOp, bool);

impl Inner {
    /// `op` as the vendor will run it: `Avg` becomes `Sum` + division when
    /// the vendor has been found not to average.
    fn vendor_op(&self, op: ReduceOp) -> VendorOp {
        if op == ReduceOp::Avg && self.native_avg.load(Ordering::Relaxed) == AVG_EMULATED {
            VendorOp(ReduceOp::Sum, true)
        } else {
            VendorOp(op, false)
        }
    }

    /// Runs `call` with the vendor's operator for `op`, learning on the
    /// first `Avg` whether the vendor averages natively.
    fn with_op(&self, op: ReduceOp, call: impl Fn(ReduceOp) -> Result<()>) -> Result<VendorOp> {
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
    fn finish_avg(
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
    fn after_group(
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
    fn reduce_into(
        &self,
        c: &Comm,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        root: Option<i32>,
    ) -> Result<()> {
        let chosen = self.with_op(op, |vop| {
            // SAFETY: `send`/`recv` are live device memory of the group's
            // device (the buffer contract); the stream is the communicator's.
            unsafe {
                match root {
                    None => {
                        self.api
                            .all_reduce(send, recv, count, dtype, vop, c.handle, c.stream.raw())
                    }
                    Some(r) => {
                        self.api
                            .reduce(send, recv, count, dtype, vop, r, c.handle, c.stream.raw())
                    }
                }
            }
        })?;
        if root.is_none_or(|r| r == c.rank) {
            self.finish_avg(c, chosen, recv, count, dtype)?;
        }
        Ok(())
    }

    fn reduce_scatter_into(
        &self,
        c: &Comm,
        flat: *const c_void,
        o: Buffer,
        op: ReduceOp,
    ) -> Result<()> {
        let chosen = self.with_op(op, |vop| {
            // SAFETY: `flat` holds world_size blocks of `o`'s size, both live
            // device memory of the group's device.
            unsafe {
                self.api.reduce_scatter(
                    flat,
                    o.as_ptr(),
                    o.count(),
                    o.dtype(),
                    vop,
                    c.handle,
                    c.stream.raw(),
                )
            }
        })?;
        self.finish_avg(c, chosen, o.as_ptr(), o.count(), o.dtype())
    }

    /// Runs `f` between the vendor's group start and end (the end is called
    /// even when `f` fails, so the vendor's group state stays balanced).
    fn grouped(&self, f: impl FnOnce() -> Result<()>) -> Result<()> {
        self.api.group_start()?;
        let result = f();
        let end = self.api.group_end();
        result.and(end)
    }

    fn send_raw(
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
        // SAFETY: `ptr` is `count` elements of live device memory.
        unsafe {
            self.api
                .send(ptr, count, dtype, peer, c.handle, c.stream.raw())
        }
    }

    fn recv_raw(
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
        unsafe {
            self.api
                .recv(ptr, count, dtype, peer, c.handle, c.stream.raw())
        }
    }

    /// The rank of group rank `peer` within communicator `c`.
    fn comm_rank(&self, c: &Comm, peer: i32) -> i32 {
        match c.key {
            CommKey::All => peer,
            CommKey::Pair(a, _) => i32::from(peer != a),
        }
    }

    /// A device copy on the communicator's stream.
    fn copy(&self, c: &Comm, dst: *mut c_void, src: *const c_void, bytes: usize) -> Result<()> {
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
    fn scratch(&self, c: &Comm, bytes: usize) -> Result<dipu_runtime::DeviceBuffer> {
        self.runtime.allocate(bytes, c.stream)
    }
}
