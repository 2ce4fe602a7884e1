//! Bindings to HCCL (`libhccl.so`): the functions, types and constants this
//! vendor uses, named as in `hccl.h` and `hccl_types.h` and checked against
//! both header versions by the header test. `HcclCommConfig` is never used:
//! its size changed (312 to 2240 bytes) between the two versions.

use std::ffi::{c_char, c_int, c_void};

use crate::acl::aclrtStream;
use crate::bind::{c_consts, c_types, library};

/// Bytes of `HcclRootInfo`, HCCL's unique id.
pub(crate) const HCCL_ROOT_INFO_BYTES: usize = 4108;

c_types! {
    /// `HcclResult`.
    HcclResult = c_int;
    /// `HcclComm`.
    HcclComm = *mut c_void;
    /// `HcclDataType`.
    HcclDataType = c_int;
    /// `HcclReduceOp`.
    HcclReduceOp = c_int;
    /// `HcclRootInfo`: the unique id.
    HcclRootInfo = HcclRootInfoBytes;
    /// `HcclSendRecvItem`: one send or receive of `HcclBatchSendRecv`.
    HcclSendRecvItem = HcclSendRecvItemDef;
}

/// `HcclRootInfo`: `char internal[4108]`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct HcclRootInfoBytes {
    /// The id's bytes.
    pub(crate) internal: [c_char; HCCL_ROOT_INFO_BYTES],
}

/// `HcclSendRecvItem`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct HcclSendRecvItemDef {
    /// `HcclSendRecvType`: [`HCCL_SEND`] or [`HCCL_RECV`].
    pub(crate) send_recv_type: c_int,
    /// The buffer.
    pub(crate) buf: *mut c_void,
    /// Elements.
    pub(crate) count: u64,
    /// `HcclDataType`.
    pub(crate) data_type: HcclDataType,
    /// The peer.
    pub(crate) remote_rank: u32,
}

c_consts! {
    /// Success.
    HCCL_SUCCESS: HcclResult = 0;
    /// A bad parameter.
    HCCL_E_PARA: HcclResult = 1;
    /// A null pointer.
    HCCL_E_PTR: HcclResult = 2;
    /// Out of memory.
    HCCL_E_MEMORY: HcclResult = 3;
    /// Not supported.
    HCCL_E_NOT_SUPPORT: HcclResult = 5;
    /// Timed out.
    HCCL_E_TIMEOUT: HcclResult = 9;
    /// Try again.
    HCCL_E_AGAIN: HcclResult = 20;

    /// Sum.
    HCCL_REDUCE_SUM: HcclReduceOp = 0;
    /// Product.
    HCCL_REDUCE_PROD: HcclReduceOp = 1;
    /// Maximum.
    HCCL_REDUCE_MAX: HcclReduceOp = 2;
    /// Minimum.
    HCCL_REDUCE_MIN: HcclReduceOp = 3;

    /// int8.
    HCCL_DATA_TYPE_INT8: HcclDataType = 0;
    /// int16.
    HCCL_DATA_TYPE_INT16: HcclDataType = 1;
    /// int32.
    HCCL_DATA_TYPE_INT32: HcclDataType = 2;
    /// float16.
    HCCL_DATA_TYPE_FP16: HcclDataType = 3;
    /// float32.
    HCCL_DATA_TYPE_FP32: HcclDataType = 4;
    /// int64.
    HCCL_DATA_TYPE_INT64: HcclDataType = 5;
    /// uint64.
    HCCL_DATA_TYPE_UINT64: HcclDataType = 6;
    /// uint8.
    HCCL_DATA_TYPE_UINT8: HcclDataType = 7;
    /// uint32.
    HCCL_DATA_TYPE_UINT32: HcclDataType = 9;
    /// float64.
    HCCL_DATA_TYPE_FP64: HcclDataType = 10;
    /// bfloat16.
    HCCL_DATA_TYPE_BFP16: HcclDataType = 11;

    /// `HcclSendRecvType`: a send.
    HCCL_SEND: c_int = 0;
    /// `HcclSendRecvType`: a receive.
    HCCL_RECV: c_int = 1;
}

/// The functions absent from the older (torch-npu 2.1.0) headers.
#[cfg(test)]
pub(crate) const OPTIONAL: &[&str] = &["HcclGroupStart", "HcclGroupEnd", "HcclGetErrorString"];

/// The functions without which the vendor reports no COLLECTIVES.
pub(crate) const REQUIRED: &[&str] = &[
    "HcclGetRootInfo",
    "HcclCommInitRootInfo",
    "HcclCommDestroy",
    "HcclAllReduce",
    "HcclBroadcast",
    "HcclAllGather",
    "HcclReduceScatter",
    "HcclReduce",
    "HcclSend",
    "HcclRecv",
    "HcclBatchSendRecv",
    "HcclGetCommAsyncError",
];

library! {
    /// HCCL and its functions.
    struct Hccl("HCCL library") {
        fn HcclGetRootInfo(rootInfo: *mut HcclRootInfo) -> HcclResult;
        fn HcclCommInitRootInfo(nRanks: u32, rootInfo: *const HcclRootInfo, rank: u32, comm: *mut HcclComm) -> HcclResult;
        fn HcclCommDestroy(comm: HcclComm) -> HcclResult;
        fn HcclGetErrorString(code: HcclResult) -> *const c_char;
        fn HcclGetCommAsyncError(comm: HcclComm, asyncError: *mut HcclResult) -> HcclResult;
        fn HcclAllReduce(
            sendBuf: *mut c_void,
            recvBuf: *mut c_void,
            count: u64,
            dataType: HcclDataType,
            op: HcclReduceOp,
            comm: HcclComm,
            stream: aclrtStream,
        ) -> HcclResult;
        fn HcclBroadcast(buf: *mut c_void, count: u64, dataType: HcclDataType, root: u32, comm: HcclComm, stream: aclrtStream) -> HcclResult;
        fn HcclAllGather(
            sendBuf: *mut c_void,
            recvBuf: *mut c_void,
            sendCount: u64,
            dataType: HcclDataType,
            comm: HcclComm,
            stream: aclrtStream,
        ) -> HcclResult;
        fn HcclReduceScatter(
            sendBuf: *mut c_void,
            recvBuf: *mut c_void,
            recvCount: u64,
            dataType: HcclDataType,
            op: HcclReduceOp,
            comm: HcclComm,
            stream: aclrtStream,
        ) -> HcclResult;
        fn HcclReduce(
            sendBuf: *mut c_void,
            recvBuf: *mut c_void,
            count: u64,
            dataType: HcclDataType,
            op: HcclReduceOp,
            root: u32,
            comm: HcclComm,
            stream: aclrtStream,
        ) -> HcclResult;
        fn HcclSend(sendBuf: *mut c_void, count: u64, dataType: HcclDataType, destRank: u32, comm: HcclComm, stream: aclrtStream) -> HcclResult;
        fn HcclRecv(recvBuf: *mut c_void, count: u64, dataType: HcclDataType, srcRank: u32, comm: HcclComm, stream: aclrtStream) -> HcclResult;
        fn HcclBatchSendRecv(sendRecvInfo: *mut HcclSendRecvItem, itemNum: u32, comm: HcclComm, stream: aclrtStream) -> HcclResult;
        fn HcclGroupStart() -> HcclResult;
        fn HcclGroupEnd() -> HcclResult;
    }
}
