//! The vendor on the real NVIDIA wheels in `.venv`, without a GPU (and, on
//! a GPU machine, with one): every symbol resolves, the version names the
//! files, errors carry CUDA's and NCCL's names, and a machine without a
//! device answers `NoDevice` everywhere instead of crashing.

use dipu_deviceapi::{Capabilities, DeviceApi, ErrorKind};

use super::venv_lib_dirs;
use crate::cudart::cudaErrorMemoryAllocation;
use crate::nccl::ncclInProgress;
use crate::{CudaVendor, LibrarySearch};

fn vendor() -> CudaVendor {
    CudaVendor::with_search(LibrarySearch::dirs(venv_lib_dirs()))
        .unwrap_or_else(|e| panic!("the vendor on the venv's wheels: {e}"))
}

#[test]
fn every_bound_symbol_exists_in_the_wheels() {
    let v = vendor();
    assert_eq!(
        v.rt.missing(),
        Vec::<&str>::new(),
        "{}",
        v.rt.path().display()
    );
    let nccl = v.nccl.as_ref().expect("NCCL from the venv");
    assert_eq!(
        nccl.missing(),
        Vec::<&str>::new(),
        "{}",
        nccl.path().display()
    );
}

#[test]
fn version_names_every_file() {
    let v = vendor();
    let version = v.version();
    let dirs = venv_lib_dirs();
    assert!(version.starts_with("CUDA runtime 13."), "{version}");
    assert!(
        version.contains(&format!(
            "cudart: {}",
            dirs[0].join("libcudart.so.13").display()
        )),
        "{version}"
    );
    assert!(
        version.contains(&format!(
            "nccl: {} 2.",
            dirs[1].join("libnccl.so.2").display()
        )),
        "{version}"
    );
    assert!(version.ends_with("driver: not searched)"), "{version}");
    assert_eq!(v.capabilities(), Capabilities::COLLECTIVES);
    assert_eq!(v.comm_unique_id_size(), 128);
    assert_eq!(v.name(), "cuda");
}

#[test]
fn errors_carry_cuda_and_nccl_names_and_messages() {
    let v = vendor();
    let e = v.rt.error(cudaErrorMemoryAllocation, "cudaMalloc(1 TiB)");
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert_eq!(e.vendor_code(), Some(2));
    assert_eq!(
        e.message(),
        "cudaMalloc(1 TiB): cudaErrorMemoryAllocation (2): out of memory"
    );
    let nccl = v.nccl.as_ref().unwrap();
    let e = nccl.error(ncclInProgress, "ncclCommInitRank");
    assert_eq!(e.kind(), ErrorKind::NotReady);
    assert!(
        e.message()
            .starts_with("ncclCommInitRank: NCCL operation in progress (ncclResult_t 7)"),
        "{e}"
    );
}

#[test]
fn without_a_device_everything_is_a_clean_error() {
    let v = vendor();
    let count = match v.device_count() {
        Ok(n) => {
            assert!(n >= 1);
            return; // a GPU machine: the GPU tests cover the rest
        }
        Err(e) => e,
    };
    assert_eq!(count.kind(), ErrorKind::NoDevice, "{count}");
    let msg = count.message();
    assert!(
        msg.starts_with(
            "the NVIDIA driver (libcuda.so.1) was not found, so this machine has no usable \
             CUDA device: cudaGetDeviceCount: cudaErrorInsufficientDriver (35): "
        ),
        "{msg}"
    );
    assert_eq!(v.set_device(0).unwrap_err().kind(), ErrorKind::NoDevice);
    assert_eq!(
        v.device_properties(0).unwrap_err().kind(),
        ErrorKind::NoDevice
    );
    for e in [
        v.malloc(16).unwrap_err(),
        v.malloc_host(16).unwrap_err(),
        v.stream_create(0).unwrap_err(),
        v.event_create(true).unwrap_err(),
        v.memory_info().unwrap_err(),
        v.synchronize_device().unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::NoDevice, "{e}");
        assert!(e.vendor_code().is_some(), "{e}");
    }
    assert_eq!(
        v.malloc(0).unwrap(),
        std::ptr::null_mut(),
        "malloc(0) needs no device"
    );
    assert_eq!(
        v.vmm_granularity().unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    let e = v.vmm_reserve(1 << 21).unwrap_err();
    assert!(e.message().contains("libcuda.so.1"), "{e}");
}

#[test]
fn the_default_stream_is_never_destroyed() {
    let v = vendor();
    // SAFETY: the default stream is refused before CUDA is called.
    let e = unsafe { v.stream_destroy(dipu_deviceapi::StreamHandle::DEFAULT) }.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn unique_ids_have_nccls_size() {
    let v = vendor();
    let e = v.comm_init_rank(1, &[0; 16], 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("128 bytes, not 16"), "{e}");
    // Reductions of a type NCCL lacks are Unsupported, before NCCL is called.
    // SAFETY: rejected before any pointer or handle is used.
    let e = unsafe {
        v.all_reduce(
            std::ptr::null(),
            std::ptr::null_mut(),
            1,
            dipu_deviceapi::DataType::I16,
            dipu_deviceapi::ReduceOp::Sum,
            dipu_deviceapi::CommHandle::from_raw(1),
            dipu_deviceapi::StreamHandle::DEFAULT,
        )
    }
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
}
