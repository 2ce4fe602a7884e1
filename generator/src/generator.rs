//! `Generator` (one device's seed and Philox offset) and `Generators` (the
//! default generator of every device, created on first use).

use std::sync::OnceLock;

use dipu_deviceapi::{Error, Result};

use crate::state;

/// The seed a default generator starts with (c10's `default_rng_seed_val`).
pub const DEFAULT_SEED: u64 = 67_280_421_310_721;

#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use parking_lot::Mutex;

/// Seed and Philox offset, always read and changed together.
#[derive(Debug, Clone, Copy)]
struct Philox {
    seed: u64,
    offset: u64,
}

/// One device's random generator state. Every method is thread-safe.
#[derive(Debug)]
pub struct Generator {
    state: Mutex<Philox>,
}

impl Default for Generator {
    fn default() -> Self {
        Generator::new(DEFAULT_SEED)
    }
}

impl Generator {
    /// A generator with `seed` and offset 0.
    pub fn new(seed: u64) -> Self {
        Generator {
            state: Mutex::new(Philox { seed, offset: 0 }),
        }
    }

    fn lock(&self) -> impl std::ops::DerefMut<Target = Philox> + '_ {
        #[cfg(loom)]
        return self.state.lock().expect("never poisoned");
        #[cfg(not(loom))]
        self.state.lock()
    }

    /// Sets the seed and restarts the offset at 0.
    pub fn manual_seed(&self, seed: u64) {
        *self.lock() = Philox { seed, offset: 0 };
    }

    /// Seeds from the operating system's entropy and returns the new seed.
    pub fn seed(&self) -> Result<u64> {
        let mut bytes = [0u8; 8];
        getrandom::getrandom(&mut bytes).map_err(|e| {
            Error::new(
                dipu_deviceapi::ErrorKind::Internal,
                format!("no entropy from the operating system: {e}"),
            )
        })?;
        let seed = u64::from_le_bytes(bytes);
        self.manual_seed(seed);
        Ok(seed)
    }

    /// The seed in use (c10's `initial_seed`/`current_seed`).
    pub fn initial_seed(&self) -> u64 {
        self.lock().seed
    }

    /// The Philox offset the next caller will get.
    pub fn offset(&self) -> u64 {
        self.lock().offset
    }

    /// Sets the Philox offset (must be a multiple of 4, as the generator keeps it).
    pub fn set_offset(&self, offset: u64) -> Result<()> {
        if offset % 4 != 0 {
            return Err(Error::invalid_argument(format!(
                "a Philox offset is a multiple of 4, not {offset}"
            )));
        }
        self.lock().offset = offset;
        Ok(())
    }

    /// Reserves `increment` Philox values for one kernel launch and returns
    /// the seed and the start of the reserved range. The offset advances by
    /// `increment` rounded up to a multiple of 4 (as CUDA's generator does),
    /// so concurrent callers always get disjoint ranges.
    pub fn philox_inputs(&self, increment: u64) -> Result<(u64, u64)> {
        let rounded = increment.checked_next_multiple_of(4).ok_or_else(|| {
            Error::invalid_argument(format!("Philox increment {increment} is too large"))
        })?;
        let mut state = self.lock();
        let start = state.offset;
        state.offset = start.checked_add(rounded).ok_or_else(|| {
            Error::invalid_argument(format!(
                "the Philox offset {start} cannot advance by {rounded}: reseed the generator"
            ))
        })?;
        Ok((state.seed, start))
    }

    /// The state as bytes (layout in [`crate::STATE_LEN`]'s module docs).
    pub fn get_state(&self) -> Vec<u8> {
        let s = *self.lock();
        state::encode(s.seed, s.offset)
    }

    /// Restores a state from [`Generator::get_state`]; a state of the wrong
    /// length, magic or version is rejected and changes nothing.
    pub fn set_state(&self, bytes: &[u8]) -> Result<()> {
        let (seed, offset) = state::decode(bytes)?;
        *self.lock() = Philox { seed, offset };
        Ok(())
    }
}

/// The default generator of every device, each created on first use.
#[derive(Debug)]
pub struct Generators {
    devices: Box<[OnceLock<Generator>]>,
}

impl Generators {
    /// Default generators for `device_count` devices (none created yet).
    pub fn new(device_count: i32) -> Self {
        let count = usize::try_from(device_count).unwrap_or(0);
        Generators {
            devices: (0..count).map(|_| OnceLock::new()).collect(),
        }
    }

    /// `device`'s default generator, seeded with [`DEFAULT_SEED`] when first used.
    pub fn default_generator(&self, device: i32) -> Result<&Generator> {
        usize::try_from(device)
            .ok()
            .and_then(|d| self.devices.get(d))
            .map(|cell| cell.get_or_init(Generator::default))
            .ok_or_else(|| Error::invalid_device(device, self.devices.len() as i32))
    }

    /// Seeds every device's default generator with `seed`.
    pub fn manual_seed_all(&self, seed: u64) {
        for cell in self.devices.iter() {
            cell.get_or_init(Generator::default).manual_seed(seed);
        }
    }

    /// Number of devices.
    pub fn device_count(&self) -> i32 {
        self.devices.len() as i32
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use dipu_deviceapi::ErrorKind;

    #[test]
    fn offsets_round_up_to_four_and_seeding_resets_them() {
        let g = Generator::new(5);
        assert_eq!(g.philox_inputs(0).unwrap(), (5, 0));
        assert_eq!(g.philox_inputs(1).unwrap(), (5, 0));
        assert_eq!(g.philox_inputs(4).unwrap(), (5, 4));
        assert_eq!(g.philox_inputs(5).unwrap(), (5, 8));
        assert_eq!(g.offset(), 16);
        g.manual_seed(9);
        assert_eq!((g.initial_seed(), g.offset()), (9, 0));
        assert!(g.set_offset(6).is_err());
        g.set_offset(u64::MAX - 3).unwrap();
        let e = g.philox_inputs(8).unwrap_err();
        assert!(e.message().contains("reseed"), "{e}");
        assert!(g.philox_inputs(u64::MAX).is_err());
    }

    #[test]
    fn seed_draws_fresh_entropy() {
        let g = Generator::default();
        assert_eq!(g.initial_seed(), DEFAULT_SEED);
        let a = g.seed().unwrap();
        let b = g.seed().unwrap();
        assert_ne!(a, b, "two draws of 64 random bits differ");
        assert_eq!(g.initial_seed(), b);
    }

    #[test]
    fn state_round_trips_and_bad_states_change_nothing() {
        let g = Generator::new(77);
        g.philox_inputs(40).unwrap();
        let saved = g.get_state();
        let expected = g.philox_inputs(8).unwrap();
        g.set_state(&saved).unwrap();
        assert_eq!(g.philox_inputs(8).unwrap(), expected);
        let before = g.get_state();
        assert_eq!(
            g.set_state(&saved[..10]).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(g.get_state(), before);
    }

    #[test]
    fn default_generators_are_per_device() {
        let gens = Generators::new(3);
        assert_eq!(
            gens.default_generator(3).unwrap_err().kind(),
            ErrorKind::InvalidDevice
        );
        assert_eq!(
            gens.default_generator(-1).unwrap_err().kind(),
            ErrorKind::InvalidDevice
        );
        gens.default_generator(2).unwrap().manual_seed(11);
        assert_eq!(
            gens.default_generator(0).unwrap().initial_seed(),
            DEFAULT_SEED
        );
        assert_eq!(gens.default_generator(2).unwrap().initial_seed(), 11);
        gens.manual_seed_all(3);
        for d in 0..3 {
            assert_eq!(gens.default_generator(d).unwrap().initial_seed(), 3);
        }
    }

    #[test]
    fn concurrent_callers_get_disjoint_ranges() {
        let g = Generator::new(1);
        let ranges: Vec<(u64, u64)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    let g = &g;
                    s.spawn(move || {
                        (0..1000)
                            .map(|i| {
                                let inc = 1 + (t * 7 + i) % 13;
                                let (_, start) = g.philox_inputs(inc).unwrap();
                                (start, start + inc.next_multiple_of(4))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let mut sorted = ranges.clone();
        sorted.sort();
        for pair in sorted.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "ranges {:?} and {:?} overlap",
                pair[0],
                pair[1]
            );
        }
        assert_eq!(sorted.last().unwrap().1, g.offset(), "no gaps either");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// Two threads reserve ranges while a third reseeds: each caller's
    /// range is disjoint from the other's within the same seed, and a
    /// caller never sees a new seed with an old offset.
    #[test]
    fn offset_advance_is_atomic_with_the_seed() {
        loom::model(|| {
            let g = Arc::new(Generator::new(1));
            let g2 = g.clone();
            let t = loom::thread::spawn(move || g2.philox_inputs(3).unwrap());
            let g3 = g.clone();
            let reseed = loom::thread::spawn(move || g3.manual_seed(2));
            let mine = g.philox_inputs(5).unwrap();
            let theirs = t.join().unwrap();
            reseed.join().unwrap();
            if mine.0 == theirs.0 {
                let (a, b) = ((mine.1, mine.1 + 8), (theirs.1, theirs.1 + 4));
                assert!(a.1 <= b.0 || b.1 <= a.0, "overlap: {a:?} {b:?}");
            }
            for (seed, offset) in [mine, theirs] {
                assert!(seed == 1 || seed == 2);
                if seed == 2 {
                    assert!(
                        offset == 0 || offset == 4 || offset == 8,
                        "stale offset {offset} with new seed"
                    );
                }
            }
        });
    }
}
