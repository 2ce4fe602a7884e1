//! The status codes the fake returns, with NVIDIA's names and messages.

#![expect(non_upper_case_globals, reason = "the C constants' own names")]

use std::ffi::c_char;

use crate::types::{cudaError_t, ncclResult_t, CUresult};

/// `cudaSuccess`.
pub(crate) const cudaSuccess: cudaError_t = 0;
/// `cudaErrorInvalidValue`.
pub(crate) const cudaErrorInvalidValue: cudaError_t = 1;
/// `cudaErrorMemoryAllocation`.
pub(crate) const cudaErrorMemoryAllocation: cudaError_t = 2;
/// `cudaErrorInitializationError`.
pub(crate) const cudaErrorInitializationError: cudaError_t = 3;
/// `cudaErrorInsufficientDriver`.
pub(crate) const cudaErrorInsufficientDriver: cudaError_t = 35;
/// `cudaErrorInvalidDevice`.
pub(crate) const cudaErrorInvalidDevice: cudaError_t = 101;
/// `cudaErrorInvalidResourceHandle`.
pub(crate) const cudaErrorInvalidResourceHandle: cudaError_t = 400;
/// `cudaErrorNotReady`.
pub(crate) const cudaErrorNotReady: cudaError_t = 600;
/// `cudaErrorIllegalAddress`.
pub(crate) const cudaErrorIllegalAddress: cudaError_t = 700;
/// `cudaErrorPeerAccessAlreadyEnabled`.
pub(crate) const cudaErrorPeerAccessAlreadyEnabled: cudaError_t = 704;
/// `cudaErrorNotPermitted`.
pub(crate) const cudaErrorNotPermitted: cudaError_t = 800;

/// `CUDA_SUCCESS`.
pub(crate) const CUDA_SUCCESS: CUresult = 0;
/// `CUDA_ERROR_INVALID_VALUE`.
pub(crate) const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub(crate) const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
/// `CUDA_ERROR_NOT_INITIALIZED`.
pub(crate) const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
/// `CUDA_ERROR_INVALID_DEVICE`.
pub(crate) const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
/// `CUDA_ERROR_INVALID_CONTEXT`.
pub(crate) const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
/// `CUDA_ERROR_INVALID_HANDLE`.
pub(crate) const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;

/// `ncclSuccess`.
pub(crate) const ncclSuccess: ncclResult_t = 0;
/// `ncclUnhandledCudaError`.
pub(crate) const ncclUnhandledCudaError: ncclResult_t = 1;
/// `ncclInvalidArgument`.
pub(crate) const ncclInvalidArgument: ncclResult_t = 4;
/// `ncclInvalidUsage`.
pub(crate) const ncclInvalidUsage: ncclResult_t = 5;
/// `ncclRemoteError`.
pub(crate) const ncclRemoteError: ncclResult_t = 6;
/// `ncclInProgress`.
pub(crate) const ncclInProgress: ncclResult_t = 7;

/// (code, `cudaGetErrorName`, `cudaGetErrorString`) of the runtime.
const RUNTIME: &[(cudaError_t, &str, &str)] = &[
    (0, "cudaSuccess\0", "no error\0"),
    (1, "cudaErrorInvalidValue\0", "invalid argument\0"),
    (2, "cudaErrorMemoryAllocation\0", "out of memory\0"),
    (
        3,
        "cudaErrorInitializationError\0",
        "initialization error\0",
    ),
    (
        35,
        "cudaErrorInsufficientDriver\0",
        "CUDA driver version is insufficient for CUDA runtime version\0",
    ),
    (101, "cudaErrorInvalidDevice\0", "invalid device ordinal\0"),
    (
        400,
        "cudaErrorInvalidResourceHandle\0",
        "invalid resource handle\0",
    ),
    (600, "cudaErrorNotReady\0", "device not ready\0"),
    (
        700,
        "cudaErrorIllegalAddress\0",
        "an illegal memory access was encountered\0",
    ),
    (
        704,
        "cudaErrorPeerAccessAlreadyEnabled\0",
        "peer access is already enabled\0",
    ),
    (800, "cudaErrorNotPermitted\0", "operation not permitted\0"),
];

/// (code, `cuGetErrorName`, `cuGetErrorString`) of the driver.
const DRIVER: &[(CUresult, &str, &str)] = &[
    (0, "CUDA_SUCCESS\0", "no error\0"),
    (1, "CUDA_ERROR_INVALID_VALUE\0", "invalid argument\0"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY\0", "out of memory\0"),
    (3, "CUDA_ERROR_NOT_INITIALIZED\0", "initialization error\0"),
    (
        101,
        "CUDA_ERROR_INVALID_DEVICE\0",
        "invalid device ordinal\0",
    ),
    (
        201,
        "CUDA_ERROR_INVALID_CONTEXT\0",
        "invalid device context\0",
    ),
    (
        400,
        "CUDA_ERROR_INVALID_HANDLE\0",
        "invalid resource handle\0",
    ),
    (
        800,
        "CUDA_ERROR_NOT_PERMITTED\0",
        "operation not permitted\0",
    ),
];

/// NCCL's `ncclGetErrorString` texts.
const NCCL: &[(ncclResult_t, &str)] = &[
    (0, "no error\0"),
    (
        1,
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details)\0",
    ),
    (
        2,
        "unhandled system error (run with NCCL_DEBUG=INFO for details)\0",
    ),
    (
        3,
        "internal error - please report this issue to the NCCL developers\0",
    ),
    (
        4,
        "invalid argument (run with NCCL_DEBUG=WARN for details)\0",
    ),
    (5, "invalid usage (run with NCCL_DEBUG=WARN for details)\0"),
    (6, "remote process exited or there was a network error\0"),
    (7, "NCCL operation in progress\0"),
    (8, "NCCL operation timed out\0"),
];

fn find<'a>(table: &[(i32, &'a str, &'a str)], code: i32, name: bool) -> Option<*const c_char> {
    table
        .iter()
        .find(|e| e.0 == code)
        .map(|e| if name { e.1 } else { e.2 }.as_ptr().cast())
}

/// The runtime's name (or message) of `code`; "unrecognized error code".
pub(crate) fn runtime_text(code: cudaError_t, name: bool) -> *const c_char {
    find(RUNTIME, code, name).unwrap_or(c"unrecognized error code".as_ptr())
}

/// The driver's name (or message) of `code`, if it is one.
pub(crate) fn driver_text(code: CUresult, name: bool) -> Option<*const c_char> {
    find(DRIVER, code, name)
}

/// NCCL's message for `code`.
pub(crate) fn nccl_text(code: ncclResult_t) -> *const c_char {
    NCCL.iter()
        .find(|e| e.0 == code)
        .map_or(c"unknown result code".as_ptr(), |e| e.1.as_ptr().cast())
}
