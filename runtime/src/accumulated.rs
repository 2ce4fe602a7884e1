//! Resetting a device's accumulated statistics (PyTorch's
//! `reset_accumulated_memory_stats`): the allocators count totals for
//! ever, so the runtime keeps, per device, the totals at the last reset and
//! reports what accumulated since.

use dipu_allocator::{DeviceStats, Pool, Stat};
use parking_lot::Mutex;

/// The accumulated totals of each device at its last reset.
#[derive(Debug, Default)]
pub(crate) struct Baselines {
    by_device: Mutex<Vec<Option<DeviceStats>>>,
}

impl Baselines {
    /// Remembers `now` as `device`'s baseline.
    pub(crate) fn reset(&self, device: i32, now: DeviceStats) {
        let slot = device as usize;
        let mut all = self.by_device.lock();
        if all.len() <= slot {
            all.resize(slot + 1, None);
        }
        all[slot] = Some(now);
    }

    /// `stats` with `device`'s baseline taken off its accumulated totals.
    pub(crate) fn apply(&self, device: i32, mut stats: DeviceStats) -> DeviceStats {
        let Some(base) = self
            .by_device
            .lock()
            .get(device as usize)
            .copied()
            .flatten()
        else {
            return stats;
        };
        for (stat, base) in stats.all_mut().into_iter().zip(base.all().named()) {
            subtract_totals(stat, base.1);
        }
        for pool in [Pool::Small, Pool::Large] {
            let was = base.pool(pool).named();
            for (stat, base) in stats.pool_mut(pool).stats_mut().into_iter().zip(was) {
                subtract_totals(stat, base.1);
            }
        }
        stats.num_alloc_retries = stats
            .num_alloc_retries
            .saturating_sub(base.num_alloc_retries);
        stats.num_ooms = stats.num_ooms.saturating_sub(base.num_ooms);
        stats.num_sync_all_streams = stats
            .num_sync_all_streams
            .saturating_sub(base.num_sync_all_streams);
        stats.num_device_alloc = stats.num_device_alloc.saturating_sub(base.num_device_alloc);
        stats.num_device_free = stats.num_device_free.saturating_sub(base.num_device_free);
        stats
    }
}

fn subtract_totals(stat: &mut Stat, base: Stat) {
    stat.allocated = stat.allocated.saturating_sub(base.allocated);
    stat.freed = stat.freed.saturating_sub(base.freed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_count_from_the_last_reset_and_current_values_stay() {
        let b = Baselines::default();
        let mut s = DeviceStats::default();
        s.allocated_bytes.increase(100);
        s.allocated_bytes.decrease(40);
        s.large_pool.allocated_bytes.increase(100);
        s.large_pool.allocated_bytes.decrease(40);
        s.num_device_alloc = 3;
        assert_eq!(b.apply(1, s), s, "no reset: unchanged");
        b.reset(1, s);
        s.allocated_bytes.increase(5);
        s.large_pool.allocated_bytes.increase(5);
        s.num_device_alloc = 4;
        let got = b.apply(1, s);
        assert_eq!(got.allocated_bytes.allocated, 5);
        assert_eq!(got.allocated_bytes.freed, 0);
        assert_eq!(got.large_pool.allocated_bytes.allocated, 5, "per pool too");
        assert_eq!(got.large_pool.allocated_bytes.current, 65);
        assert_eq!(got.allocated_bytes.current, 65);
        assert_eq!(got.allocated_bytes.peak, 100);
        assert_eq!(got.num_device_alloc, 1);
        assert_eq!(b.apply(0, s), s, "other devices keep their totals");
    }
}
