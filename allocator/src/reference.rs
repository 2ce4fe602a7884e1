//! Models of DeepLink DIPU's own caching allocators, replayed on a trace so
//! that our algorithms can be compared with theirs side by side
//! (`dipu replay --all`). The models keep only what decides how much
//! memory is reserved: which cached block serves a request, when blocks are
//! split, merged and given back, and how large a new vendor allocation is.
//! The rules were read from DIPU's `DIPUBFCachingAllocator.cpp` and
//! `DIPUBSCachingAllocator.cpp` (2024); both ignore streams, so the models
//! replay the trace as one stream.

mod dipu_bf;

use std::collections::HashMap;

use crate::replay::{Trace, TraceEvent};

pub use dipu_bf::dipu_bf;

/// What a model reserved over a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelReport {
    /// Peak of the bytes held from the vendor.
    pub peak_reserved: u64,
    /// Vendor allocations held at the end of the trace.
    pub segments: u64,
    /// Vendor allocations made.
    pub vendor_mallocs: u64,
}

/// `bytes` (nonzero) rounded up to DIPU's 512-byte allocation unit.
fn round_512(bytes: usize) -> usize {
    bytes.div_ceil(512) * 512
}

/// DIPU's `BS` in its default mode: requests rounded to 512 bytes, a free
/// list per rounded size, a request served only from its own size's list
/// (never split, never merged), and nothing given back to the vendor
/// unless it runs out of memory (which a replay never does).
pub fn dipu_bs(trace: &Trace) -> ModelReport {
    let mut idle: HashMap<usize, u64> = HashMap::new();
    let mut live: HashMap<u64, usize> = HashMap::new();
    let (mut reserved, mut peak, mut mallocs) = (0u64, 0u64, 0u64);
    for event in &trace.events {
        match *event {
            // DIPU hands out null for zero bytes without touching its cache.
            TraceEvent::Allocate { bytes: 0, .. } => {}
            TraceEvent::Allocate { id, bytes } => {
                let size = round_512(bytes);
                match idle.get_mut(&size).filter(|n| **n > 0) {
                    Some(n) => *n -= 1,
                    None => {
                        reserved += size as u64;
                        peak = peak.max(reserved);
                        mallocs += 1;
                    }
                }
                live.insert(id, size);
            }
            TraceEvent::Free { id } => {
                if let Some(size) = live.remove(&id) {
                    *idle.entry(size).or_default() += 1;
                }
            }
        }
    }
    ModelReport {
        peak_reserved: peak,
        segments: mallocs,
        vendor_mallocs: mallocs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dipu_bs_reuses_only_the_same_rounded_size_and_never_gives_back() {
        // 1000 and 1024 share the 1024 list; 2000 needs its own block
        // although a larger free block (4096) is cached.
        let trace =
            Trace::parse("a 0 4096\nf 0\na 1 1000\nf 1\na 2 1024\na 3 2000\nf 2\nf 3\n").unwrap();
        let r = dipu_bs(&trace);
        assert_eq!(r.vendor_mallocs, 3, "4096, 1024 and 2048 byte blocks");
        let zero = dipu_bs(&Trace::parse("a 0 0\na 1 0\nf 0\nf 1\n").unwrap());
        assert_eq!(zero.vendor_mallocs, 0, "zero bytes reserve nothing");
        assert_eq!(r.peak_reserved, 4096 + 1024 + 2048);
        assert_eq!(r.segments, 3, "nothing is given back");
    }
}
