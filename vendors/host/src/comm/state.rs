//! One rank's communicator: its mapped segment, its place in it, the step
//! counters it hands out to operations, and its error.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dipu_deviceapi::{Error, ErrorKind, Result};
use parking_lot::Mutex;

use super::id::UniqueId;
use super::layout::{Layout, LAYOUT_WORD, MAX_WORLD};
use super::segment::Segment;
use crate::memory::Memory;

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
        self.aborted.store(true, Ordering::Release);
        self.give_up(reason);
        self.unlink();
    }

    /// Publishes that this rank gave up (the first rank to do so wins).
    fn give_up(&self, reason: Reason) {
        let word = (reason as u64) << 32 | (self.rank as u64 + 1);
        let _ = self.seg.header().abort.0.compare_exchange(
            0,
            word,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Why waiting must stop: local abort or another rank giving up.
    pub(crate) fn check_abort(&self) -> Result<()> {
        if self.aborted.load(Ordering::Acquire) {
            return Err(Error::new(
                ErrorKind::VendorError,
                format!("rank {} aborted the communicator (comm_abort)", self.rank),
            ));
        }
        let word = self.seg.header().abort.0.load(Ordering::Acquire);
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
