//! Statistics with the names and meaning of PyTorch's `memory_stats`.

/// One quantity: its current value, the peak since the last reset, and the
/// running totals of what was added and removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    /// The value now.
    pub current: u64,
    /// The highest value since creation or `reset_peak_stats`.
    pub peak: u64,
    /// Everything ever added.
    pub allocated: u64,
    /// Everything ever removed.
    pub freed: u64,
}

impl Stat {
    /// Adds `amount`.
    pub fn increase(&mut self, amount: u64) {
        self.current += amount;
        self.allocated += amount;
        self.peak = self.peak.max(self.current);
    }

    /// Removes `amount` (never below zero).
    pub fn decrease(&mut self, amount: u64) {
        debug_assert!(amount <= self.current, "statistic would go negative");
        self.current = self.current.saturating_sub(amount);
        self.freed += amount;
    }

    /// Restarts the peak at the current value.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    /// Removes `amount` that was counted but never was there (not a free).
    fn uncount(&mut self, amount: u64) {
        self.current = self.current.saturating_sub(amount);
    }

    /// Adds totals counted elsewhere.
    fn add_totals(&mut self, allocated: u64, freed: u64) {
        self.allocated += allocated;
        self.freed += freed;
    }
}

/// What a thread cache served without the device lock: blocks handed out
/// again (count, bytes, requested bytes) and blocks taken back from users.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CacheTotals {
    pub(crate) hits: u64,
    pub(crate) hit_bytes: u64,
    pub(crate) hit_requested: u64,
    pub(crate) frees: u64,
    pub(crate) free_bytes: u64,
    pub(crate) free_requested: u64,
}

/// A device allocator's statistics (PyTorch's `DeviceStats`, all pools).
///
/// - *allocation* / *allocated_bytes*: blocks handed out and not yet freed;
/// - *requested_bytes*: what callers asked for (before rounding);
/// - *active* / *active_bytes*: allocated blocks plus freed blocks still
///   waiting for other streams' work before they can be reused;
/// - *segment* / *reserved_bytes*: memory obtained from the vendor;
/// - *inactive_split* / *inactive_split_bytes*: free pieces of segments that
///   are partly in use (the fragmentation that a split causes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Blocks handed out.
    pub allocation: Stat,
    /// Segments obtained from the vendor.
    pub segment: Stat,
    /// Blocks not reusable yet (allocated or waiting for streams).
    pub active: Stat,
    /// Free blocks inside partly used segments.
    pub inactive_split: Stat,
    /// Bytes of blocks handed out.
    pub allocated_bytes: Stat,
    /// Bytes obtained from the vendor.
    pub reserved_bytes: Stat,
    /// Bytes of active blocks.
    pub active_bytes: Stat,
    /// Bytes of inactive split blocks.
    pub inactive_split_bytes: Stat,
    /// Bytes callers asked for.
    pub requested_bytes: Stat,
    /// Allocations that succeeded only after freeing cached memory.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out of memory.
    pub num_ooms: u64,
    /// Times every stream was waited for to reclaim memory.
    pub num_sync_all_streams: u64,
    /// Vendor allocations (malloc, or chunks created for expandable segments).
    pub num_device_alloc: u64,
    /// Vendor frees.
    pub num_device_free: u64,
}

impl DeviceStats {
    /// Restarts every peak at its current value.
    pub fn reset_peaks(&mut self) {
        for stat in [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ] {
            stat.reset_peak();
        }
    }

    /// Records a block handed out: `size` bytes for a request of `requested`.
    pub(crate) fn on_allocate(&mut self, size: usize, requested: usize) {
        self.allocation.increase(1);
        self.allocated_bytes.increase(size as u64);
        self.active.increase(1);
        self.active_bytes.increase(size as u64);
        self.requested_bytes.increase(requested as u64);
    }

    /// Records a block given back by its user (it may still be active).
    pub(crate) fn on_free(&mut self, size: usize, requested: usize) {
        self.allocation.decrease(1);
        self.allocated_bytes.decrease(size as u64);
        self.requested_bytes.decrease(requested as u64);
    }

    /// Records a freed block becoming reusable.
    pub(crate) fn on_inactive(&mut self, size: usize) {
        self.active.decrease(1);
        self.active_bytes.decrease(size as u64);
    }

    /// Records a block lent to a thread cache coming back from the cache's
    /// slots: its user's free was counted by the cache, so this only stops
    /// counting it as allocated.
    pub(crate) fn on_taken_back(&mut self, size: usize, requested: usize) {
        self.allocation.uncount(1);
        self.allocated_bytes.uncount(size as u64);
        self.active.uncount(1);
        self.active_bytes.uncount(size as u64);
        self.requested_bytes.uncount(requested as u64);
    }

    /// Adds a thread cache's totals.
    pub(crate) fn add_cache_totals(&mut self, t: CacheTotals) {
        self.allocation.add_totals(t.hits, t.frees);
        self.active.add_totals(t.hits, t.frees);
        self.allocated_bytes.add_totals(t.hit_bytes, t.free_bytes);
        self.active_bytes.add_totals(t.hit_bytes, t.free_bytes);
        self.requested_bytes
            .add_totals(t.hit_requested, t.free_requested);
    }

    /// Counts a block waiting in a thread cache's slot as what it is, free
    /// (inactive-split when `split`), in a copy made for reading.
    pub(crate) fn as_slotted(&mut self, size: usize, requested: usize, split: bool) {
        self.on_taken_back(size, requested);
        if split {
            self.inactive_split.increase(1);
            self.inactive_split_bytes.increase(size as u64);
        }
    }

    /// Records a segment obtained from the vendor.
    pub(crate) fn on_segment_created(&mut self, size: usize) {
        self.segment.increase(1);
        self.reserved_bytes.increase(size as u64);
        self.num_device_alloc += 1;
    }

    /// Records a segment given back to the vendor.
    pub(crate) fn on_segment_released(&mut self, size: usize) {
        self.segment.decrease(1);
        self.reserved_bytes.decrease(size as u64);
        self.num_device_free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_track_current_peak_and_totals() {
        let mut s = Stat::default();
        s.increase(10);
        s.increase(5);
        s.decrease(12);
        assert_eq!(
            s,
            Stat {
                current: 3,
                peak: 15,
                allocated: 15,
                freed: 12
            }
        );
        s.reset_peak();
        assert_eq!(s.peak, 3);
        let mut d = DeviceStats::default();
        d.on_allocate(512, 500);
        d.on_free(512, 500);
        assert_eq!(
            (d.allocated_bytes.current, d.active_bytes.current),
            (0, 512),
            "still active until reusable"
        );
        d.on_inactive(512);
        assert_eq!(d.active_bytes.current, 0);
        assert_eq!(d.requested_bytes.peak, 500);
        d.reset_peaks();
        assert_eq!(d.requested_bytes.peak, 0);
    }
}
