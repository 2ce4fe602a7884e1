//! Tests of the host vendor's collectives through the `DeviceApi` trait:
//! ranks as threads (one vendor with a device per rank, or a vendor per
//! rank) and as processes (this test binary started again).

mod collectives;
mod data;
mod direct;
mod failures;
mod p2p;
mod process;

use std::ffi::c_void;
use std::time::Duration;

use dipu_deviceapi::{CommHandle, CopyKind, DeviceApi, StreamHandle};

use super::direct::{Policy, FORCE};
use super::id::UniqueId;
use crate::{HostConfig, HostVendor};

/// Set in a test's child process: its rank publishes an unmapped probe
/// address, so its peers cannot read it and the collectives stay staged.
pub(super) const ENV_BAD_PROBE: &str = "DIPU_HOST_COMM_TEST_BAD_PROBE";
/// Set in a test's child process: its rank publishes an unmapped send
/// address in direct collectives, so its peers' reads fail.
pub(super) const ENV_BAD_SEND: &str = "DIPU_HOST_COMM_TEST_BAD_SEND";
/// Set in a test's child process: its devices have no arena, so its
/// buffers are read with `process_vm_readv`.
pub(crate) const ENV_NO_ARENA: &str = "DIPU_HOST_COMM_TEST_NO_ARENA";

/// How the ranks of a test get their vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One vendor with a device per rank; each rank thread sets its device.
    SharedVendor,
    /// A vendor of its own (one device) per rank thread.
    OwnVendor,
}

const MODES: [Mode; 2] = [Mode::SharedVendor, Mode::OwnVendor];

/// A vendor for tests: `devices` devices, a short communicator timeout.
fn vendor(devices: i32) -> HostVendor {
    HostVendor::new(HostConfig {
        devices,
        memory_per_device: 1 << 30,
        comm_timeout: Duration::from_secs(20),
        ..HostConfig::default()
    })
    .expect("host vendor")
}

/// One rank of a running test.
struct Rank<'a> {
    host: &'a HostVendor,
    comm: CommHandle,
    rank: usize,
    world: usize,
}

impl Rank<'_> {
    /// Device memory holding `bytes`.
    fn upload(&self, bytes: &[u8]) -> *mut c_void {
        let ptr = self.host.malloc(bytes.len().max(1)).expect("malloc");
        // SAFETY: `ptr` has room for `bytes`.
        unsafe {
            self.host
                .memcpy(
                    ptr,
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    CopyKind::HostToDevice,
                )
                .expect("upload");
        }
        ptr
    }

    /// `len` bytes of device memory at `ptr`, after the default stream's work.
    fn download(&self, ptr: *const c_void, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        // SAFETY: `ptr` is live device memory of at least `len` bytes.
        unsafe {
            self.host
                .memcpy(out.as_mut_ptr().cast(), ptr, len, CopyKind::DeviceToHost)
                .expect("download");
        }
        out
    }

    fn free(&self, ptr: *mut c_void) {
        // SAFETY: `ptr` came from `upload` and is freed once.
        unsafe { self.host.free(ptr).expect("free") };
    }

    /// Whether the communicator's collectives read the peers directly
    /// (`None`: not known yet, before the first collective).
    fn direct(&self) -> Option<bool> {
        self.host.comms.get(self.comm).expect("live").direct()
    }

    /// How many peers' device arenas this rank has mapped.
    fn mapped_peers(&self) -> usize {
        let state = self.host.comms.get(self.comm).expect("live");
        (0..self.world)
            .filter(|p| *p != self.rank && state.peer_arena(*p).is_some())
            .count()
    }

    /// Waits for the default stream and checks the communicator is healthy.
    fn sync(&self) {
        // SAFETY: the default stream and a live communicator of `host`.
        unsafe {
            self.host
                .stream_synchronize(StreamHandle::DEFAULT)
                .expect("stream");
            self.host
                .comm_async_error(self.comm)
                .expect("communicator healthy");
        }
    }
}

/// Runs `body` on `world` rank threads joined to one new communicator,
/// destroys it, and checks nothing is left in /dev/shm.
fn with_ranks<R: Send>(world: usize, mode: Mode, body: impl Fn(&Rank<'_>) -> R + Sync) -> Vec<R> {
    with_ranks_as(world, mode, |_| None, body)
}

/// [`with_ranks`] with the direct-read policy of each rank (`None`: the
/// environment's).
fn with_ranks_as<R: Send>(
    world: usize,
    mode: Mode,
    policy: impl Fn(usize) -> Option<Policy> + Sync,
    body: impl Fn(&Rank<'_>) -> R + Sync,
) -> Vec<R> {
    let shared = (mode == Mode::SharedVendor).then(|| vendor(world as i32));
    let id = shared.as_ref().map_or_else(
        || vendor(1).comm_get_unique_id(),
        |host| host.comm_get_unique_id(),
    );
    let id = id.expect("unique id");
    let results = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..world)
            .map(|rank| {
                let (shared, id, body, policy) = (shared.as_ref(), &id, &body, &policy);
                scope.spawn(move || {
                    FORCE.set(policy(rank));
                    let own = shared.is_none().then(|| vendor(1));
                    let host = shared.or(own.as_ref()).expect("a vendor");
                    if shared.is_some() {
                        host.set_device(rank as i32).expect("set_device");
                    }
                    let comm = host
                        .comm_init_rank(world as i32, id, rank as i32)
                        .expect("comm_init_rank");
                    let r = Rank {
                        host,
                        comm,
                        rank,
                        world,
                    };
                    let out = body(&r);
                    r.sync();
                    // SAFETY: a live communicator of `host`, destroyed once.
                    unsafe { host.comm_destroy(comm).expect("comm_destroy") };
                    out
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("rank thread"))
            .collect()
    });
    assert_no_segment(&id);
    results
}

/// Fails if the segment of `id` is still in /dev/shm.
#[track_caller]
fn assert_no_segment(id: &[u8]) {
    let name = UniqueId::parse(id).expect("id").segment_name();
    let path = format!("/dev/shm{name}");
    assert!(
        !std::path::Path::new(&path).exists(),
        "{path} is left in /dev/shm"
    );
}
