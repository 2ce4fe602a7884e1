//! Bindings to NCCL (`libnccl.so.2`): the functions, types and constants
//! this vendor uses, named as in `nccl.h` and checked against it by the
//! header test.

#![expect(
    non_camel_case_types,
    non_upper_case_globals,
    reason = "C names from nccl.h, so the header test can check them"
)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::bind::{c_consts, c_types, library};
use crate::cudart::cudaStream_t;

/// `ncclUniqueId`: `struct { char internal[128]; }`, passed **by value** to
/// `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct NcclUniqueId {
    /// The id's bytes, opaque.
    pub(crate) internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

c_types! {
    /// `ncclResult_t`.
    ncclResult_t = c_int;
    /// `ncclComm_t`: `struct ncclComm *`.
    ncclComm_t = *mut c_void;
    /// `ncclDataType_t`.
    ncclDataType_t = c_int;
    /// `ncclRedOp_t`.
    ncclRedOp_t = c_int;
    /// `ncclUniqueId`.
    ncclUniqueId = NcclUniqueId;
    /// `ncclConfig_t` (NCCL 2.32's layout).
    ncclConfig_t = NcclConfig;
}

/// `ncclConfig_t` as NCCL 2.32 lays it out; [`NcclConfig::non_blocking`]
/// is `NCCL_CONFIG_INITIALIZER` with `blocking = 0`. NCCL reads `size` and
/// `version` to know which fields the caller has.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct NcclConfig {
    /// `size`: `sizeof(ncclConfig_t)`.
    pub(crate) size: usize,
    /// `magic`: `NCCL_API_MAGIC`.
    pub(crate) magic: c_uint,
    /// `version`: `NCCL_VERSION_CODE` of the header.
    pub(crate) version: c_uint,
    /// `blocking`.
    pub(crate) blocking: c_int,
    /// `cgaClusterSize`, `minCTAs`, `maxCTAs`.
    pub(crate) ints1: [c_int; 3],
    /// `netName`.
    pub(crate) net_name: *const c_char,
    /// `splitShare`, `trafficClass`.
    pub(crate) ints2: [c_int; 2],
    /// `commName`.
    pub(crate) comm_name: *const c_char,
    /// `collnetEnable` to `nvlsHostMode` (16 ints).
    pub(crate) ints3: [c_int; 16],
}

impl NcclConfig {
    /// `NCCL_CONFIG_INITIALIZER` with `blocking = 0`.
    pub(crate) fn non_blocking() -> Self {
        NcclConfig {
            size: std::mem::size_of::<NcclConfig>(),
            magic: NCCL_API_MAGIC,
            version: NCCL_VERSION_CODE,
            blocking: 0,
            ints1: [NCCL_CONFIG_UNDEF_INT; 3],
            net_name: std::ptr::null(),
            ints2: [NCCL_CONFIG_UNDEF_INT; 2],
            comm_name: std::ptr::null(),
            ints3: [NCCL_CONFIG_UNDEF_INT; 16],
        }
    }
}

c_consts! {
    /// No error.
    ncclSuccess: ncclResult_t = 0;
    /// A CUDA call inside NCCL failed.
    ncclUnhandledCudaError: ncclResult_t = 1;
    /// A system call failed.
    ncclSystemError: ncclResult_t = 2;
    /// An NCCL bug or corrupted state.
    ncclInternalError: ncclResult_t = 3;
    /// A bad argument.
    ncclInvalidArgument: ncclResult_t = 4;
    /// A call NCCL does not allow here.
    ncclInvalidUsage: ncclResult_t = 5;
    /// A peer failed (network or remote process).
    ncclRemoteError: ncclResult_t = 6;
    /// A non-blocking operation is still in progress (not an error).
    ncclInProgress: ncclResult_t = 7;
    /// An operation timed out.
    ncclTimeout: ncclResult_t = 8;

    /// `ncclInt8` (= `ncclChar`).
    ncclInt8: ncclDataType_t = 0;
    /// `ncclUint8`.
    ncclUint8: ncclDataType_t = 1;
    /// `ncclInt32` (= `ncclInt`).
    ncclInt32: ncclDataType_t = 2;
    /// `ncclUint32`.
    ncclUint32: ncclDataType_t = 3;
    /// `ncclInt64`.
    ncclInt64: ncclDataType_t = 4;
    /// `ncclUint64`.
    ncclUint64: ncclDataType_t = 5;
    /// `ncclFloat16` (= `ncclHalf`).
    ncclFloat16: ncclDataType_t = 6;
    /// `ncclFloat32` (= `ncclFloat`).
    ncclFloat32: ncclDataType_t = 7;
    /// `ncclFloat64` (= `ncclDouble`).
    ncclFloat64: ncclDataType_t = 8;
    /// `ncclBfloat16`.
    ncclBfloat16: ncclDataType_t = 9;

    /// Sum.
    ncclSum: ncclRedOp_t = 0;
    /// Product.
    ncclProd: ncclRedOp_t = 1;
    /// Maximum (**2**, while our `ReduceOp::Max` is 3).
    ncclMax: ncclRedOp_t = 2;
    /// Minimum (**3**, while our `ReduceOp::Min` is 2).
    ncclMin: ncclRedOp_t = 3;
    /// Average (NCCL 2.10 and later).
    ncclAvg: ncclRedOp_t = 4;

    /// Bytes in an `ncclUniqueId`.
    NCCL_UNIQUE_ID_BYTES: usize = 128;
    /// `magic` of an initialised `ncclConfig_t`.
    NCCL_API_MAGIC: c_uint = 0xcafe_beef;
    /// An unset integer of `ncclConfig_t`.
    NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
    /// `NCCL_VERSION_CODE` of the header whose config layout is used (2.32.3).
    NCCL_VERSION_CODE: c_uint = 23203;
}

library! {
    /// The NCCL library and its functions.
    struct Nccl("NCCL library") {
        fn ncclGetVersion(version: *mut c_int) -> ncclResult_t;
        fn ncclGetErrorString(result: ncclResult_t) -> *const c_char;
        fn ncclGetLastError(comm: ncclComm_t) -> *const c_char;
        fn ncclGetUniqueId(uniqueId: *mut ncclUniqueId) -> ncclResult_t;
        fn ncclCommInitRank(comm: *mut ncclComm_t, nranks: c_int, commId: ncclUniqueId, rank: c_int) -> ncclResult_t;
        fn ncclCommInitRankConfig(
            comm: *mut ncclComm_t,
            nranks: c_int,
            commId: ncclUniqueId,
            rank: c_int,
            config: *mut ncclConfig_t,
        ) -> ncclResult_t;
        fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t;
        fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t;
        fn ncclCommGetAsyncError(comm: ncclComm_t, asyncError: *mut ncclResult_t) -> ncclResult_t;
        fn ncclAllReduce(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            count: usize,
            datatype: ncclDataType_t,
            op: ncclRedOp_t,
            comm: ncclComm_t,
            stream: cudaStream_t,
        ) -> ncclResult_t;
        fn ncclBroadcast(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            count: usize,
            datatype: ncclDataType_t,
            root: c_int,
            comm: ncclComm_t,
            stream: cudaStream_t,
        ) -> ncclResult_t;
        fn ncclAllGather(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            sendcount: usize,
            datatype: ncclDataType_t,
            comm: ncclComm_t,
            stream: cudaStream_t,
        ) -> ncclResult_t;
        fn ncclReduceScatter(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            recvcount: usize,
            datatype: ncclDataType_t,
            op: ncclRedOp_t,
            comm: ncclComm_t,
            stream: cudaStream_t,
        ) -> ncclResult_t;
        fn ncclReduce(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            count: usize,
            datatype: ncclDataType_t,
            op: ncclRedOp_t,
            root: c_int,
            comm: ncclComm_t,
            stream: cudaStream_t,
        ) -> ncclResult_t;
        fn ncclSend(
            sendbuff: *const c_void,
            count: usize,
            datatype: ncclDataType_t,
            peer: c_int,
            comm: ncclComm_t,
            stream: cudaStream_t,
        ) -> ncclResult_t;
        fn ncclRecv(
            recvbuff: *mut c_void,
            count: usize,
            datatype: ncclDataType_t,
            peer: c_int,
            comm: ncclComm_t,
            stream: cudaStream_t,
        ) -> ncclResult_t;
        fn ncclGroupStart() -> ncclResult_t;
        fn ncclGroupEnd() -> ncclResult_t;
    }
}

/// Functions NCCL must export for the vendor to report COLLECTIVES
/// (`ncclGetLastError`, NCCL 2.13+, only improves messages).
pub(crate) const REQUIRED: &[&str] = &[
    "ncclGetVersion",
    "ncclGetErrorString",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclCommGetAsyncError",
    "ncclAllReduce",
    "ncclBroadcast",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclReduce",
    "ncclSend",
    "ncclRecv",
    "ncclGroupStart",
    "ncclGroupEnd",
];
