//! One collective operation and its buffers, as a vendor's collective
//! dispatch receives them from [`device_api!`](crate::device_api), and the
//! translation of our data types and operators into a library's
//! ([`Translation`]).

use std::ffi::c_void;

use dipu_deviceapi::{DataType, Error, ErrorKind, ReduceOp, Result};

/// One collective operation and its own arguments.
#[derive(Debug, Clone, Copy)]
pub enum Collective {
    /// All-reduce.
    AllReduce(ReduceOp),
    /// Broadcast from a root.
    Broadcast(i32),
    /// All-gather (`count` is the per-rank send count).
    AllGather,
    /// Reduce-scatter (`count` is the per-rank receive count).
    ReduceScatter(ReduceOp),
    /// Reduce to a root.
    Reduce(ReduceOp, i32),
    /// Send (of `send`) to a peer.
    Send(i32),
    /// Receive (into `recv`) from a peer.
    Recv(i32),
}

/// The buffers of a collective: `count` elements of `dtype`.
#[derive(Debug, Clone, Copy)]
pub struct Buffers {
    /// The data sent (null for a receive).
    pub send: *const c_void,
    /// Where the result goes (null for a send).
    pub recv: *mut c_void,
    /// How many elements.
    pub count: usize,
    /// Their type.
    pub dtype: DataType,
}

/// How a collective library names our data types and operators, and what
/// to say when it lacks one.
#[derive(Debug, Clone, Copy)]
pub struct Translation<T, O> {
    /// The library's type for ours; `None` where it lacks it.
    pub dtype: fn(DataType) -> Option<T>,
    /// The library's operator for ours; `None` where it lacks it.
    pub op: fn(ReduceOp) -> Option<O>,
    /// The library's unsigned byte type, which data moves as when it
    /// lacks the type.
    pub bytes: T,
    /// Why a type cannot be reduced: ends `"{what} of {dtype:?}: "`.
    pub no_type: &'static str,
    /// Why an operator cannot be used: ends `"{what} with {op:?}: "`.
    pub no_op: &'static str,
}

impl<T: Copy, O: Copy> Translation<T, O> {
    /// Type and count for an operation that only moves data: a type the
    /// library lacks travels as bytes.
    pub fn moved(&self, dtype: DataType, count: usize) -> Result<(T, usize)> {
        if let Some(t) = (self.dtype)(dtype) {
            return Ok((t, count));
        }
        let bytes = count.checked_mul(dtype.size_in_bytes()).ok_or_else(|| {
            Error::invalid_argument(format!("{count} elements of {dtype:?} overflow usize"))
        })?;
        Ok((self.bytes, bytes))
    }

    /// Type and operator for a reduction (`what`, e.g. `all_reduce`);
    /// `Unsupported` for what the library lacks.
    pub fn reduced(&self, dtype: DataType, op: ReduceOp, what: &str) -> Result<(T, O)> {
        let t = (self.dtype)(dtype).ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!("{what} of {dtype:?}: {}", self.no_type),
            )
        })?;
        let o = (self.op)(op).ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!("{what} with {op:?}: {}", self.no_op),
            )
        })?;
        Ok((t, o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library with only `F32` and `U8`, and only `Sum`.
    const LIB: Translation<u8, u8> = Translation {
        dtype: |d| match d {
            DataType::F32 => Some(1),
            DataType::U8 => Some(2),
            _ => None,
        },
        op: |o| matches!(o, ReduceOp::Sum).then_some(7),
        bytes: 2,
        no_type: "LIB has no such type",
        no_op: "LIB has no such operator",
    };

    #[test]
    fn moved_keeps_a_known_type_and_sends_others_as_bytes() {
        assert_eq!(LIB.moved(DataType::F32, 5).unwrap(), (1, 5));
        assert_eq!(LIB.moved(DataType::F64, 5).unwrap(), (2, 40));
        let err = LIB.moved(DataType::F64, usize::MAX).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.to_string().contains("overflow usize"), "{err}");
    }

    #[test]
    fn reduced_names_what_the_library_lacks() {
        assert_eq!(
            LIB.reduced(DataType::F32, ReduceOp::Sum, "x").unwrap(),
            (1, 7)
        );
        let err = LIB
            .reduced(DataType::F64, ReduceOp::Sum, "all_reduce")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(
            err.to_string()
                .contains("all_reduce of F64: LIB has no such type"),
            "{err}"
        );
        let err = LIB
            .reduced(DataType::F32, ReduceOp::Max, "reduce")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(
            err.to_string()
                .contains("reduce with Max: LIB has no such operator"),
            "{err}"
        );
    }
}
