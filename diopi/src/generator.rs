//! Generator handles: one per device, naming that device's default Philox
//! generator of the runtime. `diopiGeneratorGetSeedAndOffset` reads its
//! seed and offset; a kernel writes the advanced offset back with
//! `diopiGeneratorSetSeedAndOffset`.

use std::collections::HashMap;

use dipu_generator::{STATE_LEN, STATE_MAGIC, STATE_VERSION};
use dipu_runtime::{Error, Generator, Result, Runtime};
use parking_lot::Mutex;

use crate::types::{DiopiGenerator, GeneratorHandle};

/// `magic` of every generator handle.
const GENERATOR_MAGIC: u64 = 0x4449_4f50_4947_454e; // "DIOPIGEN"

/// The handles made so far, by device; never freed (one per device).
static HANDLES: Mutex<Option<HashMap<i32, &'static DiopiGenerator>>> = Mutex::new(None);

/// The generator handle of `device` (an `InvalidDevice` error for a
/// device the runtime does not have). The same handle every time.
pub fn generator(device: i32) -> Result<GeneratorHandle> {
    dipu_runtime::get()?.check_device(device)?;
    let mut handles = HANDLES.lock();
    let g = *handles
        .get_or_insert_with(HashMap::new)
        .entry(device)
        .or_insert_with(|| {
            Box::leak(Box::new(DiopiGenerator {
                magic: GENERATOR_MAGIC,
                device,
            }))
        });
    Ok(std::ptr::from_ref(g).cast_mut())
}

/// The device the handle `g` names, checked against the handles made.
pub(crate) fn device_of(g: *const DiopiGenerator) -> Result<i32> {
    if g.is_null() {
        return Err(Error::invalid_argument("the generator handle is NULL"));
    }
    let known = HANDLES
        .lock()
        .as_ref()
        .is_some_and(|m| m.values().any(|h| std::ptr::eq(*h, g)));
    if !known {
        return Err(Error::invalid_argument(format!(
            "{g:p} is not a generator handle of dipu-rs (from dipu_diopi_generator)"
        )));
    }
    // SAFETY: one of our leaked, never freed handles (checked above).
    let g = unsafe { &*g };
    debug_assert_eq!(g.magic, GENERATOR_MAGIC);
    Ok(g.device)
}

/// Runs `f` on the runtime's default generator of the device `g` names.
pub(crate) fn with_generator<R>(
    g: *const DiopiGenerator,
    f: impl FnOnce(&Runtime, &Generator) -> Result<R>,
) -> Result<R> {
    let device = device_of(g)?;
    let rt = dipu_runtime::get()?;
    let gen = rt.default_generator(device)?;
    f(&rt, gen)
}

/// The seed and the Philox offset of the generator `g` names (read at once).
pub fn seed_and_offset(g: *const DiopiGenerator) -> Result<(u64, u64)> {
    with_generator(g, |_, gen| decode(&gen.get_state()))
}

/// Sets the seed and the Philox offset of the generator `g` names (at once).
pub fn set_seed_and_offset(g: *const DiopiGenerator, seed: u64, offset: u64) -> Result<()> {
    with_generator(g, |_, gen| gen.set_state(&encode(seed, offset)))
}

/// The runtime's state bytes of `seed` and `offset` (dipu_generator's layout).
pub(crate) fn encode(seed: u64, offset: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(STATE_LEN);
    b.extend_from_slice(&STATE_MAGIC);
    b.extend_from_slice(&STATE_VERSION.to_le_bytes());
    b.extend_from_slice(&seed.to_le_bytes());
    b.extend_from_slice(&offset.to_le_bytes());
    b
}

fn decode(state: &[u8]) -> Result<(u64, u64)> {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(state.get(at..at + 8)?.try_into().ok()?))
    };
    match (state.len() == STATE_LEN, word(8), word(16)) {
        (true, Some(seed), Some(offset)) => Ok((seed, offset)),
        _ => Err(Error::new(
            dipu_runtime::ErrorKind::Internal,
            "the runtime's generator state has an unexpected layout",
        )),
    }
}
