//! Pointer lookups through the allocators' own block maps: `find` (the
//! live allocation holding an address, interior pointers included) and
//! `DeviceAllocators::find`/`device_of` (which device's segment an address
//! is in), for every algorithm, through every state a block passes:
//! allocated, freed into this thread's cache, handed out again from it,
//! freed on another thread, given back to the vendor.

#[macro_use]
mod common;

use common::Env;
use dipu_allocator::{Algorithm, AllocatorConfig, DeviceAllocators, LiveBlock};

per_algorithm!(
    find_follows_a_block_through_its_life,
    the_device_map_names_each_pointers_device,
);

fn find_follows_a_block_through_its_life(alg: Algorithm) {
    let env = Env::new(256 << 20);
    let alloc = env.allocator(0, alg);
    let s = env.ctx.default_stream(0).unwrap();
    let a = alloc.allocate(1000, s).unwrap();
    let base = a.ptr as usize;
    let live = Some(LiveBlock {
        addr: base,
        requested: 1000,
    });
    assert_eq!(alloc.find(base), live, "{alg}: the start");
    assert_eq!(
        alloc.find(base + 999),
        live,
        "{alg}: the last requested byte"
    );
    assert_eq!(
        alloc.find(base + 1000),
        None,
        "{alg}: past the bytes requested"
    );
    assert_eq!(alloc.find(base - 1), None, "{alg}: before the start");
    alloc.free(a.ptr).unwrap();
    assert_eq!(alloc.find(base), None, "{alg}: freed (cached, not live)");
    assert_eq!(alloc.find(base + 8), None, "{alg}: freed, inside");
    // Handed out again (from this thread's cache for BF and BS).
    let b = alloc.allocate(1000, s).unwrap();
    let again = Some(LiveBlock {
        addr: b.ptr as usize,
        requested: 1000,
    });
    assert_eq!(alloc.find(b.ptr as usize + 500), again, "{alg}: live again");
    // Freed on another thread: the device takes it back from this one's cache.
    let p = b.ptr as usize;
    std::thread::scope(|t| {
        t.spawn(|| alloc.free(p as *mut _).unwrap());
    });
    assert_eq!(alloc.find(p), None, "{alg}: freed on another thread");
    let c = alloc.allocate(3 << 20, s).unwrap();
    assert_eq!(
        alloc.find(c.ptr as usize + (2 << 20)).map(|l| l.addr),
        Some(c.ptr as usize),
        "{alg}: deep inside a large allocation"
    );
    alloc.free(c.ptr).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.find(c.ptr as usize), None, "{alg}: given back");
}

fn the_device_map_names_each_pointers_device(alg: Algorithm) {
    let env = Env::new(256 << 20);
    let all = DeviceAllocators::new(env.ctx, alg, AllocatorConfig::default());
    let s0 = env.ctx.default_stream(0).unwrap();
    let s1 = env.ctx.default_stream(1).unwrap();
    let a = all.get(0).unwrap().allocate(4096, s0).unwrap();
    let b = all.get(1).unwrap().allocate(4096, s1).unwrap();
    let (pa, pb) = (a.ptr as usize, b.ptr as usize);
    assert_eq!(all.device_of(pa), Some(0), "{alg}");
    assert_eq!(all.device_of(pb + 100), Some(1), "{alg}");
    let host = [0u8; 64];
    assert_eq!(
        all.device_of(host.as_ptr() as usize),
        None,
        "{alg}: host memory"
    );
    assert_eq!(
        all.find(pb + 100).map(|(d, l)| (d, l.addr)),
        Some((1, pb)),
        "{alg}"
    );
    assert_eq!(
        all.find(pa).map(|(d, l)| (d, l.requested)),
        Some((0, 4096)),
        "{alg}"
    );
    // The other device's allocator does not know the pointer.
    assert_eq!(all.get(0).unwrap().find(pb), None, "{alg}");
    assert!(
        all.get(0).unwrap().free(b.ptr).is_err(),
        "{alg}: freed on the wrong device"
    );
    all.get(1).unwrap().free(b.ptr).unwrap();
    all.get(0).unwrap().free(a.ptr).unwrap();
    assert_eq!(all.find(pa), None, "{alg}: freed");
    for d in 0..2 {
        all.get(d).unwrap().empty_cache().unwrap();
    }
    assert_eq!(all.device_of(pa), None, "{alg}: segment given back");
    assert_eq!(all.device_of(pb), None, "{alg}: segment given back");
}

/// Expandable segments: the reserved range is in the map from its first
/// use, and blocks carved from it are found like any other.
#[test]
fn expandable_reservations_are_found() {
    let env = Env::new(256 << 20);
    let config = AllocatorConfig::parse("expandable_segments:True").unwrap();
    let all = DeviceAllocators::new(env.ctx, Algorithm::BestFit, config);
    let s = env.ctx.default_stream(1).unwrap();
    let alloc = all.get(1).unwrap();
    let a = alloc.allocate(5 << 20, s).unwrap();
    let b = alloc.allocate(1 << 20, s).unwrap();
    for (p, len) in [(a.ptr as usize, 5 << 20), (b.ptr as usize, 1 << 20)] {
        assert_eq!(
            all.find(p + len - 1),
            Some((
                1,
                LiveBlock {
                    addr: p,
                    requested: len
                }
            ))
        );
    }
    alloc.free(a.ptr).unwrap();
    assert_eq!(all.find(a.ptr as usize), None);
    assert_eq!(all.device_of(a.ptr as usize), Some(1), "still reserved");
    alloc.free(b.ptr).unwrap();
}
