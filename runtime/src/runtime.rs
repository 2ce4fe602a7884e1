//! `Runtime`: one vendor with its device context, allocators and generators.

use dipu_deviceapi::observe::{Flag, Observed};
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use dipu_allocator::{
    Algorithm, AllocatorConfig, DeviceAllocator, DeviceAllocators, DeviceStats, HostAlgorithm,
    HostAllocator,
};
use dipu_deviceapi::{
    DeviceApi, DeviceProperties, Error, LoadedVendor, Loader, MemoryInfo, Result, VendorOrigin,
    VendorSpec,
};
use dipu_generator::{Generator, Generators};
use dipu_stream::{DeviceContext, DeviceGuard, Stream};
use dipu_vendor_host::HostVendor;

use crate::accumulated::Baselines;
use crate::RuntimeOptions;

/// A loader knowing the built-in vendors (`host` → [`HostVendor::from_env`]).
pub fn loader() -> Loader {
    Loader::new().with_builtin("host", || Ok(Arc::new(HostVendor::from_env()?)))
}

/// One process's runtime: the loaded vendor and where it came from, its
/// [`DeviceContext`] (streams, events, current device), one caching
/// allocator per device (created on first use), the pinned-host allocator
/// and the per-device random generators.
///
/// Usually there is one, reached through [`crate::get`]; more can be made
/// with [`Runtime::new`] (each has its own context and allocators, so
/// streams and pointers of one are rejected by another).
pub struct Runtime {
    pub(crate) spec: VendorSpec,
    pub(crate) vendor: LoadedVendor,
    pub(crate) ctx: &'static DeviceContext,
    pub(crate) allocators: DeviceAllocators,
    pub(crate) alloc_conf: AllocatorConfig,
    pub(crate) host: HostAllocator,
    pub(crate) generators: Generators,
    pub(crate) baselines: Baselines,
    pub(crate) host_baselines: Baselines,
    /// The guard sizes when the memory checker's guards or poison are on
    /// (the allocators are wrapped; both 0 with poison alone).
    pub(crate) guard_sizes: Option<crate::guard::GuardSizes>,
    /// The bytes of each device's quarantine when frees are poisoned.
    pub(crate) quarantine: Option<usize>,
    /// The guarded allocators made so far (empty without guards).
    pub(crate) guards: crate::guard::GuardList,
    /// The memory history of the device allocators (`crate::history`).
    pub(crate) history: Arc<dipu_allocator::history::History>,
    /// Whether an observer of allocations (the memory checker, the trace,
    /// this runtime's memory history) is on: what the hit paths load.
    pub(crate) observers: Flag,
}

impl Observed for Runtime {
    fn observer_flag(&self) -> &Flag {
        &self.observers
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("vendor", &self.vendor_name())
            .field("origin", &self.vendor.origin)
            .field("devices", &self.device_count())
            .field("algorithm", &self.allocators.algorithm())
            .field("host_algorithm", &self.host.algorithm())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Loads the vendor and sets up allocators and generators as `options`
    /// say (unset fields from the environment). The device context lives
    /// for the rest of the process, as a CUDA context does.
    pub fn new(options: RuntimeOptions) -> Result<Arc<Runtime>> {
        let o = options.resolve()?;
        dipu_memcheck::MemCheck::init_from_env()?;
        let mut vendor = loader().load(&o.vendor)?;
        vendor.api = crate::trace::init(vendor.api)?;
        let ctx = DeviceContext::new(Arc::clone(&vendor.api))
            .map_err(|e| e.context(format_args!("vendor `{}`", vendor.api.name())))?;
        tracing::debug!(
            vendor = vendor.api.name(),
            origin = %vendor.origin,
            devices = ctx.device_count(),
            algorithm = %o.algorithm,
            host_algorithm = o.host_algorithm.name(),
            "dipu runtime created"
        );
        let mut allocators = DeviceAllocators::new(ctx, o.algorithm, o.alloc_conf.clone());
        let guards = crate::guard::GuardList::default();
        let guard_bytes = dipu_memcheck::guard_bytes();
        let quarantine = dipu_memcheck::poison().then(dipu_memcheck::quarantine_bytes);
        let guard_sizes = (dipu_memcheck::enabled() && (guard_bytes > 0 || quarantine.is_some()))
            .then(|| crate::guard::GuardSizes::new(guard_bytes));
        let quarantine = guard_sizes.and(quarantine);
        let guard_wrap = guard_sizes
            .map(|sizes| crate::guard::wrapper(ctx, sizes, quarantine, Arc::clone(&guards)));
        let history = dipu_allocator::history::History::from_env()?;
        let segments = allocators.segment_map();
        allocators = allocators.with_wrapper(crate::history::wrapper(
            Arc::clone(&history),
            segments,
            guard_wrap,
        ));
        // Set by `DIPU_MEM_HISTORY`, the history may record already.
        let observers = Flag::default();
        observers.switched(false, history.max_entries() > 0);
        let rt = Arc::new(Runtime {
            spec: o.vendor,
            allocators,
            guard_sizes,
            quarantine,
            guards,
            observers,
            history,
            alloc_conf: o.alloc_conf,
            host: HostAllocator::new(ctx, o.host_algorithm),
            generators: Generators::new(ctx.device_count()),
            baselines: Baselines::default(),
            host_baselines: Baselines::default(),
            vendor,
            ctx,
        });
        let holder: Arc<dyn Observed> = rt.clone();
        dipu_deviceapi::observe::register(&holder);
        Ok(rt)
    }

    // ---- the vendor ----

    /// The version of this crate (the runtime's version), e.g. `"0.1.0"`.
    pub fn version() -> &'static str {
        crate::VERSION
    }

    /// The vendor's name, e.g. `"host"`.
    pub fn vendor_name(&self) -> &str {
        self.vendor.api.name()
    }

    /// The vendor's own version string.
    pub fn vendor_version(&self) -> String {
        self.vendor.api.version()
    }

    /// The spec the vendor was loaded from.
    pub fn vendor_spec(&self) -> &VendorSpec {
        &self.spec
    }

    /// Where the vendor came from (built in, or a plugin file).
    pub fn vendor_origin(&self) -> &VendorOrigin {
        &self.vendor.origin
    }

    /// The vendor itself.
    pub fn api(&self) -> &Arc<dyn DeviceApi> {
        &self.vendor.api
    }

    /// The device context: streams (`stream_from_pool`, `current_stream`,
    /// `new_stream`, `default_stream`), `pooled_event`, and the context for
    /// guards and [`crate::Event`]s.
    pub fn context(&self) -> &'static DeviceContext {
        self.ctx
    }

    // ---- devices ----

    /// Number of devices.
    pub fn device_count(&self) -> i32 {
        self.ctx.device_count()
    }

    /// `InvalidDevice` unless `device` is in `0..device_count()`.
    pub fn check_device(&self, device: i32) -> Result<()> {
        if (0..self.device_count()).contains(&device) {
            Ok(())
        } else {
            Err(Error::invalid_device(device, self.device_count()))
        }
    }

    /// The calling thread's current device.
    pub fn current_device(&self) -> Result<i32> {
        self.ctx.current_device()
    }

    /// Makes `device` the calling thread's current device.
    pub fn set_device(&self, device: i32) -> Result<()> {
        self.ctx.set_device(device)
    }

    /// Waits until all work on every stream of `device` is done.
    pub fn synchronize_device(&self, device: i32) -> Result<()> {
        self.ctx.synchronize_device(device)
    }

    /// What `device` is.
    pub fn device_properties(&self, device: i32) -> Result<DeviceProperties> {
        self.check_device(device)?;
        self.vendor.api.device_properties(device)
    }

    /// Free and total memory of `device`, as the vendor sees it.
    pub fn memory_info(&self, device: i32) -> Result<MemoryInfo> {
        let _guard = DeviceGuard::new(self.ctx, device)?;
        self.vendor.api.memory_info()
    }

    /// `InvalidArgument` unless `stream` belongs to this runtime's context.
    pub(crate) fn check_stream(&self, stream: &Stream, op: &str) -> Result<()> {
        if std::ptr::eq(stream.context(), self.ctx) {
            Ok(())
        } else {
            Err(Error::invalid_argument(format!(
                "{op}: the stream belongs to another runtime (a DeviceContext other than \
                 this runtime's; was the runtime shut down and initialised anew?)"
            )))
        }
    }

    // ---- allocators ----

    /// The device allocators (one per device, created on first use).
    pub fn allocators(&self) -> &DeviceAllocators {
        &self.allocators
    }

    /// `device`'s allocator, created on first use.
    pub fn allocator(&self, device: i32) -> Result<&dyn DeviceAllocator> {
        self.allocators.get(device)
    }

    /// The device allocator algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.allocators.algorithm()
    }

    /// The device allocator options.
    pub fn alloc_conf(&self) -> &AllocatorConfig {
        &self.alloc_conf
    }

    /// The pinned-host allocator.
    pub fn host_allocator(&self) -> &HostAllocator {
        &self.host
    }

    /// The pinned-host allocator algorithm.
    pub fn host_algorithm(&self) -> HostAlgorithm {
        self.host.algorithm()
    }

    /// Frees a device pointer given up with
    /// [`DeviceBuffer::into_raw`](crate::DeviceBuffer::into_raw) through
    /// `device`'s allocator. Null is a no-op; a pointer that is not the
    /// start of a live allocation of this runtime on `device` (unknown,
    /// already freed, inside an allocation, another device's) is an
    /// `InvalidArgument` error that changes nothing.
    pub fn free_raw(&self, device: i32, ptr: *mut c_void) -> Result<()> {
        self.free_raw_with::<true>(device, ptr)
    }

    /// [`Runtime::free_raw`] with the memory checker's branches compiled
    /// out: the baseline of `runtime/benches/memcheck.rs`, which measures
    /// what the checker costs when off. Not for use outside benchmarks.
    #[doc(hidden)]
    pub fn bench_free_raw_without_checker(&self, device: i32, ptr: *mut c_void) -> Result<()> {
        self.free_raw_with::<false>(device, ptr)
    }

    /// `free_raw`, telling the checker (when on) if `CHECK`. The
    /// allocator's block map is the record: a pointer it does not hold as
    /// live (unknown, freed, interior, another device's) changes nothing
    /// and is explained from the segment map afterwards.
    #[inline(always)]
    fn free_raw_with<const CHECK: bool>(&self, device: i32, ptr: *mut c_void) -> Result<()> {
        let alloc = self.allocators.get(device)?;
        if ptr.is_null() {
            return Ok(());
        }
        if CHECK && self.observed() {
            if let Some(result) = self.observe_free(alloc, device, ptr) {
                return result;
            }
        }
        alloc
            .free(ptr)
            .map_err(|e| self.explain_bad_pointer(ptr, Some(device), "free_raw", e))
    }

    /// Tells the trace (when on) of the free, and frees through the memory
    /// checker when it is on (`Some`); `None` leaves the free to the caller.
    #[cold]
    #[inline(never)]
    fn observe_free(
        &self,
        alloc: &dyn DeviceAllocator,
        device: i32,
        ptr: *mut c_void,
    ) -> Option<Result<()>> {
        if dipu_profiler::enabled() {
            crate::trace::free(device, ptr);
        }
        dipu_memcheck::enabled().then(|| self.free_raw_checked(alloc, device, ptr))
    }

    /// `free_raw` with the memory checker on: the pointer is checked first,
    /// so that the checker forgets it only when the free goes ahead.
    #[cold]
    fn free_raw_checked(
        &self,
        alloc: &dyn DeviceAllocator,
        device: i32,
        ptr: *mut c_void,
    ) -> Result<()> {
        let a = match self.find_allocation(ptr) {
            Some(a) if a.addr == ptr as usize && a.device == device => a,
            _ => {
                let e = Error::invalid_argument("free_raw");
                let e = self.explain_bad_pointer(ptr, Some(device), "free_raw", e);
                return Err(dipu_memcheck::on_bad_free(ptr as usize, e));
            }
        };
        // Before the allocator can hand `ptr` out again to another thread.
        dipu_memcheck::on_free(ptr as usize);
        let result = alloc.free(ptr);
        if result.is_err() {
            let loc = dipu_memcheck::Location::Device(device);
            dipu_memcheck::on_alloc(a.addr, a.len, loc, None);
        }
        result
    }

    /// Declares that the live allocation at `ptr` is also used by work on
    /// `stream` (see [`DeviceAllocator::record_stream`]); the raw form of
    /// [`DeviceBuffer::record_stream`](crate::DeviceBuffer::record_stream).
    /// No process-wide lock: the pointer's device comes from the segment
    /// map, its allocator checks it.
    pub fn record_stream_raw(&self, ptr: *mut c_void, stream: Stream) -> Result<()> {
        self.check_stream(&stream, "record_stream")?;
        if ptr.is_null() {
            return Ok(());
        }
        let Some(device) = self.device_of(ptr) else {
            let e = Error::invalid_argument("record_stream");
            return Err(self.explain_bad_pointer(ptr, None, "record_stream", e));
        };
        self.allocators
            .get(device)?
            .record_stream(ptr, stream)
            .map_err(|e| self.explain_bad_pointer(ptr, None, "record_stream", e))
    }

    /// Frees pinned memory given up with
    /// [`HostBuffer::into_raw`](crate::HostBuffer::into_raw). Null is a
    /// no-op; an unknown pointer or a second free is an `InvalidArgument`
    /// error.
    pub fn free_host_raw(&self, ptr: *mut c_void) -> Result<()> {
        if !dipu_memcheck::enabled() {
            return self.host.free(ptr);
        }
        // Before the allocator can hand `ptr` out again to another thread;
        // an unknown pointer or a second free is a no-op here and an error
        // below.
        dipu_memcheck::on_free(ptr as usize);
        self.host
            .free(ptr)
            .map_err(|e| dipu_memcheck::on_bad_free(ptr as usize, e))
    }

    /// Declares that a copy using the pinned block at `ptr` was queued on
    /// `stream` (see [`HostAllocator::record_event`]).
    pub fn record_host_event_raw(&self, ptr: *mut c_void, stream: Stream) -> Result<()> {
        self.check_stream(&stream, "record_event")?;
        self.host.record_event(ptr, stream)
    }

    /// Checks the memory checker's guard bytes and poisoned frees now:
    /// synchronizes each device with guarded allocations, checks the
    /// guards of the frees waiting for their streams (and releases them)
    /// and of every live allocation, and the poison of every block in the
    /// quarantine (which keeps them), and reports each overwritten side
    /// and each write after free not reported before. Returns the
    /// violations found by this call (0 without guards and poison).
    pub fn check_guards(&self) -> Result<usize> {
        let list: Vec<_> = self.guards.lock().clone();
        let mut found = 0;
        for g in list {
            found += g.check_all()?;
        }
        Ok(found)
    }

    /// The guard bytes each side of a device allocation has (the one
    /// before the pointer rounded up to the allocators' 512-byte
    /// alignment), or `None` when guards are off for this runtime.
    pub fn guard_bytes(&self) -> Option<(usize, usize)> {
        self.guard_sizes
            .filter(|s| s.back > 0)
            .map(|s| (s.front, s.back))
    }

    /// The bytes each device's quarantine of poisoned frees holds
    /// (`DIPU_MEM_CHECK_POISON`), or `None` when frees are not poisoned
    /// for this runtime.
    pub fn quarantine_bytes(&self) -> Option<usize> {
        self.quarantine
    }

    /// Gives `device`'s cached, unused memory back to the vendor.
    pub fn empty_cache(&self, device: i32) -> Result<()> {
        self.allocators.get(device)?.empty_cache()
    }

    /// Gives the pinned allocator's cached blocks back to the vendor.
    pub fn empty_host_cache(&self) -> Result<()> {
        self.host.empty_cache()
    }

    /// `device`'s allocator statistics.
    pub fn stats(&self, device: i32) -> Result<DeviceStats> {
        let stats = self.allocators.get(device)?.stats();
        Ok(self.baselines.apply(device, stats))
    }

    /// Restarts `device`'s accumulated statistics (the `allocated` and
    /// `freed` totals and the `num_*` counts) at zero; current values and
    /// peaks are kept.
    pub fn reset_accumulated_stats(&self, device: i32) -> Result<()> {
        let stats = self.allocators.get(device)?.stats();
        self.baselines.reset(device, stats);
        Ok(())
    }

    /// The pinned allocator's statistics.
    pub fn host_stats(&self) -> DeviceStats {
        self.host_baselines.apply(0, self.host.stats())
    }

    /// Restarts the pinned allocator's accumulated statistics at zero, as
    /// [`Runtime::reset_accumulated_stats`] does for a device.
    pub fn reset_host_accumulated_stats(&self) {
        self.host_baselines.reset(0, self.host.stats());
    }

    /// Restarts `device`'s peak statistics at their current values.
    pub fn reset_peak_stats(&self, device: i32) -> Result<()> {
        self.allocators.get(device)?.reset_peak_stats();
        Ok(())
    }

    /// `device`'s segments and blocks as JSON (PyTorch's snapshot shape).
    pub fn snapshot_json(&self, device: i32) -> Result<String> {
        Ok(self.allocators.get(device)?.snapshot().to_json())
    }

    /// Limits `device`'s allocator to `fraction` (in (0, 1]) of its memory.
    pub fn set_memory_fraction(&self, device: i32, fraction: f64) -> Result<()> {
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(Error::invalid_argument(format!(
                "set_memory_fraction: {fraction} is not in (0, 1]"
            )));
        }
        self.allocators.get(device)?.set_memory_fraction(fraction)
    }

    // ---- generators ----

    /// The generators, one per device.
    pub fn generators(&self) -> &Generators {
        &self.generators
    }

    /// `device`'s default random generator.
    pub fn default_generator(&self, device: i32) -> Result<&Generator> {
        self.generators.default_generator(device)
    }

    /// Seeds every device's default generator with `seed`.
    pub fn manual_seed_all(&self, seed: u64) {
        self.generators.manual_seed_all(seed)
    }
}
