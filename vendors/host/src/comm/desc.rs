//! What an operation is, in words for messages and in two words for the
//! signature each slot carries, so ranks notice when they disagree.

use std::fmt;

use dipu_deviceapi::{DataType, Error, ErrorKind, ReduceOp, Result};

/// The operations of a communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce = 1,
    Broadcast = 2,
    Reduce = 3,
    AllGather = 4,
    ReduceScatter = 5,
    Send = 6,
    Recv = 7,
}

impl Kind {
    const ALL: [Kind; 7] = [
        Kind::AllReduce,
        Kind::Broadcast,
        Kind::Reduce,
        Kind::AllGather,
        Kind::ReduceScatter,
        Kind::Send,
        Kind::Recv,
    ];

    /// The operation's name, e.g. `all_reduce`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all_reduce",
            Kind::Broadcast => "broadcast",
            Kind::Reduce => "reduce",
            Kind::AllGather => "all_gather",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::Send => "send",
            Kind::Recv => "recv",
        }
    }
}

/// The reductions the host vendor implements (`ReduceOp` less `Avg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reduction {
    Sum = 0,
    Prod = 1,
    Min = 2,
    Max = 3,
}

impl Reduction {
    /// The reduction for `op`; `Avg` is `Unsupported`.
    pub(crate) fn from_op(op: ReduceOp) -> Result<Reduction> {
        match op {
            ReduceOp::Sum => Ok(Reduction::Sum),
            ReduceOp::Prod => Ok(Reduction::Prod),
            ReduceOp::Min => Ok(Reduction::Min),
            ReduceOp::Max => Ok(Reduction::Max),
            other => Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "the host vendor does not implement ReduceOp::{other:?}; the process group \
                     emulates Avg as a Sum followed by a division by the world size"
                ),
            )),
        }
    }

    fn from_code(code: u64) -> Option<Reduction> {
        [
            Reduction::Sum,
            Reduction::Prod,
            Reduction::Min,
            Reduction::Max,
        ]
        .into_iter()
        .find(|r| *r as u64 == code)
    }

    fn name(self) -> &'static str {
        match self {
            Reduction::Sum => "sum",
            Reduction::Prod => "prod",
            Reduction::Min => "min",
            Reduction::Max => "max",
        }
    }
}

/// One operation as every rank must see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Desc {
    pub(crate) kind: Kind,
    pub(crate) dtype: DataType,
    /// The reduction (reducing kinds only).
    pub(crate) op: Option<Reduction>,
    /// The root (broadcast, reduce) or the peer (send: the destination,
    /// recv: the source); 0 otherwise.
    pub(crate) root: usize,
    /// Elements: `count`, or per rank for all_gather (`send_count`) and
    /// reduce_scatter (`recv_count`).
    pub(crate) count: u64,
}

const VALID: u64 = 1 << 63;

impl Desc {
    /// The two signature words.
    pub(crate) fn encode(&self) -> [u64; 2] {
        let op = self.op.map_or(0, |r| r as u64 + 1);
        let word = VALID
            | self.kind as u64
            | (self.dtype as u64) << 8
            | op << 16
            | (self.root as u64) << 24;
        [word, self.count]
    }

    /// The operation two signature words stand for (`None`: not a signature).
    pub(crate) fn decode([word, count]: [u64; 2]) -> Option<Desc> {
        if word & VALID == 0 {
            return None;
        }
        let kind = Kind::ALL.into_iter().find(|k| *k as u64 == word & 0xff)?;
        let dtype = DataType::from_code(i32::try_from((word >> 8) & 0xff).ok()?)?;
        let op = match (word >> 16) & 0xff {
            0 => None,
            code => Some(Reduction::from_code(code - 1)?),
        };
        Some(Desc {
            kind,
            dtype,
            op,
            root: usize::try_from((word >> 24) & 0xff).ok()?,
            count,
        })
    }

    /// A short description of a signature that may not decode.
    pub(crate) fn describe(words: [u64; 2]) -> String {
        Desc::decode(words).map_or_else(
            || {
                format!(
                    "an unknown operation (signature {:#x}:{:#x})",
                    words[0], words[1]
                )
            },
            |d| d.to_string(),
        )
    }
}

/// The short name of a data type, e.g. `f32`.
pub(crate) fn dtype_name(dtype: DataType) -> &'static str {
    match dtype {
        DataType::F16 => "f16",
        DataType::BF16 => "bf16",
        DataType::F32 => "f32",
        DataType::F64 => "f64",
        DataType::I8 => "i8",
        DataType::U8 => "u8",
        DataType::I32 => "i32",
        DataType::I64 => "i64",
        DataType::I16 => "i16",
        DataType::U32 => "u32",
        DataType::U64 => "u64",
        _ => "an unknown type",
    }
}

impl fmt::Display for Desc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, t, n) = (self.kind.name(), dtype_name(self.dtype), self.count);
        let op = self.op.map_or("?", Reduction::name);
        match self.kind {
            Kind::AllReduce => write!(f, "{kind}(count {n}, {t}, {op})"),
            Kind::Broadcast => write!(f, "{kind}(count {n}, {t}, root {})", self.root),
            Kind::Reduce => write!(f, "{kind}(count {n}, {t}, {op}, root {})", self.root),
            Kind::AllGather => write!(f, "{kind}(send_count {n}, {t})"),
            Kind::ReduceScatter => write!(f, "{kind}(recv_count {n}, {t}, {op})"),
            Kind::Send => write!(f, "{kind}(count {n}, {t}, to rank {})", self.root),
            Kind::Recv => write!(f, "{kind}(count {n}, {t}, from rank {})", self.root),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_round_trip_and_read_well() {
        let d = Desc {
            kind: Kind::Reduce,
            dtype: DataType::BF16,
            op: Some(Reduction::Max),
            root: 63,
            count: u64::MAX,
        };
        assert_eq!(Desc::decode(d.encode()), Some(d));
        assert_eq!(
            d.to_string(),
            format!("reduce(count {}, bf16, max, root 63)", u64::MAX)
        );
        assert_eq!(Desc::decode([0, 5]), None);
        assert!(Desc::describe([VALID | 99, 1]).contains("unknown operation"));
        let e = Reduction::from_op(ReduceOp::Avg).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.message().contains("Sum followed by a division"), "{e}");
    }
}
