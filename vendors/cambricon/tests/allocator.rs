//! Every allocator algorithm, with and without expandable segments (CNDrv
//! virtual memory), on the Cambricon vendor over the fake: data survives
//! a round trip in every block, memory is reused after frees, and emptying
//! the cache gives every byte back to the device (mapped chunks included).

mod common;

use std::ffi::c_void;
use std::sync::OnceLock;

use dipu_allocator::{new_device_allocator, Algorithm, AllocatorConfig};
use dipu_deviceapi::{CopyKind, ErrorKind, Loader, VendorSpec};
use dipu_stream::DeviceContext;

fn ctx() -> &'static DeviceContext {
    home_and_ctx().1
}

fn home_and_ctx() -> &'static (tempfile::TempDir, &'static DeviceContext) {
    static CTX: OnceLock<(tempfile::TempDir, &'static DeviceContext)> = OnceLock::new();
    CTX.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        common::fake_neuware(dir.path());
        // SAFETY: set once, before the fake is loaded, under the OnceLock.
        std::env::set_var("NEUWARE_HOME", dir.path());
        std::env::set_var("DIPU_FAKE_MEMORY", (512u64 << 20).to_string());
        std::env::set_var("DIPU_FAKE_TRACE", dir.path().join("trace.txt"));
        let api = Loader::new()
            .load(&VendorSpec::Path(common::plugin_path()))
            .unwrap()
            .api;
        (dir, DeviceContext::new(api).unwrap())
    })
}

fn write(ptr: *mut c_void, data: &[u8]) {
    // SAFETY: `ptr` is a live block of at least `data.len()` bytes.
    unsafe {
        ctx().api().memcpy(
            ptr,
            data.as_ptr().cast(),
            data.len(),
            CopyKind::HostToDevice,
        )
    }
    .unwrap();
}

fn read(ptr: *const c_void, bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes];
    // SAFETY: `ptr` is a live block of at least `bytes` bytes.
    unsafe {
        ctx()
            .api()
            .memcpy(out.as_mut_ptr().cast(), ptr, bytes, CopyKind::DeviceToHost)
    }
    .unwrap();
    out
}

#[test]
fn every_algorithm_with_and_without_expandable_segments() {
    let ctx = ctx();
    let baseline = ctx.api().memory_info().unwrap().free;
    let sizes = [1usize, 1000, 1 << 20, (3 << 20) + 17, 8 << 20];
    let mut ran = Vec::new();
    for algorithm in Algorithm::ALL {
        for expandable in [false, true] {
            let config = AllocatorConfig {
                expandable_segments: expandable,
                ..AllocatorConfig::default()
            };
            let what = format!("{algorithm:?}, expandable {expandable}");
            let alloc = match new_device_allocator(ctx, 0, algorithm, &config) {
                Ok(a) => a,
                Err(e) => {
                    // Expandable segments exist for TORCH and BF only.
                    let takes = matches!(algorithm, Algorithm::Torch | Algorithm::BestFit);
                    assert!(expandable && !takes, "{what}: {e}");
                    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{what}: {e}");
                    continue;
                }
            };
            let stream = ctx.new_stream(0, 0).unwrap();
            for round in 0..2u8 {
                let blocks: Vec<_> = sizes
                    .iter()
                    .map(|&n| alloc.allocate(n, stream).unwrap())
                    .collect();
                for (i, b) in blocks.iter().enumerate() {
                    let data: Vec<u8> = (0..b.size)
                        .map(|k| (k as u8) ^ (i as u8 * 37 + round))
                        .collect();
                    write(b.ptr, &data);
                    assert_eq!(
                        read(b.ptr, b.size),
                        data,
                        "{what}, block {i}, round {round}"
                    );
                }
                for b in &blocks {
                    alloc.free(b.ptr).unwrap();
                }
                // SAFETY: a live stream of this context.
                unsafe { ctx.api().stream_synchronize(stream.raw()) }.unwrap();
            }
            let st = alloc.stats();
            assert_eq!(st.allocated_bytes.current, 0, "{what}");
            alloc.empty_cache().unwrap();
            assert_eq!(alloc.stats().reserved_bytes.current, 0, "{what}");
            assert_eq!(
                ctx.api().memory_info().unwrap().free,
                baseline,
                "{what}: the device did not get all its memory back"
            );
            ran.push(what);
        }
    }
    assert_eq!(ran.len(), 6, "{ran:?}");
    // Expandable segments really went through CNDrv's virtual memory.
    let trace = std::fs::read_to_string(home_and_ctx().0.path().join("trace.txt")).unwrap();
    for call in [
        "cnMemAddressReserve",
        "cnMemCreate",
        "cnMemMap",
        "cnMemSetAccess",
        "cnMemUnmap",
        "cnMemRelease",
        "cnMemAddressFree",
    ] {
        assert!(
            trace.lines().any(|l| l.starts_with(&format!("{call} "))),
            "{call} never called"
        );
    }
}
