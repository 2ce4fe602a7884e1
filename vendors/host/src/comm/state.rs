//! One rank's communicator: its mapped segment, its place in it, the step
//! counters it hands out to operations, and its error.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dipu_deviceapi::{Error, ErrorKind, Result};
use parking_lot::Mutex;

use super::id::UniqueId;
use super::layout::{Layout, DIRECT_NO, DIRECT_YES, LAYOUT_WORD, MAX_WORLD};
use super::segment::Segment;
use super::{cma, direct, local};
use crate::arena::{Identity, PeerArena};
use crate::memory::Memory;

/// The longest a rank that gave up waits for its peers to stop writing
/// into its buffers.
const QUIESCE_LIMIT: Duration = Duration::from_secs(2);

/// Why a rank gave up on the communicator (the abort word's high half).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// `comm_abort` was called.
    Aborted = 1,
    /// An operation of this rank failed (its communicator error says why).
    Failed = 2,
    /// The rank's host vendor was dropped with the communicator live.
    VendorDropped = 3,
}

impl Reason {
    fn words(code: u64) -> &'static str {
        match code {
            1 => "aborted the communicator (comm_abort)",
            2 => "failed in an operation (its comm_async_error says why) and gave up",
            3 => "dropped its host vendor without destroying the communicator",
            _ => "gave up for an unknown reason",
        }
    }
}

/// One rank's view of a communicator.
#[derive(Debug)]
pub(crate) struct CommState {
    /// This rank.
    pub(crate) rank: usize,
    /// Ranks in all.
    pub(crate) world: usize,
    /// The device the communicator was created on.
    pub(crate) device: i32,
    /// The vendor's memory registry, to check user buffers.
    pub(crate) memory: Arc<Memory>,
    /// The safety-net time limit without progress.
    pub(crate) timeout: Duration,
    /// This process's pid.
    pub(crate) pid: i32,
    seg: Segment,
    name: String,
    /// The word whose address the header publishes for peers to probe.
    _probe: Box<AtomicU64>,
    /// Which peers this rank may read directly (the environment).
    direct_policy: direct::Policy,
    /// The communicator's verdict once known: 0, `DIRECT_YES` or `DIRECT_NO`.
    direct: AtomicU8,
    /// Each peer process's device arena, mapped here on first use (`None`
    /// if it has none or it cannot be mapped).
    peer_arenas: Box<[OnceLock<Option<PeerArena>>]>,
    /// Tests: the rank gives up right before its first push.
    #[cfg(test)]
    pub(crate) give_up_before_push: AtomicBool,
    /// Last collective step handed out (steps start at 1).
    coll_reserved: AtomicU64,
    /// Last step handed out per channel `rank -> peer`.
    send_reserved: Box<[AtomicU64]>,
    /// Last step handed out per channel `peer -> rank`.
    recv_reserved: Box<[AtomicU64]>,
    all_joined: AtomicBool,
    aborted: AtomicBool,
    unlinked: AtomicBool,
    error: Mutex<Option<Error>>,
}

impl CommState {
    /// Maps the segment of `id` and joins it as `rank` of `world`; does not
    /// wait for the other ranks.
    pub(crate) fn join(
        id: &UniqueId,
        world: usize,
        rank: usize,
        device: i32,
        memory: Arc<Memory>,
        timeout: Duration,
    ) -> Result<CommState> {
        let name = id.segment_name();
        let seg = Segment::open(&name, Layout::new(world))?;
        let h = seg.header();
        match h
            .layout
            .0
            .compare_exchange(0, LAYOUT_WORD, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(word) if word == LAYOUT_WORD => {}
            Err(word) => {
                return Err(Error::invalid_argument(format!(
                    "comm_init_rank: the communicator was created by a host vendor with another \
                     shared-memory layout ({word:#x}, this one is {LAYOUT_WORD:#x}); all ranks \
                     must run the same dipu-rs build"
                )))
            }
        }
        let direct_policy = direct::Policy::from_env()?;
        let n = world as u32;
        match h
            .world
            .0
            .compare_exchange(0, n, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(m) if m == n => {}
            Err(m) => {
                return Err(Error::invalid_argument(format!(
                    "world size mismatch: rank {rank} was given {world}, the communicator has {m}"
                )))
            }
        }
        let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        if let Err(other) =
            h.pids.0[rank].compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
        {
            return Err(Error::invalid_argument(format!(
                "rank {rank} has already joined this communicator (from pid {other}); \
                 each rank joins once"
            )));
        }
        let probe = Box::new(AtomicU64::new(cma::probe_value(&name, rank)));
        #[allow(unused_mut)]
        let mut probe_addr = &*probe as *const AtomicU64 as u64;
        #[cfg(test)]
        if std::env::var_os(super::tests::ENV_BAD_PROBE).is_some() {
            probe_addr = 8; // never mapped: the peers' probe fails
        }
        h.probe.0[rank].store(probe_addr, Ordering::Release);
        if let Some(arena) = memory.arena(device) {
            let Identity { fd, inode, size } = arena.identity();
            let words = &h.arenas.0[rank];
            words[1].store(inode, Ordering::Relaxed);
            words[2].store(size, Ordering::Relaxed);
            words[0].store(fd as u64 + 1, Ordering::Release);
        }
        local::register(&name, rank, &memory);
        let full = full_mask(world);
        let before = h.joined.0.fetch_or(1 << rank, Ordering::AcqRel);
        let state = CommState {
            rank,
            world,
            device,
            memory,
            timeout,
            pid,
            seg,
            name,
            _probe: probe,
            direct_policy,
            direct: AtomicU8::new(0),
            peer_arenas: (0..world).map(|_| OnceLock::new()).collect(),
            #[cfg(test)]
            give_up_before_push: AtomicBool::new(false),
            coll_reserved: AtomicU64::new(0),
            send_reserved: (0..world).map(|_| AtomicU64::new(0)).collect(),
            recv_reserved: (0..world).map(|_| AtomicU64::new(0)).collect(),
            all_joined: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            unlinked: AtomicBool::new(false),
            error: Mutex::new(None),
        };
        if before | (1 << rank) == full {
            state.all_joined.store(true, Ordering::Release);
            state.unlink();
        }
        Ok(state)
    }

    /// The mapped segment.
    pub(crate) fn seg(&self) -> &Segment {
        &self.seg
    }

    /// Hands out `steps` collective steps; returns the first.
    pub(crate) fn reserve_coll(&self, steps: u64) -> u64 {
        self.coll_reserved.fetch_add(steps, Ordering::Relaxed) + 1
    }

    /// Hands out `steps` steps of the channel to (`send`) or from `peer`.
    pub(crate) fn reserve_p2p(&self, peer: usize, send: bool, steps: u64) -> u64 {
        let counters = if send {
            &self.send_reserved
        } else {
            &self.recv_reserved
        };
        counters[peer].fetch_add(steps, Ordering::Relaxed) + 1
    }

    /// Whether every rank has joined; the first to see it removes the name.
    pub(crate) fn ready(&self) -> bool {
        if self.all_joined.load(Ordering::Acquire) {
            return true;
        }
        let joined = self.seg.header().joined.0.load(Ordering::Acquire);
        if joined != full_mask(self.world) {
            return false;
        }
        self.all_joined.store(true, Ordering::Release);
        self.unlink();
        true
    }

    /// Ranks that have not joined yet, e.g. `1, 3`.
    pub(crate) fn missing(&self) -> String {
        let joined = self.seg.header().joined.0.load(Ordering::Acquire);
        let missing: Vec<String> = (0..self.world)
            .filter(|r| joined & (1 << r) == 0)
            .map(|r| r.to_string())
            .collect();
        missing.join(", ")
    }

    /// Removes the segment's name (once).
    pub(crate) fn unlink(&self) {
        if !self.unlinked.swap(true, Ordering::AcqRel) {
            Segment::unlink(&self.name);
        }
    }

    /// Whether the collectives of this communicator read the peers'
    /// buffers directly (`direct.rs`) rather than through the segment's
    /// slots: once every rank has joined, each rank checks that it can
    /// read every peer and publishes its verdict; the answer is yes if all
    /// say yes. `None` while some rank has not published yet. Every rank
    /// gets the same answer.
    pub(crate) fn direct(&self) -> Option<bool> {
        match self.direct.load(Ordering::Acquire) {
            DIRECT_YES => return Some(true),
            DIRECT_NO => return Some(false),
            _ => {}
        }
        let verdicts = &self.seg.header().direct.0;
        if verdicts[self.rank].load(Ordering::Acquire) == 0 {
            let mine = if self.can_read_peers() {
                DIRECT_YES
            } else {
                DIRECT_NO
            };
            let _ =
                verdicts[self.rank].compare_exchange(0, mine, Ordering::AcqRel, Ordering::Acquire);
        }
        let mut all = true;
        for verdict in &verdicts[..self.world] {
            match verdict.load(Ordering::Acquire) {
                0 => return None,
                DIRECT_YES => {}
                _ => all = false,
            }
        }
        if all {
            tracing::debug!(target: "dipu_vendor_host", "communicator rank {}: collectives read the peers' buffers directly", self.rank);
        }
        self.direct
            .store(if all { DIRECT_YES } else { DIRECT_NO }, Ordering::Release);
        Some(all)
    }

    /// Whether this rank may and can read every peer's memory: a peer of
    /// this process through its registry, another process (unless the
    /// policy forbids it) through its device arena mapped here and
    /// `process_vm_readv` for buffers outside the arena, probed on the word
    /// it published.
    fn can_read_peers(&self) -> bool {
        let no = |why: String| {
            tracing::debug!(
                target: "dipu_vendor_host",
                "communicator rank {}: collectives stage every byte through shared memory: {why}",
                self.rank
            );
            false
        };
        let env = direct::ENV_COMM_DIRECT;
        if self.direct_policy == direct::Policy::Off {
            return no(format!("{env}=0"));
        }
        for peer in (0..self.world).filter(|p| *p != self.rank) {
            if local::memory(&self.name, peer).is_some() {
                continue;
            }
            let pid = self.pid_of(peer);
            if pid == self.pid {
                return no(format!("rank {peer} has this pid but left this process"));
            }
            if self.direct_policy != direct::Policy::All {
                return no(format!(
                    "rank {peer} is another process (pid {pid}) and {env}=local"
                ));
            }
            if self.arena_published(peer) {
                if let Err(why) = self.open_peer_arena(peer) {
                    return no(format!(
                        "the device memory of rank {peer} (pid {pid}) cannot be mapped: {why}"
                    ));
                }
            }
            let addr = self.seg.header().probe.0[peer].load(Ordering::Acquire) as usize;
            let mut word = 0u64;
            // SAFETY: `word` is a local of 8 bytes.
            let read = unsafe { cma::read(pid, addr, (&raw mut word).cast(), 8) };
            match read {
                Ok(()) if word == cma::probe_value(&self.name, peer) => {}
                Ok(()) => {
                    return no(format!(
                        "the probe of rank {peer} (pid {pid}) read an unexpected value"
                    ))
                }
                Err(e) => {
                    return no(format!(
                        "process_vm_readv of rank {peer} (pid {pid}) failed: {e}"
                    ))
                }
            }
        }
        true
    }

    /// Whether rank `peer` published a device arena.
    fn arena_published(&self, peer: usize) -> bool {
        self.seg.header().arenas.0[peer][0].load(Ordering::Acquire) != 0
    }

    /// Maps rank `peer`'s device arena (once; later calls give the first
    /// answer).
    fn open_peer_arena(&self, peer: usize) -> std::result::Result<&PeerArena, String> {
        let opened = self.peer_arenas[peer].get_or_init(|| {
            let words = &self.seg.header().arenas.0[peer];
            let fd_plus_one = words[0].load(Ordering::Acquire);
            let identity = Identity {
                fd: i32::try_from(fd_plus_one.checked_sub(1)?).ok()?,
                inode: words[1].load(Ordering::Relaxed),
                size: words[2].load(Ordering::Relaxed),
            };
            PeerArena::open(self.pid_of(peer), identity)
                .inspect_err(|why| {
                    tracing::debug!(target: "dipu_vendor_host", "communicator rank {}: rank {peer}'s device memory: {why}", self.rank);
                })
                .ok()
        });
        opened
            .as_ref()
            .ok_or_else(|| "none published, or opening it failed (see the debug log)".to_owned())
    }

    /// Rank `peer`'s device arena mapped here, if it has one that could
    /// be mapped.
    pub(crate) fn peer_arena(&self, peer: usize) -> Option<&PeerArena> {
        self.open_peer_arena(peer).ok()
    }

    /// How this rank reaches rank `peer`'s memory.
    pub(crate) fn access(&self, peer: usize) -> Result<direct::Access> {
        if peer == self.rank {
            return Ok(direct::Access::Me);
        }
        if let Some(memory) = local::memory(&self.name, peer) {
            return Ok(direct::Access::Local(memory));
        }
        let pid = self.pid_of(peer);
        if pid == self.pid {
            return Err(Error::new(
                ErrorKind::VendorError,
                format!("rank {peer} left this process's communicator (its vendor is gone)"),
            ));
        }
        Ok(direct::Access::Remote(pid))
    }

    /// Rank `rank`'s pid (0 until it joined).
    pub(crate) fn pid_of(&self, rank: usize) -> i32 {
        self.seg.header().pids.0[rank].load(Ordering::Acquire)
    }

    /// The first error of this communicator, if any.
    pub(crate) fn error(&self) -> Option<Error> {
        self.error.lock().clone()
    }

    /// Keeps `error` unless an earlier one is kept; returns the kept one.
    pub(crate) fn record(&self, error: Error) -> Error {
        self.error.lock().get_or_insert(error).clone()
    }

    /// Records `error` from a failed operation and tells every rank.
    pub(crate) fn fail(&self, error: Error) {
        tracing::error!(target: "dipu_vendor_host", "communicator error on rank {}: {error}", self.rank);
        self.record(error);
        self.give_up(Reason::Failed);
    }

    /// Aborts: local operations stop, every rank is told, the name goes.
    pub(crate) fn abort(&self, reason: Reason, error: Error) {
        self.record(error);
        self.aborted.store(true, Ordering::SeqCst);
        self.give_up(reason);
        self.unlink();
    }

    /// Publishes that this rank gave up (the first rank to do so wins).
    fn give_up(&self, reason: Reason) {
        let word = (reason as u64) << 32 | (self.rank as u64 + 1);
        let _ =
            self.seg
                .header()
                .abort
                .0
                .compare_exchange(0, word, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Marks this rank as (not) writing into its peers' buffers. Sequentially
    /// consistent, as the abort word's store and load around it: a rank that
    /// gives up after a pusher marked itself waits for it, and a pusher that
    /// marks itself after that sees the abort before it writes.
    pub(crate) fn set_pushing(&self, on: bool) {
        self.seg.header().pushing.0[self.rank].store(u8::from(on), Ordering::SeqCst);
    }

    /// Tests: rank `p`'s pushing flag.
    #[cfg(test)]
    pub(crate) fn pushing_flag(&self, p: usize) -> u8 {
        self.seg.header().pushing.0[p].load(Ordering::SeqCst)
    }

    /// After this rank gave up: waits until no peer writes into this
    /// rank's buffers any more (each pusher stops at its next piece once it
    /// sees the abort), or the peer's process is gone, for at most
    /// [`QUIESCE_LIMIT`].
    pub(crate) fn quiesce(&self) {
        let start = std::time::Instant::now();
        let header = self.seg.header();
        let busy = |p: usize| {
            p != self.rank
                && header.pushing.0[p].load(Ordering::SeqCst) != 0
                && (self.pid_of(p) == self.pid || super::engine::alive(self.pid_of(p)))
        };
        while (0..self.world).any(busy) {
            if start.elapsed() > QUIESCE_LIMIT {
                tracing::warn!(target: "dipu_vendor_host", "communicator rank {}: a peer still writes into this rank's buffers after {QUIESCE_LIMIT:?}; going on", self.rank);
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Why waiting must stop: local abort or another rank giving up (read
    /// sequentially consistent, as [`CommState::set_pushing`] needs).
    pub(crate) fn check_abort(&self) -> Result<()> {
        if self.aborted.load(Ordering::SeqCst) {
            return Err(Error::new(
                ErrorKind::VendorError,
                format!("rank {} aborted the communicator (comm_abort)", self.rank),
            ));
        }
        let word = self.seg.header().abort.0.load(Ordering::SeqCst);
        if word == 0 {
            return Ok(());
        }
        let who = (word & 0xffff_ffff).saturating_sub(1);
        Err(Error::new(
            ErrorKind::VendorError,
            format!("rank {who} {}", Reason::words(word >> 32)),
        ))
    }
}

impl Drop for CommState {
    fn drop(&mut self) {
        local::unregister(&self.name, self.rank);
        // The name goes once every rank joined. Before that it stays, so a
        // rank that joins late still finds the others (the last rank to
        // join removes it; an abort removes it at once).
        self.ready();
    }
}

fn full_mask(world: usize) -> u64 {
    debug_assert!((1..=MAX_WORLD).contains(&world));
    if world == 64 {
        u64::MAX
    } else {
        (1 << world) - 1
    }
}
