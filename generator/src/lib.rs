//! Per-device random generator state with the semantics of c10's CUDA
//! generator: a seed and a Philox offset that kernels consume in ranges.
//!
//! ```
//! use dipu_generator::Generators;
//! let generators = Generators::new(2);
//! generators.manual_seed_all(42);
//! let g = generators.default_generator(1)?;
//! assert_eq!(g.philox_inputs(10)?, (42, 0));
//! assert_eq!(g.philox_inputs(1)?, (42, 12), "10 was rounded up to 12");
//! let saved = g.get_state();
//! g.philox_inputs(4)?;
//! g.set_state(&saved)?;
//! assert_eq!(g.philox_inputs(4)?, (42, 16));
//! # Ok::<(), dipu_deviceapi::Error>(())
//! ```

mod generator;
mod state;

pub use generator::{Generator, Generators, DEFAULT_SEED};
pub use state::{STATE_LEN, STATE_MAGIC, STATE_VERSION};
