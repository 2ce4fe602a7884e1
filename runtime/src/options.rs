//! `RuntimeOptions`: what a runtime is built from; unset fields come from
//! the environment.

use dipu_allocator::{Algorithm, AllocatorConfig, HostAlgorithm};
use dipu_deviceapi::{Result, VendorSpec};

/// How to build a [`Runtime`](crate::Runtime). Every field left `None` is
/// read from its environment variable when the runtime is created:
///
/// | field | variable | default |
/// |---|---|---|
/// | `vendor` | `DIPU_VENDOR` | `host` |
/// | `algorithm` | `DIPU_DEVICE_MEMCACHING_ALGORITHM` | `BF` |
/// | `alloc_conf` | `DIPU_ALLOC_CONF` (alias `DIPU_TORCH_ALLOCATOR_CONF`) | PyTorch's defaults |
/// | `host_algorithm` | `DIPU_HOST_MEMCACHING_ALGORITHM` | `BS` |
///
/// A set field wins over its variable.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeOptions {
    /// The vendor to load (a built-in name, a plugin name or a plugin path).
    pub vendor: Option<VendorSpec>,
    /// The device allocator algorithm.
    pub algorithm: Option<Algorithm>,
    /// The device allocator options.
    pub alloc_conf: Option<AllocatorConfig>,
    /// The pinned-host allocator algorithm.
    pub host_algorithm: Option<HostAlgorithm>,
}

impl RuntimeOptions {
    /// Options with every field from the environment (the same as `default()`).
    pub fn from_env() -> Self {
        Self::default()
    }

    /// These options with `vendor` set.
    pub fn with_vendor(mut self, vendor: VendorSpec) -> Self {
        self.vendor = Some(vendor);
        self
    }

    /// These options with the device allocator `algorithm` set.
    pub fn with_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = Some(algorithm);
        self
    }

    /// These options with the device allocator options set.
    pub fn with_alloc_conf(mut self, alloc_conf: AllocatorConfig) -> Self {
        self.alloc_conf = Some(alloc_conf);
        self
    }

    /// These options with the pinned-host allocator algorithm set.
    pub fn with_host_algorithm(mut self, host_algorithm: HostAlgorithm) -> Self {
        self.host_algorithm = Some(host_algorithm);
        self
    }

    /// Every field filled in, unset ones from the environment. A bad
    /// variable is an `InvalidConfig` error naming it.
    pub(crate) fn resolve(self) -> Result<Resolved> {
        Ok(Resolved {
            vendor: match self.vendor {
                Some(v) => v,
                None => VendorSpec::from_env()?,
            },
            algorithm: match self.algorithm {
                Some(a) => a,
                None => Algorithm::from_env()?,
            },
            alloc_conf: match self.alloc_conf {
                Some(c) => c,
                None => AllocatorConfig::from_env()?,
            },
            host_algorithm: match self.host_algorithm {
                Some(h) => h,
                None => HostAlgorithm::from_env()?,
            },
        })
    }
}

/// [`RuntimeOptions`] with every field filled in.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) vendor: VendorSpec,
    pub(crate) algorithm: Algorithm,
    pub(crate) alloc_conf: AllocatorConfig,
    pub(crate) host_algorithm: HostAlgorithm,
}
