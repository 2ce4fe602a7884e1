//! Our codes to CUDA's and NCCL's: translated, never cast.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dipu_deviceapi::{CopyKind, DataType, ErrorKind, HostCallback, ReduceOp};

use crate::collectives::{nccl_op, nccl_type};
use crate::cudart::*;
use crate::errors::{cuda_kind, driver_kind, nccl_kind};
use crate::memory::memcpy_kind;
use crate::nccl::*;

#[test]
fn copy_kinds() {
    assert_eq!(memcpy_kind(CopyKind::HostToHost), 0);
    assert_eq!(memcpy_kind(CopyKind::HostToDevice), 1);
    assert_eq!(memcpy_kind(CopyKind::DeviceToHost), 2);
    assert_eq!(memcpy_kind(CopyKind::DeviceToDevice), 3);
    assert_ne!(
        memcpy_kind(CopyKind::HostToDevice),
        CopyKind::HostToDevice as i32
    );
}

#[test]
fn data_types() {
    let expected = [
        (DataType::F16, Some(6)),
        (DataType::BF16, Some(9)),
        (DataType::F32, Some(7)),
        (DataType::F64, Some(8)),
        (DataType::I8, Some(0)),
        (DataType::U8, Some(1)),
        (DataType::I32, Some(2)),
        (DataType::I64, Some(4)),
        (DataType::I16, None),
        (DataType::U32, Some(3)),
        (DataType::U64, Some(5)),
    ];
    assert_eq!(expected.len(), DataType::ALL.len());
    for (ours, theirs) in expected {
        assert_eq!(nccl_type(ours), theirs, "{ours:?}");
    }
}

#[test]
fn reduce_ops_swap_min_and_max() {
    assert_eq!(nccl_op(ReduceOp::Sum), Some(ncclSum));
    assert_eq!(nccl_op(ReduceOp::Prod), Some(ncclProd));
    assert_eq!(nccl_op(ReduceOp::Min), Some(3));
    assert_eq!(nccl_op(ReduceOp::Max), Some(2));
    assert_eq!(nccl_op(ReduceOp::Avg), Some(ncclAvg));
}

#[test]
fn error_kinds() {
    assert_eq!(cuda_kind(cudaErrorMemoryAllocation), ErrorKind::OutOfMemory);
    assert_eq!(cuda_kind(cudaErrorInvalidValue), ErrorKind::InvalidArgument);
    assert_eq!(cuda_kind(cudaErrorNoDevice), ErrorKind::NoDevice);
    assert_eq!(cuda_kind(cudaErrorInsufficientDriver), ErrorKind::NoDevice);
    assert_eq!(cuda_kind(cudaErrorNotReady), ErrorKind::NotReady);
    assert_eq!(
        cuda_kind(cudaErrorInvalidResourceHandle),
        ErrorKind::InvalidArgument
    );
    assert_eq!(cuda_kind(cudaErrorInvalidDevice), ErrorKind::InvalidDevice);
    assert_eq!(
        cuda_kind(700),
        ErrorKind::VendorError,
        "cudaErrorIllegalAddress"
    );
    assert_eq!(driver_kind(2), ErrorKind::OutOfMemory);
    assert_eq!(driver_kind(100), ErrorKind::NoDevice);
    assert_eq!(driver_kind(999), ErrorKind::VendorError);
    assert_eq!(nccl_kind(ncclInvalidArgument), ErrorKind::InvalidArgument);
    assert_eq!(nccl_kind(ncclInProgress), ErrorKind::NotReady);
    assert_eq!(nccl_kind(ncclTimeout), ErrorKind::Timeout);
    assert_eq!(nccl_kind(ncclRemoteError), ErrorKind::VendorError);
}

/// Calls the trampoline as CUDA would, with a leaked boxed callback.
fn call_as_cuda(callback: HostCallback) {
    let data = Box::into_raw(Box::new(callback)).cast();
    crate::streams::trampoline(data);
}

#[test]
fn the_host_function_trampoline_runs_once_and_contains_panics() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    call_as_cuda(Box::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    }));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    call_as_cuda(Box::new(|| panic!("a callback that panics")));
}
