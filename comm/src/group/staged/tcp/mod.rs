//! The TCP transport: the collectives written over a mesh of connections
//! ([`mesh`]), for ranks on several machines (or on one, when asked).
//!
//! - All-reduce and reduce-scatter: rank r gathers block r of every rank's
//!   data and folds the rows in rank order ([`super::reduce`]); an
//!   all-reduce then sends each block's result to every rank. Every rank
//!   gets the same bits, and each moves 2(n-1)/n of the data, as a ring.
//! - Reduce: every rank sends its data to the root, which folds in rank
//!   order. Broadcast: the root sends to every rank. All-gather: every rank
//!   sends its data to every other.
//! - Frames are tagged: a collective by its sequence number in the
//!   communicator and its step, a point-to-point message by its place
//!   among the messages between the two ranks (the k-th send from a to b
//!   matches b's k-th receive from a). A batch sends its point-to-point
//!   messages first, so one that receives before it sends cannot deadlock.

mod mesh;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_deviceapi::{DataType, Error, ErrorKind, ReduceOp, Result};

use super::batch::{HostOp, Layout};
use super::reduce::fold;
use super::rendezvous::Setup;
use super::shared::{safety_deadline, Shared};
use super::Transport;
use mesh::{Frame, Mesh};

/// Point-to-point tags have this bit set; collective tags do not.
const P2P: u64 = 1 << 63;

/// One rank of a TCP communicator.
pub(crate) struct Tcp {
    mesh: Mesh,
    shared: Arc<Shared>,
    rank: usize,
    size: usize,
    timeout: Duration,
    /// Collectives run so far.
    collectives: u64,
    /// Messages sent to and received from each rank so far.
    sent: Vec<u64>,
    received: Vec<u64>,
}

/// Connects the mesh and returns the transport.
pub(crate) fn connect(
    setup: &Setup,
    shared: &Arc<Shared>,
    one_machine: bool,
    deadline: Instant,
) -> Result<Box<dyn Transport>> {
    let mesh = mesh::connect(setup, shared, one_machine, deadline)?;
    shared.set_aborter(mesh.aborter()?);
    Ok(Box::new(Tcp {
        mesh,
        shared: Arc::clone(shared),
        rank: setup.rank,
        size: setup.size,
        timeout: setup.timeout,
        collectives: 0,
        sent: vec![0; setup.size],
        received: vec![0; setup.size],
    }))
}

/// Element `count * b / n` of `count` split in `n` blocks: block b is
/// `bound(b)..bound(b + 1)`, times the element size.
fn block(count: usize, n: usize, b: usize, size: usize) -> std::ops::Range<usize> {
    let bound = |b: usize| (count as u128 * b as u128 / n as u128) as usize * size;
    bound(b)..bound(b + 1)
}

/// The staging buffer as bytes.
struct Staging {
    base: usize,
    len: usize,
}

impl Staging {
    fn bytes(&mut self, at: usize, len: usize) -> &mut [u8] {
        assert!(at + len <= self.len, "a region outside the staging buffer");
        // SAFETY: the staging buffer is `self.len` bytes of pinned memory,
        // the worker's alone while the transport runs (the stream waits at
        // the gate); `&mut self` makes the slices exclusive in turn.
        unsafe { std::slice::from_raw_parts_mut((self.base + at) as *mut u8, len) }
    }
}

impl Tcp {
    fn deadline(&self) -> (Instant, Duration) {
        (safety_deadline(self.timeout), self.timeout)
    }

    fn recv_exact(&self, from: usize, tag: u64, len: usize) -> Result<Frame> {
        let frame = self.mesh.recv(from, tag, &self.shared, self.deadline())?;
        if frame.len() != len {
            return Err(Error::invalid_argument(format!(
                "collective mismatch: rank {from} sent {} bytes where {len} were expected (do \
                 all ranks issue the same collectives in the same order?)",
                frame.len()
            )));
        }
        Ok(frame)
    }

    fn others(&self) -> impl Iterator<Item = usize> {
        let me = self.rank;
        (0..self.size).filter(move |r| *r != me)
    }

    /// Replaces `mine` with the fold, in rank order, of the rows every
    /// other rank sends under `tag` and `mine` itself.
    fn fold_into(
        &self,
        mine: &mut [u8],
        tag: u64,
        (dtype, op): (DataType, ReduceOp),
    ) -> Result<()> {
        let mut frames = Vec::with_capacity(self.size);
        for r in 0..self.size {
            frames.push(if r == self.rank {
                None
            } else {
                Some(self.recv_exact(r, tag, mine.len())?)
            });
        }
        let rows: Vec<Option<&[u8]>> = frames.iter().map(|f| f.as_deref()).collect();
        fold(dtype, op, &rows, mine)
    }

    fn collective(&mut self, s: &mut Staging, op: HostOp) -> Result<()> {
        let seq = self.collectives;
        self.collectives += 1;
        let tag = |step: u64| (seq << 4) | step;
        let (me, n) = (self.rank, self.size);
        match op {
            HostOp::AllReduce {
                at,
                count,
                dtype,
                op,
            } => {
                let size = dtype.size_in_bytes();
                let data = s.bytes(at, count * size);
                for r in self.others() {
                    self.mesh.send(r, tag(0), &data[block(count, n, r, size)])?;
                }
                let mine = block(count, n, me, size);
                self.fold_into(&mut data[mine.clone()], tag(0), (dtype, op))?;
                for r in self.others() {
                    self.mesh.send(r, tag(1), &data[mine.clone()])?;
                }
                for r in self.others() {
                    let range = block(count, n, r, size);
                    let frame = self.recv_exact(r, tag(1), range.len())?;
                    data[range].copy_from_slice(&frame);
                }
            }
            HostOp::Reduce {
                at,
                count,
                dtype,
                op,
                root,
            } => {
                let data = s.bytes(at, count * dtype.size_in_bytes());
                if me != root {
                    return self.mesh.send(root, tag(0), data);
                }
                self.fold_into(data, tag(0), (dtype, op))?;
            }
            HostOp::Broadcast { at, bytes, root } => {
                let data = s.bytes(at, bytes);
                if me == root {
                    for r in self.others() {
                        self.mesh.send(r, tag(0), data)?;
                    }
                } else {
                    data.copy_from_slice(&self.recv_exact(root, tag(0), bytes)?);
                }
            }
            HostOp::AllGather { send, recv, bytes } => {
                let mine = s.bytes(send, bytes).to_vec();
                for r in self.others() {
                    self.mesh.send(r, tag(0), &mine)?;
                }
                let all = s.bytes(recv, bytes * n);
                all[me * bytes..(me + 1) * bytes].copy_from_slice(&mine);
                for r in self.others() {
                    let frame = self.recv_exact(r, tag(0), bytes)?;
                    all[r * bytes..(r + 1) * bytes].copy_from_slice(&frame);
                }
            }
            HostOp::ReduceScatter {
                send,
                recv,
                count,
                dtype,
                op,
            } => {
                let bytes = count * dtype.size_in_bytes();
                // The layout puts the output after the input.
                let gap = recv.checked_sub(send).filter(|g| *g >= bytes * n);
                let gap = gap.ok_or_else(|| {
                    Error::new(
                        ErrorKind::Internal,
                        "a reduce-scatter's output before its input",
                    )
                })?;
                let (all, out) = s.bytes(send, gap + bytes).split_at_mut(gap);
                for r in self.others() {
                    self.mesh
                        .send(r, tag(0), &all[r * bytes..(r + 1) * bytes])?;
                }
                let out = &mut out[..bytes];
                out.copy_from_slice(&all[me * bytes..(me + 1) * bytes]);
                self.fold_into(out, tag(0), (dtype, op))?;
            }
            HostOp::Send { .. } | HostOp::Recv { .. } => {}
        }
        Ok(())
    }
}

impl Transport for Tcp {
    fn run(&mut self, layout: &Layout, base: usize) -> Result<()> {
        let mut s = Staging {
            base,
            len: layout.bytes,
        };
        for op in &layout.ops {
            if let HostOp::Send { at, bytes, peer } = *op {
                let tag = P2P | self.sent[peer];
                self.sent[peer] += 1;
                self.mesh.send(peer, tag, s.bytes(at, bytes))?;
            }
        }
        for op in &layout.ops {
            match *op {
                HostOp::Send { .. } => {}
                HostOp::Recv { at, bytes, peer } => {
                    let tag = P2P | self.received[peer];
                    self.received[peer] += 1;
                    let frame = self.recv_exact(peer, tag, bytes)?;
                    s.bytes(at, bytes).copy_from_slice(&frame);
                }
                collective => self.collective(&mut s, collective)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::block;

    #[test]
    fn blocks_cover_the_buffer_in_order() {
        for (count, n) in [(10, 3), (2, 4), (0, 2), (1001, 4)] {
            let mut next = 0;
            for b in 0..n {
                let r = block(count, n, b, 4);
                assert_eq!(r.start, next, "{count} in {n}: block {b}");
                next = r.end;
            }
            assert_eq!(next, count * 4);
        }
    }
}
