//! `BS` specifics: bins a sixteenth of a power of two apart, blocks never
//! split, and a request whose bin is empty taking a cached block of up to
//! twice its size (of its own stream) before asking the vendor.

mod common;

use common::{Env, MIB};
use dipu_allocator::{Algorithm, AllocatorConfig};

/// BS with and without thread caches: a freed block may sit in this
/// thread's cache or in the device's bins, and both must be found.
fn configs() -> [(AllocatorConfig, &'static str); 2] {
    let no_caches = AllocatorConfig::parse("thread_caches:False").unwrap();
    [
        (AllocatorConfig::default(), "thread caches"),
        (no_caches, "no thread caches"),
    ]
}

#[test]
fn an_empty_bin_takes_a_cached_block_of_up_to_twice_the_size() {
    for (config, label) in configs() {
        let env = Env::new(64 << 20);
        let alloc = env.allocator_with(0, Algorithm::BinSize, &config);
        let s = env.ctx.default_stream(0).unwrap();
        let big = alloc.allocate(3 * MIB, s).unwrap();
        alloc.free(big.ptr).unwrap();

        let small = alloc.allocate(2 * MIB, s).unwrap();
        assert_eq!(small.ptr, big.ptr, "{label}: the 3 MiB block serves 2 MiB");
        assert_eq!(small.size, 2 * MIB, "{label}: the caller sees its request");
        let st = alloc.stats();
        assert_eq!(st.num_device_alloc, 1, "{label}: no new vendor block");
        assert_eq!(
            st.allocated_bytes.current,
            3 * MIB as u64,
            "{label}: the whole block is allocated (BS never splits)"
        );
        assert_eq!(st.requested_bytes.current, 2 * MIB as u64, "{label}");
        env.upload(0, small.ptr, &vec![7u8; 2 * MIB]);
        assert!(env.download(0, small.ptr, 2 * MIB).iter().all(|&b| b == 7));

        // Freed again, the block goes back to its own (3 MiB) bin.
        alloc.free(small.ptr).unwrap();
        let again = alloc.allocate(3 * MIB, s).unwrap();
        assert_eq!(again.ptr, big.ptr, "{label}: back in the 3 MiB bin");
        assert_eq!(alloc.stats().num_device_alloc, 1, "{label}");
        alloc.free(again.ptr).unwrap();
    }
}

#[test]
fn a_block_over_twice_the_size_is_not_taken() {
    for (config, label) in configs() {
        let env = Env::new(64 << 20);
        let alloc = env.allocator_with(0, Algorithm::BinSize, &config);
        let s = env.ctx.default_stream(0).unwrap();
        let big = alloc.allocate(5 * MIB, s).unwrap();
        alloc.free(big.ptr).unwrap();

        let small = alloc.allocate(2 * MIB, s).unwrap();
        assert_ne!(small.ptr, big.ptr, "{label}: 5 MiB is over twice 2 MiB");
        let st = alloc.stats();
        assert_eq!(st.num_device_alloc, 2, "{label}: a new vendor block");
        assert_eq!(st.allocated_bytes.current, 2 * MIB as u64, "{label}");
        alloc.free(small.ptr).unwrap();
    }
}

#[test]
fn the_smallest_larger_block_is_taken_first() {
    for (config, label) in configs() {
        let env = Env::new(64 << 20);
        let alloc = env.allocator_with(0, Algorithm::BinSize, &config);
        let s = env.ctx.default_stream(0).unwrap();
        let larger = alloc.allocate(3 * MIB + MIB / 2, s).unwrap();
        let smaller = alloc.allocate(2 * MIB + MIB / 4, s).unwrap();
        alloc.free(larger.ptr).unwrap();
        alloc.free(smaller.ptr).unwrap();

        let got = alloc.allocate(2 * MIB, s).unwrap();
        assert_eq!(got.ptr, smaller.ptr, "{label}: 2.25 MiB before 3.5 MiB");
        assert_eq!(alloc.stats().num_device_alloc, 2, "{label}");
        alloc.free(got.ptr).unwrap();
    }
}

#[test]
fn a_larger_block_of_another_stream_is_not_taken() {
    for (config, label) in configs() {
        let env = Env::new(64 << 20);
        let alloc = env.allocator_with(0, Algorithm::BinSize, &config);
        let (s1, s2) = (env.stream(0), env.stream(0));
        let big = alloc.allocate(3 * MIB, s1).unwrap();
        alloc.free(big.ptr).unwrap();

        let other = alloc.allocate(2 * MIB, s2).unwrap();
        assert_ne!(other.ptr, big.ptr, "{label}: cached on another stream");
        assert_eq!(alloc.stats().num_device_alloc, 2, "{label}");
        alloc.free(other.ptr).unwrap();
    }
}
