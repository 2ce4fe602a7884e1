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

/// The pool a segment and its blocks count in (PyTorch's `small_pool` and
/// `large_pool` keys). Which segments are small is each algorithm's rule
/// (docs/allocator.md, "Pools in the statistics"); a block counts in its
/// segment's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Made for a request of at most [`Pool::SMALL_REQUEST`] bytes.
    Small = 0,
    /// Everything else.
    Large = 1,
}

impl Pool {
    /// The largest request that counts as small (1 MiB, as CUDA's `kSmallSize`).
    pub const SMALL_REQUEST: usize = 1 << 20;

    /// The pool of a segment made for a block of `size` bytes.
    #[inline]
    pub fn for_request(size: usize) -> Pool {
        if size <= Pool::SMALL_REQUEST {
            Pool::Small
        } else {
            Pool::Large
        }
    }

    /// PyTorch's name for it (`small` or `large`).
    pub fn as_str(self) -> &'static str {
        match self {
            Pool::Small => "small",
            Pool::Large => "large",
        }
    }
}

/// What a thread cache served without the device lock, for one pool:
/// blocks handed out again (count, bytes, requested bytes) and blocks
/// taken back from users.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CacheTotals {
    pub(crate) hits: u64,
    pub(crate) hit_bytes: u64,
    pub(crate) hit_requested: u64,
    pub(crate) frees: u64,
    pub(crate) free_bytes: u64,
    pub(crate) free_requested: u64,
}

/// The statistics of one pool (the same quantities as [`DeviceStats`]'
/// aggregate ones, for the blocks and segments of that pool only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
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
}

impl PoolStats {
    /// Every statistic with its PyTorch name, in `memory_stats`' order.
    pub fn named(&self) -> [(&'static str, Stat); 9] {
        [
            ("allocation", self.allocation),
            ("segment", self.segment),
            ("active", self.active),
            ("inactive_split", self.inactive_split),
            ("allocated_bytes", self.allocated_bytes),
            ("reserved_bytes", self.reserved_bytes),
            ("active_bytes", self.active_bytes),
            ("inactive_split_bytes", self.inactive_split_bytes),
            ("requested_bytes", self.requested_bytes),
        ]
    }

    /// Every statistic, mutably (the order of [`PoolStats::named`]).
    pub fn stats_mut(&mut self) -> [&mut Stat; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }
}

/// A device allocator's statistics (PyTorch's `DeviceStats`): the
/// aggregate over all pools in the top-level fields, and each pool's part
/// in `small_pool` and `large_pool` (the two add up to the aggregate,
/// peaks aside: a peak of the sum is not the sum of the peaks).
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
    /// The small pool's part.
    pub small_pool: PoolStats,
    /// The large pool's part.
    pub large_pool: PoolStats,
}

/// Applies `$op($args)` to the aggregate statistic `$field` and to the same
/// one of `$pool`.
macro_rules! both {
    ($self:ident, $pool:expr, $field:ident . $op:ident ( $($arg:expr),* )) => {{
        $self.$field.$op($($arg),*);
        $self.pool_mut($pool).$field.$op($($arg),*);
    }};
}

impl DeviceStats {
    /// The aggregate statistics, as a [`PoolStats`].
    pub fn all(&self) -> PoolStats {
        PoolStats {
            allocation: self.allocation,
            segment: self.segment,
            active: self.active,
            inactive_split: self.inactive_split,
            allocated_bytes: self.allocated_bytes,
            reserved_bytes: self.reserved_bytes,
            active_bytes: self.active_bytes,
            inactive_split_bytes: self.inactive_split_bytes,
            requested_bytes: self.requested_bytes,
        }
    }

    /// The aggregate statistics, mutably (the order of [`PoolStats::named`]).
    pub fn all_mut(&mut self) -> [&mut Stat; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// One pool's part.
    pub fn pool(&self, pool: Pool) -> &PoolStats {
        match pool {
            Pool::Small => &self.small_pool,
            Pool::Large => &self.large_pool,
        }
    }

    /// One pool's part, mutably.
    #[inline]
    pub fn pool_mut(&mut self, pool: Pool) -> &mut PoolStats {
        match pool {
            Pool::Small => &mut self.small_pool,
            Pool::Large => &mut self.large_pool,
        }
    }

    /// Restarts every peak (aggregate and per pool) at its current value.
    pub fn reset_peaks(&mut self) {
        for stat in self.all_mut() {
            stat.reset_peak();
        }
        for pool in [Pool::Small, Pool::Large] {
            for stat in self.pool_mut(pool).stats_mut() {
                stat.reset_peak();
            }
        }
    }

    /// Records a block of `pool` handed out: `size` bytes for a request of `requested`.
    pub(crate) fn on_allocate(&mut self, size: usize, requested: usize, pool: Pool) {
        both!(self, pool, allocation.increase(1));
        both!(self, pool, allocated_bytes.increase(size as u64));
        both!(self, pool, active.increase(1));
        both!(self, pool, active_bytes.increase(size as u64));
        both!(self, pool, requested_bytes.increase(requested as u64));
    }

    /// Records a block given back by its user (it may still be active).
    pub(crate) fn on_free(&mut self, size: usize, requested: usize, pool: Pool) {
        both!(self, pool, allocation.decrease(1));
        both!(self, pool, allocated_bytes.decrease(size as u64));
        both!(self, pool, requested_bytes.decrease(requested as u64));
    }

    /// Records a freed block becoming reusable.
    pub(crate) fn on_inactive(&mut self, size: usize, pool: Pool) {
        both!(self, pool, active.decrease(1));
        both!(self, pool, active_bytes.decrease(size as u64));
    }

    /// Records a free block inside a partly used segment (`add`) or one
    /// that stops being that (merged, taken, or its segment whole again).
    pub(crate) fn on_inactive_split(&mut self, size: usize, pool: Pool, add: bool) {
        if add {
            both!(self, pool, inactive_split.increase(1));
            both!(self, pool, inactive_split_bytes.increase(size as u64));
        } else {
            both!(self, pool, inactive_split.decrease(1));
            both!(self, pool, inactive_split_bytes.decrease(size as u64));
        }
    }

    /// Records a block lent to a thread cache coming back from the cache's
    /// slots: its user's free was counted by the cache, so this only stops
    /// counting it as allocated.
    pub(crate) fn on_taken_back(&mut self, size: usize, requested: usize, pool: Pool) {
        both!(self, pool, allocation.uncount(1));
        both!(self, pool, allocated_bytes.uncount(size as u64));
        both!(self, pool, active.uncount(1));
        both!(self, pool, active_bytes.uncount(size as u64));
        both!(self, pool, requested_bytes.uncount(requested as u64));
    }

    /// Adds a thread cache's totals for `pool`.
    pub(crate) fn add_cache_totals(&mut self, t: CacheTotals, pool: Pool) {
        both!(self, pool, allocation.add_totals(t.hits, t.frees));
        both!(self, pool, active.add_totals(t.hits, t.frees));
        both!(
            self,
            pool,
            allocated_bytes.add_totals(t.hit_bytes, t.free_bytes)
        );
        both!(
            self,
            pool,
            active_bytes.add_totals(t.hit_bytes, t.free_bytes)
        );
        both!(
            self,
            pool,
            requested_bytes.add_totals(t.hit_requested, t.free_requested)
        );
    }

    /// Counts a block waiting in a thread cache's slot as what it is, free
    /// (inactive-split when `split`), in a copy made for reading.
    pub(crate) fn as_slotted(&mut self, size: usize, requested: usize, split: bool, pool: Pool) {
        self.on_taken_back(size, requested, pool);
        if split {
            self.on_inactive_split(size, pool, true);
        }
    }

    /// Records reserved bytes of `pool` gained (`add`) or given back
    /// without a segment of their own (expandable segments' granules).
    pub(crate) fn on_reserved(&mut self, bytes: u64, pool: Pool, add: bool) {
        if add {
            both!(self, pool, reserved_bytes.increase(bytes));
        } else {
            both!(self, pool, reserved_bytes.decrease(bytes));
        }
    }

    /// Counts a segment of `pool` made (`add`) or removed whose bytes are
    /// counted apart ([`DeviceStats::on_reserved`]).
    pub(crate) fn on_segment_count(&mut self, pool: Pool, add: bool) {
        if add {
            both!(self, pool, segment.increase(1));
        } else {
            both!(self, pool, segment.decrease(1));
        }
    }

    /// Records a segment of `pool` obtained from the vendor.
    pub(crate) fn on_segment_created(&mut self, size: usize, pool: Pool) {
        self.on_segment_count(pool, true);
        self.on_reserved(size as u64, pool, true);
        self.num_device_alloc += 1;
    }

    /// Records a segment of `pool` given back to the vendor.
    pub(crate) fn on_segment_released(&mut self, size: usize, pool: Pool) {
        self.on_segment_count(pool, false);
        self.on_reserved(size as u64, pool, false);
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
        d.on_allocate(512, 500, Pool::Small);
        d.on_free(512, 500, Pool::Small);
        assert_eq!(
            (d.allocated_bytes.current, d.active_bytes.current),
            (0, 512),
            "still active until reusable"
        );
        d.on_inactive(512, Pool::Small);
        assert_eq!(d.active_bytes.current, 0);
        assert_eq!(d.small_pool.active_bytes.peak, 512);
        assert_eq!(d.large_pool, PoolStats::default());
        assert_eq!(d.requested_bytes.peak, 500);
        d.reset_peaks();
        assert_eq!(d.requested_bytes.peak, 0);
        assert_eq!(d.small_pool.requested_bytes.peak, 0);
    }
}
