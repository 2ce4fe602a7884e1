//! The collectives of [`ProcessGroup`], c10d's set: each checks its
//! arguments, then queues vendor calls on a communicator's stream through
//! `ProcessGroup::launch`.

use dipu_deviceapi::{DataType, Error, ReduceOp, Result};

use super::args::{same_count, same_dtype, uneven};
use super::launch::Peers;
use super::{Buffer, ProcessGroup, Work};

impl ProcessGroup {
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
            |_, c| unsafe { c.broadcast((b.as_ptr(), b.as_ptr()), b.count(), b.dtype(), root) },
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
                        c.all_gather((i.as_ptr(), flat.as_ptr()), i.count(), i.dtype())?;
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
                    g.grouped(c, || {
                        for (r, out) in outs.iter().enumerate() {
                            let src = if r == g.rank as usize {
                                i.as_ptr()
                            } else {
                                out.as_ptr()
                            };
                            // SAFETY: as above; on the root `src` is the input.
                            unsafe {
                                c.broadcast(
                                    (src, out.as_ptr()),
                                    out.count(),
                                    out.dtype(),
                                    r as i32,
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
        self.check_flat("all_gather_into", output, input, input.count())?;
        let (o, i) = (*output, *input);
        self.launch(
            "all_gather_into",
            format!("{} from each rank", i.describe()),
            Peers::All,
            &[output, input],
            // SAFETY: both are live device memory of the group's device and
            // `o` holds world_size inputs (checked above).
            |_, c| unsafe { c.all_gather((i.as_ptr(), o.as_ptr()), i.count(), i.dtype()) },
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
                    g.reduce_scatter_into(c, flat.as_ptr(), o, op)?;
                    // Held until the vendor has the collective: in a
                    // coalesced batch NCCL may enqueue it only at the
                    // batch's end ("can return without having enqueued the
                    // operation on the stream"), and a later operation of
                    // the batch could take this scratch and fill it first.
                    g.after_group(c, move |_, _| {
                        drop(flat);
                        Ok(())
                    })
                } else {
                    let op = g.vendor_op(op);
                    g.grouped(c, || {
                        for (r, x) in ins.iter().enumerate() {
                            let recv = if r == g.rank as usize {
                                o.as_ptr()
                            } else {
                                x.as_ptr()
                            };
                            // SAFETY: live device buffers (the buffer contract).
                            unsafe {
                                c.reduce(
                                    (x.as_ptr(), recv),
                                    x.count(),
                                    x.dtype(),
                                    (op.0, r as i32),
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
        self.check_flat("reduce_scatter_from", input, output, output.count())?;
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
                g.grouped(c, || {
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
                    return g.grouped(c, || g.send_raw(c, i.as_ptr(), i.count(), i.dtype(), root));
                }
                g.copy(c, outs[root as usize].as_ptr(), i.as_ptr(), i.bytes())?;
                g.grouped(c, || {
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
                    return g.grouped(c, || g.recv_raw(c, o.as_ptr(), o.count(), o.dtype(), root));
                }
                g.copy(c, o.as_ptr(), ins[root as usize].as_ptr(), o.bytes())?;
                g.grouped(c, || {
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
}
