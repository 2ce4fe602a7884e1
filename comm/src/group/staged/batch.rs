//! One batch of host-staged operations: what each operation reads from and
//! writes to device memory, laid out in one pinned staging buffer, and the
//! operations the transport runs on that buffer.

use dipu_deviceapi::{DataType, Error, ReduceOp, Result};

use super::reduce;

/// Regions of the staging buffer start at multiples of this.
const ALIGN: usize = 64;

/// An operation as the process group issues it: device addresses, and
/// roots and peers as ranks of the communicator.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DeviceOp {
    /// `recv` = the reduction of every rank's `send`.
    AllReduce {
        send: usize,
        recv: usize,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    },
    /// On `root`, `recv` = the reduction of every rank's `send`.
    Reduce {
        send: usize,
        recv: usize,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        root: usize,
    },
    /// Every rank's `recv` = `root`'s `send`.
    Broadcast {
        send: usize,
        recv: usize,
        count: usize,
        dtype: DataType,
        root: usize,
    },
    /// Block r of `recv` (ranks x `count`) = rank r's `send`.
    AllGather {
        send: usize,
        recv: usize,
        count: usize,
        dtype: DataType,
    },
    /// Rank r's `recv` = the reduction of block r of every rank's `send`.
    ReduceScatter {
        send: usize,
        recv: usize,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    },
    /// `buf` to `peer`.
    Send {
        buf: usize,
        count: usize,
        dtype: DataType,
        peer: usize,
    },
    /// `buf` from `peer`.
    Recv {
        buf: usize,
        count: usize,
        dtype: DataType,
        peer: usize,
    },
}

/// An operation on the staging buffer (offsets from its start); sizes of
/// data that is only moved are in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum HostOp {
    /// In place at `at`.
    AllReduce {
        at: usize,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    },
    /// In place at `at`; the result matters on `root` only.
    Reduce {
        at: usize,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        root: usize,
    },
    /// `bytes` at `at`, `root`'s to everyone.
    Broadcast {
        at: usize,
        bytes: usize,
        root: usize,
    },
    /// `bytes` at `send` into block `rank` of `recv`.
    AllGather {
        send: usize,
        recv: usize,
        bytes: usize,
    },
    /// Ranks x `count` at `send`, this rank's block reduced into `recv`.
    ReduceScatter {
        send: usize,
        recv: usize,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
    },
    /// `bytes` at `at` to `peer`.
    Send {
        at: usize,
        bytes: usize,
        peer: usize,
    },
    /// `bytes` from `peer` into `at`.
    Recv {
        at: usize,
        bytes: usize,
        peer: usize,
    },
}

/// A copy between device memory and the staging buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Move {
    pub(crate) device: usize,
    pub(crate) offset: usize,
    pub(crate) bytes: usize,
}

/// A batch laid out: its staging size, the copies down before the
/// transport runs and up after it, and the host operations.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Layout {
    pub(crate) bytes: usize,
    pub(crate) downs: Vec<Move>,
    pub(crate) ups: Vec<Move>,
    pub(crate) ops: Vec<HostOp>,
}

impl Layout {
    /// Lays out `ops` for rank `rank` of `size`. Empty operations are left
    /// out (every rank leaves them out alike).
    pub(crate) fn plan(ops: &[DeviceOp], rank: usize, size: usize) -> Result<Layout> {
        let mut l = Layout::default();
        for op in ops {
            l.add(*op, rank, size)?;
        }
        Ok(l)
    }

    /// A region of `bytes` (none when 0).
    fn region(&mut self, bytes: usize) -> Result<usize> {
        let at = self.bytes;
        self.bytes = at
            .checked_add(bytes)
            .and_then(|end| end.checked_next_multiple_of(ALIGN))
            .ok_or_else(|| Error::invalid_argument("a host-staged batch larger than memory"))?;
        Ok(at)
    }

    fn down(&mut self, device: usize, offset: usize, bytes: usize) {
        self.downs.push(Move {
            device,
            offset,
            bytes,
        });
    }

    fn up(&mut self, device: usize, offset: usize, bytes: usize) {
        self.ups.push(Move {
            device,
            offset,
            bytes,
        });
    }

    fn add(&mut self, op: DeviceOp, rank: usize, size: usize) -> Result<()> {
        let check_rank = |what: &str, r: usize| {
            if r < size {
                Ok(())
            } else {
                Err(Error::invalid_argument(format!(
                    "{what} {r} is not a rank of a communicator of {size}"
                )))
            }
        };
        let bytes = |count: usize, dtype: DataType| {
            count
                .checked_mul(dtype.size_in_bytes())
                .ok_or_else(|| Error::invalid_argument(format!("{count} x {dtype:?} overflows")))
        };
        let times = |b: usize| {
            b.checked_mul(size)
                .ok_or_else(|| Error::invalid_argument(format!("{size} x {b} bytes overflows")))
        };
        match op {
            DeviceOp::AllReduce {
                send,
                recv,
                count,
                dtype,
                op,
            } => {
                reduce::check(dtype, op)?;
                let b = bytes(count, dtype)?;
                if b == 0 {
                    return Ok(());
                }
                let at = self.region(b)?;
                self.down(send, at, b);
                self.up(recv, at, b);
                self.ops.push(HostOp::AllReduce {
                    at,
                    count,
                    dtype,
                    op,
                });
            }
            DeviceOp::Reduce {
                send,
                recv,
                count,
                dtype,
                op,
                root,
            } => {
                reduce::check(dtype, op)?;
                check_rank("root", root)?;
                let b = bytes(count, dtype)?;
                if b == 0 {
                    return Ok(());
                }
                let at = self.region(b)?;
                self.down(send, at, b);
                if rank == root {
                    self.up(recv, at, b);
                }
                self.ops.push(HostOp::Reduce {
                    at,
                    count,
                    dtype,
                    op,
                    root,
                });
            }
            DeviceOp::Broadcast {
                send,
                recv,
                count,
                dtype,
                root,
            } => {
                check_rank("root", root)?;
                let b = bytes(count, dtype)?;
                if b == 0 {
                    return Ok(());
                }
                let at = self.region(b)?;
                if rank == root {
                    self.down(send, at, b);
                }
                if rank != root || send != recv {
                    self.up(recv, at, b);
                }
                self.ops.push(HostOp::Broadcast { at, bytes: b, root });
            }
            DeviceOp::AllGather {
                send,
                recv,
                count,
                dtype,
            } => {
                let b = bytes(count, dtype)?;
                if b == 0 {
                    return Ok(());
                }
                let all = times(b)?;
                let (s, r) = (self.region(b)?, self.region(all)?);
                self.down(send, s, b);
                self.up(recv, r, all);
                self.ops.push(HostOp::AllGather {
                    send: s,
                    recv: r,
                    bytes: b,
                });
            }
            DeviceOp::ReduceScatter {
                send,
                recv,
                count,
                dtype,
                op,
            } => {
                reduce::check(dtype, op)?;
                let b = bytes(count, dtype)?;
                if b == 0 {
                    return Ok(());
                }
                let all = times(b)?;
                let (s, r) = (self.region(all)?, self.region(b)?);
                self.down(send, s, all);
                self.up(recv, r, b);
                self.ops.push(HostOp::ReduceScatter {
                    send: s,
                    recv: r,
                    count,
                    dtype,
                    op,
                });
            }
            DeviceOp::Send {
                buf,
                count,
                dtype,
                peer,
            }
            | DeviceOp::Recv {
                buf,
                count,
                dtype,
                peer,
            } => {
                check_rank("peer", peer)?;
                if peer == rank {
                    return Err(Error::invalid_argument(format!(
                        "rank {rank} cannot send to or receive from itself"
                    )));
                }
                let b = bytes(count, dtype)?;
                if b == 0 {
                    return Ok(());
                }
                let at = self.region(b)?;
                if matches!(op, DeviceOp::Send { .. }) {
                    self.down(buf, at, b);
                    self.ops.push(HostOp::Send { at, bytes: b, peer });
                } else {
                    self.up(buf, at, b);
                    self.ops.push(HostOp::Recv { at, bytes: b, peer });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_aligned_and_copies_go_where_data_flows() {
        let ops = [
            DeviceOp::AllReduce {
                send: 0x1000,
                recv: 0x1000,
                count: 3,
                dtype: DataType::F32,
                op: ReduceOp::Sum,
            },
            DeviceOp::Broadcast {
                send: 0x2000,
                recv: 0x2000,
                count: 5,
                dtype: DataType::U8,
                root: 0,
            },
            DeviceOp::AllGather {
                send: 0x3000,
                recv: 0x4000,
                count: 2,
                dtype: DataType::I64,
            },
            DeviceOp::Recv {
                buf: 0x5000,
                count: 0,
                dtype: DataType::F32,
                peer: 2,
            },
        ];
        let on_root = Layout::plan(&ops, 0, 3).unwrap();
        assert_eq!(on_root.bytes, 64 + 64 + 64 + 64);
        assert_eq!(
            on_root.downs,
            [
                Move {
                    device: 0x1000,
                    offset: 0,
                    bytes: 12
                },
                Move {
                    device: 0x2000,
                    offset: 64,
                    bytes: 5
                },
                Move {
                    device: 0x3000,
                    offset: 128,
                    bytes: 16
                },
            ]
        );
        // The root's broadcast in place copies nothing back.
        assert_eq!(
            on_root.ups,
            [
                Move {
                    device: 0x1000,
                    offset: 0,
                    bytes: 12
                },
                Move {
                    device: 0x4000,
                    offset: 192,
                    bytes: 48
                },
            ]
        );
        assert_eq!(on_root.ops.len(), 3, "the empty recv is left out");
        let elsewhere = Layout::plan(&ops[1..2], 1, 3).unwrap();
        assert!(elsewhere.downs.is_empty(), "a non-root sends nothing down");
        assert_eq!(elsewhere.ups.len(), 1);
    }

    #[test]
    fn bad_ranks_are_errors() {
        let send = |peer| DeviceOp::Send {
            buf: 0,
            count: 1,
            dtype: DataType::F32,
            peer,
        };
        assert!(Layout::plan(&[send(1)], 1, 2).is_err(), "to itself");
        assert!(Layout::plan(&[send(2)], 1, 2).is_err(), "out of range");
        assert!(Layout::plan(&[send(0)], 1, 2).is_ok());
    }
}
