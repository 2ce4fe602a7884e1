//! Simulated device memory: per-device budgets against a capacity, and the
//! registry of every live device allocation, pinned host allocation and
//! mapped virtual-memory range, used to reject bad frees and copies.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use dipu_deviceapi::{Error, ErrorKind, Result};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::arena::{Arena, ARENA_FROM};
use crate::config::ENV_MEMORY;
use dipu_vendorkit::size::format_size;

/// Alignment of every device and pinned allocation (as `cudaMalloc`'s).
pub(crate) const ALIGN: usize = 256;

/// What a registered address range is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Device memory from `malloc` on `device`.
    Device { device: i32 },
    /// Page-locked host memory from `malloc_host`.
    Pinned,
    /// A physical chunk `chunk` of `device` mapped by `vmm_map`.
    Mapped { device: i32, chunk: u64 },
}

/// One registered range.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Region {
    pub(crate) size: usize,
    pub(crate) kind: Kind,
    /// Cut from its device's arena (`arena.rs`) rather than the host
    /// allocator.
    pub(crate) arena: bool,
}

/// Registered ranges by start address.
#[derive(Debug, Default)]
pub(crate) struct Regions(pub(crate) BTreeMap<usize, Region>);

impl Regions {
    /// The range containing `addr`, with its start.
    pub(crate) fn containing(&self, addr: usize) -> Option<(usize, Region)> {
        let (&start, &region) = self.0.range(..=addr).next_back()?;
        (addr - start < region.size).then_some((start, region))
    }

    /// Whether any registered range overlaps `addr..addr + len`.
    pub(crate) fn overlaps(&self, addr: usize, len: usize) -> bool {
        let end = addr.saturating_add(len);
        self.containing(addr).is_some() || self.0.range(addr..end).next().is_some()
    }

    /// Checks that `addr..addr + len` is device memory (of `device`, when
    /// given): inside one `malloc` allocation or a run of adjacent mappings.
    /// Returns the memory's device.
    pub(crate) fn check_device(&self, addr: usize, len: usize, device: Option<i32>) -> Result<i32> {
        let what = || format!("{addr:#x} (+{len} bytes)");
        if addr == 0 {
            return Err(Error::invalid_argument(format!(
                "null device pointer with {len} bytes"
            )));
        }
        let end = addr
            .checked_add(len)
            .ok_or_else(|| Error::invalid_argument(format!("{} wraps around", what())))?;
        let Some((start, region)) = self.containing(addr) else {
            return Err(Error::invalid_argument(format!(
                "{} is not device memory of this vendor (never allocated, already freed, \
                 or host memory: wrong CopyKind?)",
                what()
            )));
        };
        let owner = match region.kind {
            Kind::Pinned => {
                return Err(Error::invalid_argument(format!(
                    "{} is pinned host memory from malloc_host, not device memory \
                     (wrong CopyKind?)",
                    what()
                )))
            }
            Kind::Device { device } | Kind::Mapped { device, .. } => device,
        };
        if let Some(want) = device.filter(|d| *d != owner) {
            return Err(Error::invalid_argument(format!(
                "{} is memory of device {owner}, not of device {want}",
                what()
            )));
        }
        let mut cursor = start + region.size;
        let mut kind = region.kind;
        while cursor < end {
            let next = self.0.get(&cursor).filter(|r| {
                matches!((kind, r.kind), (Kind::Mapped { .. }, Kind::Mapped { device, .. }) if device == owner)
            });
            let Some(next) = next else {
                return Err(Error::invalid_argument(format!(
                    "{} runs {} bytes past the end of the device allocation at {start:#x} \
                     ({} bytes from {addr:#x} are valid)",
                    what(),
                    end - cursor,
                    cursor - addr
                )));
            };
            cursor += next.size;
            kind = next.kind;
        }
        Ok(owner)
    }
}

/// Budgets and the registry.
#[derive(Debug)]
pub(crate) struct Memory {
    capacity: u64,
    used: Vec<AtomicU64>,
    regions: RwLock<Regions>,
    /// Each device's arena, set up on its first large allocation (`None`
    /// if that failed: the host allocator serves it then).
    arenas: Vec<OnceLock<Option<Arena>>>,
}

impl Memory {
    pub(crate) fn new(devices: i32, capacity: u64) -> Memory {
        Memory {
            capacity,
            used: (0..devices).map(|_| AtomicU64::new(0)).collect(),
            regions: RwLock::new(Regions::default()),
            arenas: (0..devices).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Bytes each device has.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes in use on `device` (a valid index).
    pub(crate) fn used(&self, device: i32) -> u64 {
        self.used[device as usize].load(Ordering::Relaxed)
    }

    /// Takes `bytes` of `device`'s budget, or fails with `OutOfMemory`.
    pub(crate) fn reserve(&self, device: i32, bytes: u64) -> Result<()> {
        let cap = self.capacity;
        self.used[device as usize]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= cap)
            })
            .map(drop)
            .map_err(|used| {
                Error::new(
                    ErrorKind::OutOfMemory,
                    format!(
                        "host device {device} is out of memory: tried to allocate {} \
                         ({bytes} bytes) with {} in use of {} capacity ({} free); \
                         set {ENV_MEMORY} to give the simulated devices more memory",
                        format_size(bytes),
                        format_size(used),
                        format_size(cap),
                        format_size(cap.saturating_sub(used)),
                    ),
                )
            })
    }

    /// Returns `bytes` to `device`'s budget.
    pub(crate) fn release(&self, device: i32, bytes: u64) {
        self.used[device as usize].fetch_sub(bytes, Ordering::AcqRel);
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Regions> {
        self.regions.read()
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, Regions> {
        self.regions.write()
    }

    /// Allocates `bytes` (nonzero) of device memory on `device`: from the
    /// device's arena when large enough (so other processes can map it).
    pub(crate) fn alloc_device(&self, device: i32, bytes: usize) -> Result<*mut c_void> {
        self.reserve(device, bytes as u64)?;
        let kind = Kind::Device { device };
        if bytes >= ARENA_FROM {
            if let Some(ptr) = self.arena(device).and_then(|a| a.alloc(bytes)) {
                let region = Region {
                    size: bytes,
                    kind,
                    arena: true,
                };
                self.write().0.insert(ptr as usize, region);
                return Ok(ptr);
            }
        }
        self.alloc(bytes, kind)
            .inspect_err(|_| self.release(device, bytes as u64))
    }

    /// `device`'s arena (a valid index), set up now if it is not yet;
    /// `None` if it cannot be.
    pub(crate) fn arena(&self, device: i32) -> Option<&Arena> {
        #[cfg(test)]
        if std::env::var_os(crate::comm::tests::ENV_NO_ARENA).is_some() {
            return None;
        }
        self.arenas[device as usize]
            .get_or_init(|| {
                Arena::create(device, self.capacity)
                    .inspect_err(|e| {
                        tracing::warn!(target: "dipu_vendor_host", "{e}; its memory cannot be shared with other processes");
                    })
                    .ok()
            })
            .as_ref()
    }

    /// `device`'s arena if it was set up.
    pub(crate) fn arena_if_any(&self, device: i32) -> Option<&Arena> {
        self.arenas.get(device as usize)?.get()?.as_ref()
    }

    /// Allocates `bytes` (nonzero) of pinned host memory.
    pub(crate) fn alloc_pinned(&self, bytes: usize) -> Result<*mut c_void> {
        self.alloc(bytes, Kind::Pinned)
    }

    fn alloc(&self, bytes: usize, kind: Kind) -> Result<*mut c_void> {
        let what = match kind {
            Kind::Pinned => "pinned host memory".to_owned(),
            _ => "simulated device memory".to_owned(),
        };
        let oom = |why: &str| {
            Error::new(
                ErrorKind::OutOfMemory,
                format!(
                    "cannot allocate {} ({bytes} bytes) of {what}: {why}",
                    format_size(bytes as u64)
                ),
            )
        };
        let layout = Layout::from_size_align(bytes, ALIGN)
            .map_err(|_| oom("larger than the address space allows"))?;
        // SAFETY: `layout` has a nonzero size (callers pass `bytes > 0`) and a
        // valid power-of-two alignment, as `alloc` requires.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(oom("the host allocator has no memory left"));
        }
        self.write().0.insert(
            ptr as usize,
            Region {
                size: bytes,
                kind,
                arena: false,
            },
        );
        Ok(ptr.cast())
    }

    /// Checks that `addr` starts a live allocation of the wanted sort
    /// (`pinned` or device) without freeing it.
    pub(crate) fn check_free(&self, addr: usize, pinned: bool) -> Result<Region> {
        let regions = self.read();
        let (free, alloc) = if pinned {
            ("free_host", "malloc_host")
        } else {
            ("free", "malloc")
        };
        let Some((start, region)) = regions.containing(addr) else {
            return Err(Error::invalid_argument(format!(
                "{free}({addr:#x}): double free or unknown pointer (not a live allocation \
                 from {alloc})"
            )));
        };
        if start != addr {
            return Err(Error::invalid_argument(format!(
                "{free}({addr:#x}): the pointer is {} bytes inside the allocation at \
                 {start:#x} ({} bytes); pass the address {alloc} returned",
                addr - start,
                region.size
            )));
        }
        match (region.kind, pinned) {
            (Kind::Pinned, true) | (Kind::Device { .. }, false) => Ok(region),
            (Kind::Pinned, false) => Err(Error::invalid_argument(format!(
                "free({addr:#x}): this is pinned host memory; free it with free_host"
            ))),
            (Kind::Device { .. }, true) => Err(Error::invalid_argument(format!(
                "free_host({addr:#x}): this is device memory; free it with free"
            ))),
            (Kind::Mapped { .. }, _) => Err(Error::invalid_argument(format!(
                "{free}({addr:#x}): this is mapped virtual memory; use vmm_unmap"
            ))),
        }
    }

    /// Frees the allocation at `addr` after [`Memory::check_free`] passed;
    /// fails if another thread freed it in between.
    pub(crate) fn dealloc(&self, addr: usize, pinned: bool) -> Result<()> {
        let removed = {
            let mut regions = self.write();
            match regions.0.get(&addr).map(|r| r.kind) {
                Some(Kind::Pinned) if pinned => regions.0.remove(&addr),
                Some(Kind::Device { .. }) if !pinned => regions.0.remove(&addr),
                _ => None,
            }
        };
        let Some(region) = removed else {
            return Err(self.check_free(addr, pinned).err().unwrap_or_else(|| {
                Error::invalid_argument(format!(
                    "free({addr:#x}): double free or unknown pointer (freed concurrently)"
                ))
            }));
        };
        match (region.arena, region.kind) {
            (true, Kind::Device { device }) => {
                if let Some(arena) = self.arena_if_any(device) {
                    arena.free(addr, region.size);
                }
            }
            // SAFETY: `addr` was returned by `std::alloc::alloc` with this
            // size and `ALIGN` (the registry holds only such allocations
            // outside arenas for these kinds), and removing it from the
            // registry under the write lock means it is freed exactly once.
            _ => unsafe { dealloc_raw(addr, region.size) },
        }
        if let Kind::Device { device } = region.kind {
            self.release(device, region.size as u64);
        }
        Ok(())
    }
}

/// Frees memory from `std::alloc::alloc` with `size` and [`ALIGN`].
///
/// # Safety
/// `addr` must come from `std::alloc::alloc` with exactly that layout and
/// not be freed yet.
unsafe fn dealloc_raw(addr: usize, size: usize) {
    // SAFETY: the caller promises the layout was valid when allocating.
    let layout = unsafe { Layout::from_size_align_unchecked(size, ALIGN) };
    // SAFETY: the caller promises `addr` came from `alloc(layout)`.
    unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
}

impl Drop for Memory {
    fn drop(&mut self) {
        for (addr, region) in std::mem::take(&mut self.regions.get_mut().0) {
            if !region.arena && !matches!(region.kind, Kind::Mapped { .. }) {
                // SAFETY: device and pinned regions come from `alloc` with
                // this size and `ALIGN`; the map is taken, so each is freed
                // once, and the vendor (hence every stream) is gone.
                unsafe { dealloc_raw(addr, region.size) };
            }
        }
    }
}
