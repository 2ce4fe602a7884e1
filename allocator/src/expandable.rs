//! Expandable segments: one reserved address range per stream, backed by
//! physical chunks mapped granule by granule as blocks need them, so a
//! growing workload extends one segment instead of adding new ones, and
//! free granules can be unmapped wherever they are.

use rustc_hash::FxHashMap as HashMap;

use dipu_deviceapi::{Capabilities, Error, ErrorKind, PhysicalMemHandle, Result};
use dipu_stream::{DeviceContext, DeviceGuard, Stream};

use crate::arena::{Arena, BlockId, SegmentId, Use};

/// One stream's reserved range and which of its granules are mapped.
#[derive(Debug)]
pub(crate) struct Expandable {
    pub(crate) segment: SegmentId,
    base: usize,
    granules: Vec<Option<PhysicalMemHandle>>,
    /// How many granules are mapped.
    mapped: usize,
}

/// The vendor's virtual-memory calls for one device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Vm {
    ctx: &'static DeviceContext,
    device: i32,
    pub(crate) granularity: usize,
}

/// The expandable segments of one device allocator.
#[derive(Debug)]
pub(crate) struct Expandables {
    pub(crate) vm: Vm,
    /// Bytes of address space reserved per stream.
    span: usize,
    pub(crate) by_stream: HashMap<Stream, Expandable>,
    /// The most bytes the allocator has reserved (in any segment) since it
    /// was made or its cache was last emptied, as seen when mapping: free
    /// granules stay mapped while mapping more keeps reserved memory under
    /// it, and are unmapped before it would be passed.
    pub(crate) high_water: u64,
}

impl Expandables {
    /// Expandable segments over `ctx`'s vendor, each spanning `bytes` (the
    /// device's memory: the memory fraction limits what is mapped, not the
    /// address space); `Unsupported` when the vendor has no virtual-memory
    /// capability.
    pub(crate) fn new(ctx: &'static DeviceContext, device: i32, bytes: u64) -> Result<Expandables> {
        if !ctx
            .api()
            .capabilities()
            .contains(Capabilities::VIRTUAL_MEMORY)
        {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "expandable_segments needs the vendor's virtual-memory capability, which `{}` lacks: \
                     remove expandable_segments from DIPU_ALLOC_CONF",
                    ctx.api().name()
                ),
            ));
        }
        let granularity = {
            let _guard = DeviceGuard::new(ctx, device)?;
            ctx.api().vmm_granularity()?
        };
        let span = (bytes as usize).div_ceil(granularity) * granularity;
        Ok(Expandables {
            vm: Vm {
                ctx,
                device,
                granularity,
            },
            span,
            by_stream: HashMap::default(),
            high_water: 0,
        })
    }

    /// The stream's segment, reserving its address range on first use;
    /// returns the segment's first block when it was just created.
    pub(crate) fn reserve(&mut self, arena: &mut Arena, stream: Stream) -> Result<Option<BlockId>> {
        if self.by_stream.contains_key(&stream) {
            return Ok(None);
        }
        let base = {
            let _guard = DeviceGuard::new(self.vm.ctx, self.vm.device)?;
            self.vm.ctx.api().vmm_reserve(self.span)? as usize
        };
        let block = arena.add_segment(base, self.span, stream, crate::Pool::Large);
        let granules = vec![None; self.span / self.vm.granularity];
        self.by_stream.insert(
            stream,
            Expandable {
                segment: arena.blocks[block].segment,
                base,
                granules,
                mapped: 0,
            },
        );
        Ok(Some(block))
    }

    /// Bytes mapped in the segment.
    pub(crate) fn mapped_bytes(&self, seg: &Expandable) -> usize {
        seg.mapped * self.vm.granularity
    }

    /// Bytes mapped in every segment.
    pub(crate) fn mapped_total(&self) -> usize {
        self.by_stream.values().map(|e| self.mapped_bytes(e)).sum()
    }

    /// The segment numbers of every expandable segment.
    pub(crate) fn is_expandable(&self, segment: SegmentId) -> bool {
        self.by_stream.values().any(|e| e.segment == segment)
    }

    /// Returns the whole reservation of a segment with nothing mapped.
    pub(crate) fn free_reservation(&mut self, stream: Stream) -> Result<()> {
        if let Some(seg) = self.by_stream.remove(&stream) {
            let _guard = DeviceGuard::new(self.vm.ctx, self.vm.device)?;
            // SAFETY: the range is our own reservation and nothing is mapped in it.
            unsafe {
                self.vm
                    .ctx
                    .api()
                    .vmm_free_reservation(seg.base as *mut std::ffi::c_void, self.span)
            }?;
        }
        Ok(())
    }

    /// Unmaps free granules, range by range and within a range highest
    /// addresses first (blocks are carved from the bottom), until at least
    /// `want` bytes are unmapped or none is left (`usize::MAX`: all).
    ///
    /// A block freed on its own stream is free at once, while work queued
    /// on that stream may still use it (a later user on the stream runs
    /// after it). Unmapping does not wait for the stream the way a free
    /// does, so a range's stream is synchronized before any of its
    /// granules is unmapped.
    pub(crate) fn unmap_free(&mut self, arena: &Arena, want: usize) -> Result<()> {
        let vm = self.vm;
        let mut total = 0;
        for (stream, seg) in self.by_stream.iter_mut() {
            let free = vm.free_mapped_granules(arena, seg);
            if free.is_empty() || total >= want {
                continue;
            }
            stream.synchronize()?;
            for g in free.into_iter().rev() {
                if total >= want {
                    return Ok(());
                }
                vm.unmap_granule(seg, g)?;
                total += vm.granularity;
            }
        }
        Ok(())
    }
}

impl Vm {
    /// Maps every unmapped granule touching `[addr, addr + size)` (the
    /// segment counts them). On failure what was mapped is unmapped again
    /// as far as the vendor allows.
    pub(crate) fn map_range(&self, seg: &mut Expandable, addr: usize, size: usize) -> Result<()> {
        let (first, last) = self.granules_touching(seg, addr, size);
        let _guard = DeviceGuard::new(self.ctx, self.device)?;
        let api = self.ctx.api();
        let mut mapped = Vec::new();
        for g in first..last {
            if seg.granules[g].is_some() {
                continue;
            }
            let at = (seg.base + g * self.granularity) as *mut std::ffi::c_void;
            let result = api.vmm_create(self.granularity).and_then(|h| {
                // SAFETY: `at` is a granule of our own reservation and is unmapped.
                match unsafe { api.vmm_map(at, self.granularity, h) } {
                    Ok(()) => Ok(h),
                    Err(e) => {
                        // SAFETY: `h` was just created and is not mapped.
                        let _ = unsafe { api.vmm_release(h) };
                        Err(e)
                    }
                }
            });
            match result {
                Ok(h) => {
                    seg.granules[g] = Some(h);
                    seg.mapped += 1;
                    mapped.push(g);
                }
                Err(e) => {
                    for g in mapped {
                        if let Err(undo) = self.unmap_granule(seg, g) {
                            tracing::warn!("expandable segment: undoing a mapping failed: {undo}");
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Bytes of the granules touching `[addr, addr + size)` that are unmapped.
    pub(crate) fn unmapped_bytes(&self, seg: &Expandable, addr: usize, size: usize) -> usize {
        let (first, last) = self.granules_touching(seg, addr, size);
        let unmapped = seg.granules[first..last].iter().filter(|g| g.is_none());
        unmapped.count() * self.granularity
    }

    /// The mapped granules lying wholly inside free blocks of the segment,
    /// lowest address first.
    pub(crate) fn free_mapped_granules(&self, arena: &Arena, seg: &Expandable) -> Vec<usize> {
        let mut free = Vec::new();
        let mut at = Some(arena.segments[seg.segment].first);
        while let Some(id) = at {
            let b = &arena.blocks[id];
            if b.used == Use::Free {
                let first = (b.addr - seg.base).div_ceil(self.granularity);
                let last = (b.addr + b.size - seg.base) / self.granularity;
                free.extend((first..last.max(first)).filter(|&g| seg.granules[g].is_some()));
            }
            at = b.next;
        }
        free
    }

    /// Unmaps granule `g` and releases its memory. If the unmap fails the
    /// granule stays mapped and counted.
    fn unmap_granule(&self, seg: &mut Expandable, g: usize) -> Result<()> {
        let Some(handle) = seg.granules[g] else {
            return Ok(());
        };
        let _guard = DeviceGuard::new(self.ctx, self.device)?;
        let at = (seg.base + g * self.granularity) as *mut std::ffi::c_void;
        // SAFETY: granule `g` is mapped with `handle` and no block in use lies on it.
        unsafe { self.ctx.api().vmm_unmap(at, self.granularity) }?;
        seg.granules[g] = None;
        seg.mapped -= 1;
        // SAFETY: `handle` was mapped only at `at`, which is now unmapped.
        unsafe { self.ctx.api().vmm_release(handle) }
    }

    fn granules_touching(&self, seg: &Expandable, addr: usize, size: usize) -> (usize, usize) {
        let first = (addr - seg.base) / self.granularity;
        let last = (addr + size - seg.base).div_ceil(self.granularity);
        (first, last)
    }
}
