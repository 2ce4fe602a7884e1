//! A model of DIPU's `BF`: best fit over 128 bins (32 powers of two of
//! 512-byte units, four steps each), each bin a last-in-first-out list; a
//! request takes the newest block of its own bin if that one is large
//! enough, else the newest block of the next non-empty bin. A block is
//! split only when it is at least twice the request or at least 8 MiB
//! larger. Freed blocks merge with free neighbours. When nothing fits, every
//! wholly free vendor allocation is given back and a new one is made of at
//! least the current extension size, which starts at 8 MiB and doubles at
//! every extension, up to 1 GiB.

use std::collections::HashMap;

use super::{round_512, ModelReport};
use crate::replay::{Trace, TraceEvent};

const UNIT: usize = 512;
const BINS: usize = 128;
const MIN_EXTEND: usize = 8 << 20;
const MAX_EXTEND: usize = 1 << 30;
const MAX_INTERNAL_FRAGMENTATION: usize = 8 << 20;

/// The bin of a block of `size` bytes (a multiple of [`UNIT`]).
fn bin_of(size: usize) -> usize {
    let units = size / UNIT;
    let power = (usize::BITS - 1 - units.leading_zeros()) as usize;
    if power > 31 {
        return BINS - 1;
    }
    let step = (units ^ (1 << power)) >> power.saturating_sub(2);
    power * 4 + step
}

/// A block: part of one vendor allocation, with its neighbours there.
struct Chunk {
    size: usize,
    free: bool,
    prev: Option<usize>,
    next: Option<usize>,
}

#[derive(Default)]
struct Model {
    chunks: Vec<Chunk>,
    /// Free chunks per bin, the newest last.
    bins: Vec<Vec<usize>>,
    extend: usize,
    reserved: u64,
    peak: u64,
    mallocs: u64,
    segments: u64,
}

impl Model {
    fn new() -> Model {
        Model {
            bins: vec![Vec::new(); BINS],
            extend: MIN_EXTEND,
            ..Model::default()
        }
    }

    fn insert(&mut self, chunk: usize) {
        self.bins[bin_of(self.chunks[chunk].size)].push(chunk);
    }

    fn remove(&mut self, chunk: usize) {
        let bin = &mut self.bins[bin_of(self.chunks[chunk].size)];
        let at = bin
            .iter()
            .position(|&c| c == chunk)
            .expect("a free chunk is in its bin");
        bin.remove(at);
    }

    /// The cached chunk that serves `size`, taken out of its bin.
    fn find(&mut self, size: usize) -> Option<usize> {
        let own = bin_of(size);
        let newest_fits = self.bins[own]
            .last()
            .is_some_and(|&c| self.chunks[c].size >= size);
        let bin = if newest_fits {
            own
        } else {
            (own + 1..BINS).find(|&b| !self.bins[b].is_empty())?
        };
        self.bins[bin].pop()
    }

    /// Gives back every wholly free vendor allocation, then makes a new one.
    fn extend(&mut self, size: usize) -> usize {
        for bin in 0..BINS {
            let (whole, rest): (Vec<usize>, Vec<usize>) = self.bins[bin].iter().partition(|&&c| {
                let c = &self.chunks[c];
                c.prev.is_none() && c.next.is_none()
            });
            for c in whole {
                self.reserved -= self.chunks[c].size as u64;
                self.segments -= 1;
            }
            self.bins[bin] = rest;
        }
        let mut grew = false;
        while self.extend < size && self.extend < MAX_EXTEND {
            self.extend *= 2;
            grew = true;
        }
        let bytes = size.max(self.extend);
        if !grew && self.extend < MAX_EXTEND {
            self.extend *= 2;
        }
        self.reserved += bytes as u64;
        self.peak = self.peak.max(self.reserved);
        self.mallocs += 1;
        self.segments += 1;
        self.chunks.push(Chunk {
            size: bytes,
            free: true,
            prev: None,
            next: None,
        });
        self.chunks.len() - 1
    }

    fn allocate(&mut self, bytes: usize) -> usize {
        let size = round_512(bytes);
        let chunk = match self.find(size) {
            Some(c) => c,
            None => self.extend(size),
        };
        let have = self.chunks[chunk].size;
        if have >= size * 2 || have >= size + MAX_INTERNAL_FRAGMENTATION {
            let next = self.chunks[chunk].next;
            self.chunks.push(Chunk {
                size: have - size,
                free: true,
                prev: Some(chunk),
                next,
            });
            let rest = self.chunks.len() - 1;
            if let Some(n) = next {
                self.chunks[n].prev = Some(rest);
            }
            self.chunks[chunk].size = size;
            self.chunks[chunk].next = Some(rest);
            self.insert(rest);
        }
        self.chunks[chunk].free = false;
        chunk
    }

    /// Merges `second` (free, out of its bin) into `first`, its neighbour before it.
    fn merge(&mut self, first: usize, second: usize) {
        let (size, next) = (self.chunks[second].size, self.chunks[second].next);
        self.chunks[first].size += size;
        self.chunks[first].next = next;
        if let Some(n) = next {
            self.chunks[n].prev = Some(first);
        }
    }

    fn free(&mut self, chunk: usize) {
        self.chunks[chunk].free = true;
        let mut chunk = chunk;
        if let Some(next) = self.chunks[chunk].next.filter(|&n| self.chunks[n].free) {
            self.remove(next);
            self.merge(chunk, next);
        }
        if let Some(prev) = self.chunks[chunk].prev.filter(|&p| self.chunks[p].free) {
            self.remove(prev);
            self.merge(prev, chunk);
            chunk = prev;
        }
        self.insert(chunk);
    }
}

/// Replays `trace` through the model of DIPU's `BF`.
pub fn dipu_bf(trace: &Trace) -> ModelReport {
    let mut model = Model::new();
    let mut live: HashMap<u64, usize> = HashMap::new();
    for event in &trace.events {
        match *event {
            // DIPU hands out null for zero bytes without touching its cache.
            TraceEvent::Allocate { bytes: 0, .. } => {}
            TraceEvent::Allocate { id, bytes } => {
                let chunk = model.allocate(bytes);
                live.insert(id, chunk);
            }
            TraceEvent::Free { id } => {
                if let Some(chunk) = live.remove(&id) {
                    model.free(chunk);
                }
            }
        }
    }
    ModelReport {
        peak_reserved: model.peak,
        segments: model.segments,
        vendor_mallocs: model.mallocs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn run(text: &str) -> ModelReport {
        dipu_bf(&Trace::parse(text).unwrap())
    }

    #[test]
    fn bins_step_by_a_quarter_of_a_power_of_two() {
        assert_eq!(bin_of(512), 0);
        assert_eq!(bin_of(1024), 4);
        assert_eq!(bin_of(1536), 5);
        assert_eq!(bin_of(4096), 12);
        assert_eq!(bin_of(5120), 13);
        assert_eq!(bin_of(7680), 15);
        assert_eq!(bin_of(usize::MAX / 512 * 512), BINS - 1);
    }

    #[test]
    fn extensions_start_at_8_mib_and_double() {
        // Three blocks that never fit the cached rest: 8, 16, then 32 MiB.
        let r = run("a 0 6291456\na 1 6291456\na 2 12582912\n");
        assert_eq!(r.vendor_mallocs, 3);
        assert_eq!(r.peak_reserved, (8 + 16 + 32) * MIB);
        // A request over the extension size doubles it until it fits.
        let r = run("a 0 20971520\n");
        assert_eq!(r.peak_reserved, 32 * MIB);
        let r = run("a 0 0\nf 0\n");
        assert_eq!(r.vendor_mallocs, 0, "zero bytes reserve nothing");
    }

    #[test]
    fn small_blocks_share_an_extension_and_a_close_fit_is_not_split() {
        // 1 MiB splits the first 8 MiB extension (8 >= 2 x 1), and 3 MiB
        // the 7 MiB rest (7 >= 2 x 3).
        let r = run("a 0 1048576\na 1 3145728\n");
        assert_eq!(r.vendor_mallocs, 1);
        // 7 MiB in the 8 MiB extension: not split (8 < 14 and 8 < 7 + 8),
        // so a 512-byte request after it needs a new extension.
        let r = run("a 0 7340032\na 1 512\n");
        assert_eq!(r.vendor_mallocs, 2);
        assert_eq!(r.peak_reserved, (8 + 16) * MIB);
    }

    #[test]
    fn whole_free_extensions_are_given_back_before_a_new_one() {
        // Block 0 fills the 8 MiB extension unsplit; once it is freed, a
        // 12 MiB request gives that extension back and makes a 16 MiB one.
        let r = run("a 0 7340032\nf 0\na 1 12582912\n");
        assert_eq!(r.vendor_mallocs, 2);
        assert_eq!(r.peak_reserved, 16 * MIB);
        assert_eq!(r.segments, 1);
    }

    #[test]
    fn freed_neighbours_merge() {
        // 1 MiB + 1 MiB split off the 8 MiB extension, both freed: merged
        // back whole, they serve a 7 MiB request without a new extension.
        let r = run("a 0 1048576\na 1 1048576\nf 0\nf 1\na 2 7340032\n");
        assert_eq!(r.vendor_mallocs, 1);
        assert_eq!(r.peak_reserved, 8 * MIB);
    }
}
