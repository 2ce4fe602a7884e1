//! Point-to-point send and receive. Each direction `src -> dst` is its own
//! channel with a ring of `P2P_DEPTH` slots and its own step counters, so
//! an exchange between two ranks never involves the others. A send is done
//! once its last chunk is in the ring (its buffer may then be reused).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use dipu_deviceapi::{DataType, Error, Result};

use super::buffers::{check, copy_in, copy_out};
use super::desc::{Desc, Kind};
use super::engine::{Progress, Task};
use super::layout::P2P_DEPTH;
use super::state::CommState;

/// One rank's send to, or receive from, one peer.
pub(crate) struct PointToPoint {
    comm: Arc<CommState>,
    desc: Desc,
    /// The user buffer.
    buf: usize,
    bytes: usize,
    /// The signature the sender writes (for a receive: the one expected).
    sig: [u64; 2],
    chunk: usize,
    first: u64,
    steps: u64,
    done: u64,
}

impl PointToPoint {
    /// Checks the arguments and reserves the channel's steps; `None` for a
    /// transfer of no bytes.
    pub(crate) fn new(
        comm: &Arc<CommState>,
        send: bool,
        buf: usize,
        count: usize,
        dtype: DataType,
        peer: usize,
    ) -> Result<Option<PointToPoint>> {
        if peer >= comm.world {
            return Err(Error::invalid_argument(format!(
                "peer {peer} is not a rank of this communicator of {} ranks",
                comm.world
            )));
        }
        let bytes = count
            .checked_mul(dtype.size_in_bytes())
            .ok_or_else(|| Error::invalid_argument("the element count overflows"))?;
        let side = if send { "send" } else { "receive" };
        check(&comm.memory, side, buf, bytes, comm.device)?;
        if bytes == 0 {
            return Ok(None);
        }
        let kind = if send { Kind::Send } else { Kind::Recv };
        let desc = Desc {
            kind,
            dtype,
            op: None,
            root: peer,
            count: count as u64,
        };
        // The sender signs with its destination; a receive expects that.
        let sig = Desc {
            kind: Kind::Send,
            root: if send { peer } else { comm.rank },
            ..desc
        }
        .encode();
        let chunk = comm.seg().layout().p2p_chunk;
        let steps = bytes.div_ceil(chunk) as u64;
        Ok(Some(PointToPoint {
            comm: Arc::clone(comm),
            desc,
            buf,
            bytes,
            sig,
            chunk,
            first: comm.reserve_p2p(peer, send, steps),
            steps,
            done: 0,
        }))
    }

    /// Bytes `at..at + len` of the buffer moved at step `i`.
    fn range(&self, i: u64) -> (usize, usize) {
        let at = i as usize * self.chunk;
        (at, self.chunk.min(self.bytes - at))
    }

    fn try_send(&mut self) -> Result<bool> {
        let (me, peer) = (self.comm.rank, self.desc.root);
        let g = self.first + self.done;
        let seg = self.comm.seg();
        let ch = seg.channel(me, peer);
        if ch.posted.0.load(Ordering::Acquire) != g - 1
            || ch.consumed.0.load(Ordering::Acquire) + (P2P_DEPTH as u64) < g
        {
            return Ok(false);
        }
        let (at, len) = self.range(self.done);
        copy_in(
            &self.comm,
            "send",
            self.buf + at,
            seg.p2p_slot(me, peer, g),
            len,
        )
        .map_err(|e| e.context(format!("rank {me} in {}", self.desc)))?;
        let sig = &ch.sigs.0[(g % P2P_DEPTH as u64) as usize];
        for (word, value) in sig.iter().zip(self.sig) {
            word.store(value, Ordering::Relaxed);
        }
        ch.posted.0.store(g, Ordering::Release);
        Ok(true)
    }

    fn try_recv(&mut self) -> Result<bool> {
        let (me, peer) = (self.comm.rank, self.desc.root);
        let g = self.first + self.done;
        let seg = self.comm.seg();
        let ch = seg.channel(peer, me);
        if ch.consumed.0.load(Ordering::Acquire) != g - 1 || ch.posted.0.load(Ordering::Acquire) < g
        {
            return Ok(false);
        }
        let sig = &ch.sigs.0[(g % P2P_DEPTH as u64) as usize];
        let theirs = [
            sig[0].load(Ordering::Relaxed),
            sig[1].load(Ordering::Relaxed),
        ];
        if theirs != self.sig {
            return Err(Error::invalid_argument(format!(
                "send/recv mismatch: rank {peer} is in {} while rank {me} is in {} \
                 (a receive must match its send's count and type)",
                Desc::describe(theirs),
                self.desc
            )));
        }
        let (at, len) = self.range(self.done);
        copy_out(
            &self.comm,
            "receive",
            seg.p2p_slot(peer, me, g),
            self.buf + at,
            len,
        )
        .map_err(|e| e.context(format!("rank {me} in {}", self.desc)))?;
        ch.consumed.0.store(g, Ordering::Release);
        Ok(true)
    }
}

impl Task for PointToPoint {
    fn poll(&mut self) -> Result<Progress> {
        if !self.comm.ready() {
            return Ok(Progress::Blocked);
        }
        let moved = match self.desc.kind {
            Kind::Send => self.try_send()?,
            _ => self.try_recv()?,
        };
        if !moved {
            return Ok(Progress::Blocked);
        }
        self.done += 1;
        Ok(if self.done == self.steps {
            Progress::Done
        } else {
            Progress::Advanced
        })
    }

    fn describe(&self) -> String {
        self.desc.to_string()
    }

    fn comm(&self) -> &Arc<CommState> {
        &self.comm
    }
}
