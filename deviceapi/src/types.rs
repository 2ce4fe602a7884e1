//! Plain value types shared by every vendor: handles, data types, reduction
//! operators, copy directions, device properties and capabilities.

use std::fmt;

macro_rules! opaque_handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// The value is the vendor's own handle (a pointer or an index) and is
        /// meaningful only to the vendor that created it.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(transparent)]
        pub struct $name(u64);

        impl $name {
            /// Wraps a vendor's raw handle value.
            pub const fn from_raw(raw: u64) -> Self {
                $name(raw)
            }

            /// The vendor's raw handle value.
            pub const fn as_raw(self) -> u64 {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }
    };
}

opaque_handle!(
    /// A vendor stream (CUDA stream, CNRT queue, ACL stream).
    StreamHandle
);
opaque_handle!(
    /// A vendor event (CUDA event, CNRT notifier, ACL event).
    EventHandle
);
opaque_handle!(
    /// A collective communicator for one rank (NCCL, CNCL, HCCL).
    CommHandle
);
opaque_handle!(
    /// A physical memory chunk for virtual-memory mapping (`cuMemCreate`).
    PhysicalMemHandle
);

impl StreamHandle {
    /// The current device's default stream (CUDA's null stream, CNRT's NULL
    /// queue, ACL's NULL stream).
    pub const DEFAULT: StreamHandle = StreamHandle(0);

    /// True for [`StreamHandle::DEFAULT`].
    pub const fn is_default(self) -> bool {
        self.0 == 0
    }
}

/// Element type of a collective buffer. Values are stable ABI codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(i32)]
pub enum DataType {
    /// IEEE half precision.
    F16 = 0,
    /// bfloat16.
    BF16 = 1,
    /// IEEE single precision.
    F32 = 2,
    /// IEEE double precision.
    F64 = 3,
    /// Signed 8-bit integer.
    I8 = 4,
    /// Unsigned 8-bit integer.
    U8 = 5,
    /// Signed 32-bit integer.
    I32 = 6,
    /// Signed 64-bit integer.
    I64 = 7,
    /// Signed 16-bit integer.
    I16 = 8,
    /// Unsigned 32-bit integer.
    U32 = 9,
    /// Unsigned 64-bit integer.
    U64 = 10,
}

impl DataType {
    /// Every data type, in code order.
    pub const ALL: [DataType; 11] = [
        DataType::F16,
        DataType::BF16,
        DataType::F32,
        DataType::F64,
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::I64,
        DataType::I16,
        DataType::U32,
        DataType::U64,
    ];

    /// Bytes per element.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::F16 | DataType::BF16 | DataType::I16 => 2,
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F64 | DataType::I64 | DataType::U64 => 8,
        }
    }

    /// The type for an ABI code, or `None` for an unknown code.
    pub fn from_code(code: i32) -> Option<DataType> {
        Self::ALL.into_iter().find(|t| *t as i32 == code)
    }
}

/// Reduction operator of a collective. Values are stable ABI codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(i32)]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum = 0,
    /// Element-wise product.
    Prod = 1,
    /// Element-wise minimum.
    Min = 2,
    /// Element-wise maximum.
    Max = 3,
    /// Element-wise mean over ranks (NCCL only; others emulate it above the trait).
    Avg = 4,
}

impl ReduceOp {
    /// Every operator, in code order.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    /// The operator for an ABI code, or `None` for an unknown code.
    pub fn from_code(code: i32) -> Option<ReduceOp> {
        Self::ALL.into_iter().find(|t| *t as i32 == code)
    }
}

/// Direction of a copy, as in `cudaMemcpyKind` (but with our own stable codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum CopyKind {
    /// Pageable or pinned host memory to device memory.
    HostToDevice = 0,
    /// Device memory to host memory.
    DeviceToHost = 1,
    /// Device memory to device memory on the same device.
    DeviceToDevice = 2,
    /// Host memory to host memory, ordered on the stream.
    HostToHost = 3,
}

impl CopyKind {
    /// Every direction, in code order.
    pub const ALL: [CopyKind; 4] = [
        CopyKind::HostToDevice,
        CopyKind::DeviceToHost,
        CopyKind::DeviceToDevice,
        CopyKind::HostToHost,
    ];

    /// The direction for an ABI code, or `None` for an unknown code.
    pub fn from_code(code: i32) -> Option<CopyKind> {
        Self::ALL.into_iter().find(|t| *t as i32 == code)
    }

    /// Whether the source is device memory.
    pub const fn src_is_device(self) -> bool {
        matches!(self, CopyKind::DeviceToHost | CopyKind::DeviceToDevice)
    }

    /// Whether the destination is device memory.
    pub const fn dst_is_device(self) -> bool {
        matches!(self, CopyKind::HostToDevice | CopyKind::DeviceToDevice)
    }
}

/// What a device is, as reported by `device_properties`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProperties {
    /// Marketing or SoC name, e.g. `"NVIDIA H100 80GB HBM3"`.
    pub name: String,
    /// Total device memory in bytes.
    pub total_memory: u64,
    /// Compute capability major (CUDA), or the runtime's major version where
    /// the vendor has no compute capability (Ascend).
    pub major: i32,
    /// Compute capability minor, or the runtime's minor version.
    pub minor: i32,
    /// Streaming multiprocessors, clusters times cores, or AI cores.
    pub multiprocessor_count: i32,
}

/// Free and total memory of the current device, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes the vendor can still allocate.
    pub free: u64,
    /// Bytes the device has in all.
    pub total: u64,
}

/// Stream priorities a vendor accepts: lower numbers are higher priority,
/// as in CUDA, so `greatest <= least`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityRange {
    /// The lowest priority (the default priority, usually 0).
    pub least: i32,
    /// The highest priority (e.g. -5 on recent CUDA GPUs).
    pub greatest: i32,
}

impl PriorityRange {
    /// Clamps a requested priority into the range.
    pub fn clamp(self, priority: i32) -> i32 {
        priority.clamp(self.greatest, self.least)
    }
}

bitflags::bitflags! {
    /// Optional capabilities a vendor implements. Methods of a capability the
    /// vendor lacks return [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Capabilities: u32 {
        /// Collective communication (NCCL, CNCL, HCCL).
        const COLLECTIVES = 1 << 0;
        /// Virtual-memory reserve/map/unmap, used for expandable segments.
        const VIRTUAL_MEMORY = 1 << 1;
        /// Device memory (from `malloc` and mapped virtual ranges) is memory
        /// of this process that the host may read and write directly once
        /// the device work that uses it is done, as on an integrated device
        /// sharing the host's memory. Layers above may then read it in place
        /// instead of copying it back (the memory checker's guards).
        const HOST_ACCESSIBLE_MEMORY = 1 << 2;
    }
}

impl Capabilities {
    /// Human-readable names of the set capabilities.
    pub fn names(self) -> Vec<&'static str> {
        self.iter_names()
            .map(|(name, _)| match name {
                "COLLECTIVES" => "collectives",
                "VIRTUAL_MEMORY" => "virtual-memory",
                "HOST_ACCESSIBLE_MEMORY" => "host-accessible-memory",
                other => other,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for t in DataType::ALL {
            assert_eq!(DataType::from_code(t as i32), Some(t));
        }
        for op in ReduceOp::ALL {
            assert_eq!(ReduceOp::from_code(op as i32), Some(op));
        }
        for k in CopyKind::ALL {
            assert_eq!(CopyKind::from_code(k as i32), Some(k));
        }
        assert_eq!(DataType::from_code(-1), None);
        assert_eq!(ReduceOp::from_code(99), None);
        assert_eq!(CopyKind::from_code(4), None);
    }

    #[test]
    fn sizes_and_directions() {
        assert_eq!(DataType::BF16.size_in_bytes(), 2);
        assert_eq!(DataType::I64.size_in_bytes(), 8);
        assert!(CopyKind::DeviceToHost.src_is_device());
        assert!(!CopyKind::DeviceToHost.dst_is_device());
        assert!(!CopyKind::HostToHost.src_is_device());
    }

    #[test]
    fn priority_clamp_and_capability_names() {
        let r = PriorityRange {
            least: 0,
            greatest: -5,
        };
        assert_eq!(r.clamp(-9), -5);
        assert_eq!(r.clamp(3), 0);
        assert_eq!(r.clamp(-2), -2);
        let c = Capabilities::COLLECTIVES | Capabilities::VIRTUAL_MEMORY;
        assert_eq!(c.names(), ["collectives", "virtual-memory"]);
        assert_eq!(
            Capabilities::HOST_ACCESSIBLE_MEMORY.names(),
            ["host-accessible-memory"]
        );
        assert!(Capabilities::empty().names().is_empty());
        assert_eq!(
            format!("{:?}", StreamHandle::from_raw(16)),
            "StreamHandle(0x10)"
        );
    }
}
