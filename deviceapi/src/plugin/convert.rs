//! How a `DeviceApi` argument or result crosses the plugin ABI as one C
//! value: handles as their raw `u64`, code enums as `i32` (checked on the
//! way in), `bool` as 0 or 1, integers and pointers as themselves.

use std::ffi::c_void;

use crate::{
    CommHandle, CopyKind, DataType, Error, EventHandle, PhysicalMemHandle, ReduceOp, Result,
    StreamHandle,
};

/// A Rust value made from its C form `C`; a C value with no Rust meaning
/// (an unknown enum code) is an `InvalidArgument` error.
pub(crate) trait FromAbi<C>: Sized {
    /// The Rust value of `c`.
    fn from_abi(c: C) -> Result<Self>;
}

/// A Rust value turned into its C form `C`.
pub(crate) trait IntoAbi<C> {
    /// The C form of `self`.
    fn into_abi(self) -> C;
}

/// C values a vendor writes through an out-pointer, with the value the
/// loader puts there first.
pub(crate) trait AbiOut: Copy {
    /// The value before the vendor writes (zero, null).
    fn zero() -> Self;
}

/// Types that are their own C form.
macro_rules! same {
    ($($t:ty),*) => {$(
        impl FromAbi<$t> for $t {
            fn from_abi(c: $t) -> Result<Self> {
                Ok(c)
            }
        }
        impl IntoAbi<$t> for $t {
            fn into_abi(self) -> $t {
                self
            }
        }
    )*};
}
same!(i32, u8, usize, f32, *mut c_void, *const c_void);

/// Handles, as their raw `u64`.
macro_rules! handles {
    ($($t:ty),*) => {$(
        impl FromAbi<u64> for $t {
            fn from_abi(c: u64) -> Result<Self> {
                Ok(<$t>::from_raw(c))
            }
        }
        impl IntoAbi<u64> for $t {
            fn into_abi(self) -> u64 {
                self.as_raw()
            }
        }
    )*};
}
handles!(StreamHandle, EventHandle, CommHandle, PhysicalMemHandle);

/// Code enums, as their `i32` code.
macro_rules! codes {
    ($($t:ty: $what:literal),*) => {$(
        impl FromAbi<i32> for $t {
            fn from_abi(code: i32) -> Result<Self> {
                <$t>::from_code(code).ok_or_else(|| {
                    Error::invalid_argument(format!(concat!("unknown ", $what, " code {}"), code))
                })
            }
        }
        impl IntoAbi<i32> for $t {
            fn into_abi(self) -> i32 {
                self as i32
            }
        }
    )*};
}
codes!(CopyKind: "copy kind", DataType: "data type", ReduceOp: "reduce op");

impl FromAbi<i32> for bool {
    fn from_abi(c: i32) -> Result<Self> {
        Ok(c != 0)
    }
}

impl IntoAbi<i32> for bool {
    fn into_abi(self) -> i32 {
        self as i32
    }
}

macro_rules! outs {
    ($($t:ty = $zero:expr),*) => {$(
        impl AbiOut for $t {
            fn zero() -> Self {
                $zero
            }
        }
    )*};
}
outs!(i32 = 0, u64 = 0, usize = 0, f32 = 0.0, *mut c_void = std::ptr::null_mut());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_codes_are_invalid_arguments() {
        let e = <CopyKind as FromAbi<i32>>::from_abi(99).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(e.message().contains("unknown copy kind code 99"), "{e}");
        let e = <ReduceOp as FromAbi<i32>>::from_abi(-1).unwrap_err();
        assert!(e.message().contains("unknown reduce op code -1"), "{e}");
        let kind = <CopyKind as FromAbi<i32>>::from_abi(CopyKind::DeviceToHost.into_abi());
        assert_eq!(kind.unwrap(), CopyKind::DeviceToHost);
    }

    #[test]
    fn handles_and_bools_round_trip() {
        let s = StreamHandle::from_raw(0xabc);
        assert_eq!(IntoAbi::<u64>::into_abi(s), 0xabc);
        assert_eq!(<StreamHandle as FromAbi<u64>>::from_abi(0xabc).unwrap(), s);
        assert!(<bool as FromAbi<i32>>::from_abi(2).unwrap());
        assert!(!<bool as FromAbi<i32>>::from_abi(0).unwrap());
        assert_eq!(IntoAbi::<i32>::into_abi(true), 1);
    }
}
