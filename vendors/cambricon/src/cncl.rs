//! Bindings to CNCL (`libcncl.so`, CNCL 1.25): the functions, types and
//! constants this vendor uses, named as in Cambricon's `cncl.h` and declared
//! from the published API (a public copy of `cncl.h` 1.25.0, DeepLink's and
//! torch_mlu's use of it).

#![expect(
    non_camel_case_types,
    non_upper_case_globals,
    reason = "C names from cncl.h, so the tests can check them"
)]

use std::ffi::{c_char, c_int, c_void};

use crate::bind::{c_consts, c_types, library};
use crate::cnrt::cnrtQueue_t;

/// Bytes of a clique id's data (`CNCL_CLIQUE_ID_BYTES_SIZE`).
pub(crate) const CNCL_CLIQUE_ID_BYTES_SIZE: usize = 128;

/// `struct cnclCliqueId`: 128 bytes of data and a 64-bit hash, 136 bytes
/// in all. DIPU and torch_mlu send only the first 128 between ranks; this
/// vendor sends all of it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct CnclCliqueId {
    /// `data`.
    pub(crate) data: [c_char; CNCL_CLIQUE_ID_BYTES_SIZE],
    /// `hash`.
    pub(crate) hash: u64,
}

c_types! {
    /// `cnclResult_t`.
    cnclResult_t = c_int;
    /// `cnclComm_t`.
    cnclComm_t = *mut c_void;
    /// `cnclDataType_t`.
    cnclDataType_t = c_int;
    /// `cnclReduceOp_t`.
    cnclReduceOp_t = c_int;
    /// `cnclCliqueId`.
    cnclCliqueId = CnclCliqueId;
}

c_consts! {
    /// No error.
    CNCL_RET_SUCCESS: cnclResult_t = 0;
    /// An internal error.
    CNCL_RET_ERR_INTERNAL: cnclResult_t = 0x01;
    /// Work is in progress (not an error).
    CNCL_RET_ASYNC_IN_PROGRESS: cnclResult_t = 0x06;
    /// A bad argument.
    CNCL_RET_ERR_ARGUMENTS: cnclResult_t = 0x07;
    /// The communicator failed asynchronously.
    CNCL_RET_ASYNC_ERROR: cnclResult_t = 0x16;

    /// IEEE half precision.
    cnclHalf: cnclDataType_t = 0x10;
    /// bfloat16.
    cnclBfloat16: cnclDataType_t = 0x11;
    /// IEEE single precision.
    cnclFloat: cnclDataType_t = 0x12;
    /// Signed 8-bit integer.
    cnclInt8: cnclDataType_t = 0x20;
    /// Signed 16-bit integer.
    cnclInt16: cnclDataType_t = 0x21;
    /// Signed 32-bit integer.
    cnclInt32: cnclDataType_t = 0x22;
    /// Signed 64-bit integer.
    cnclInt64: cnclDataType_t = 0x23;
    /// Unsigned 8-bit integer.
    cnclUint8: cnclDataType_t = 0x30;
    /// Unsigned 32-bit integer.
    cnclUint32: cnclDataType_t = 0x32;
    /// Unsigned 64-bit integer.
    cnclUint64: cnclDataType_t = 0x33;

    /// Sum.
    cnclSum: cnclReduceOp_t = 0;
    /// Product.
    cnclProd: cnclReduceOp_t = 1;
    /// Maximum.
    cnclMax: cnclReduceOp_t = 2;
    /// Minimum.
    cnclMin: cnclReduceOp_t = 3;
}

library! {
    /// CNCL and its functions.
    struct Cncl("CNCL library") {
        fn cnclGetErrorStr(ret: cnclResult_t) -> *const c_char;
        fn cnclGetLibVersion(major: *mut c_int, minor: *mut c_int, patch: *mut c_int) -> cnclResult_t;
        fn cnclGetCliqueId(clique_id: *mut cnclCliqueId) -> cnclResult_t;
        fn cnclInitComms(
            comms: *mut cnclComm_t,
            num_comm: c_int,
            dev_list: *const c_int,
            rank_list: *const c_int,
            nrank: c_int,
            clique_id: *const cnclCliqueId,
        ) -> cnclResult_t;
        fn cnclFreeComm(comm: cnclComm_t) -> cnclResult_t;
        fn cnclAbortComm(comm: cnclComm_t) -> cnclResult_t;
        fn cnclGetCommAsyncError(comm: cnclComm_t) -> cnclResult_t;
        fn cnclAllReduce(
            send_buffer: *const c_void,
            recv_buffer: *mut c_void,
            count: usize,
            data_type: cnclDataType_t,
            reduce_op: cnclReduceOp_t,
            comm: cnclComm_t,
            queue: cnrtQueue_t,
        ) -> cnclResult_t;
        fn cnclBroadcast(
            send_buffer: *const c_void,
            recv_buffer: *mut c_void,
            count: usize,
            data_type: cnclDataType_t,
            root: c_int,
            comm: cnclComm_t,
            queue: cnrtQueue_t,
        ) -> cnclResult_t;
        fn cnclBcast(
            buffer: *mut c_void,
            count: usize,
            data_type: cnclDataType_t,
            root: c_int,
            comm: cnclComm_t,
            queue: cnrtQueue_t,
        ) -> cnclResult_t;
        fn cnclAllGather(
            send_buffer: *const c_void,
            recv_buffer: *mut c_void,
            count: usize,
            data_type: cnclDataType_t,
            comm: cnclComm_t,
            queue: cnrtQueue_t,
        ) -> cnclResult_t;
        fn cnclReduceScatter(
            send_buffer: *const c_void,
            recv_buffer: *mut c_void,
            count: usize,
            data_type: cnclDataType_t,
            reduce_op: cnclReduceOp_t,
            comm: cnclComm_t,
            queue: cnrtQueue_t,
        ) -> cnclResult_t;
        fn cnclReduce(
            send_buffer: *const c_void,
            recv_buffer: *mut c_void,
            count: usize,
            data_type: cnclDataType_t,
            reduce_op: cnclReduceOp_t,
            root: c_int,
            comm: cnclComm_t,
            queue: cnrtQueue_t,
        ) -> cnclResult_t;
        fn cnclSend(
            buffer: *mut c_void,
            count: usize,
            data_type: cnclDataType_t,
            dest: c_int,
            comm: cnclComm_t,
            queue: cnrtQueue_t,
        ) -> cnclResult_t;
        fn cnclRecv(
            buffer: *mut c_void,
            count: usize,
            data_type: cnclDataType_t,
            source: c_int,
            comm: cnclComm_t,
            queue: cnrtQueue_t,
        ) -> cnclResult_t;
        fn cnclGroupStart() -> cnclResult_t;
        fn cnclGroupEnd() -> cnclResult_t;
    }
}

/// Functions CNCL must export for the vendor to report COLLECTIVES.
pub(crate) const REQUIRED: &[&str] = &[
    "cnclGetErrorStr",
    "cnclGetCliqueId",
    "cnclInitComms",
    "cnclFreeComm",
    "cnclGetCommAsyncError",
    "cnclAllReduce",
    "cnclBroadcast",
    "cnclBcast",
    "cnclAllGather",
    "cnclReduceScatter",
    "cnclReduce",
    "cnclSend",
    "cnclRecv",
    "cnclGroupStart",
    "cnclGroupEnd",
];
