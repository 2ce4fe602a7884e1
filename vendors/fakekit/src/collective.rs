//! Communicators whose ranks are processes (or threads: the same path
//! serves both). Ranks meet in POSIX shared memory named by the unique id:
//! a control segment (`/dev/shm/dipu-fake-<tag>-<hash of the id>`) holds
//! the size, who joined (each rank's process id) and the aborted flag.
//! Every operation is a meeting: each party posts what it brings (a few
//! words of metadata and its data) as a file of its own, reads what the
//! others posted (mapped, so nothing is copied twice), and removes its file
//! once every party has mapped it.
//!
//! A waiting rank notices a peer process that exited (its process is gone
//! or a zombie): the communicator is then aborted for everyone, and the
//! files of the communicator (the dead rank's included) are removed, so a
//! killed rank leaves nothing in `/dev/shm` once the others are done.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use crate::names::shm_prefix;
use crate::shm::Map;

/// A meeting's key: (kind, sequence) chosen by the fake (a collective's
/// sequence number, a send/receive pair's own counter...).
pub type Key = (u64, u64);

/// Words of metadata each party posts with its data.
pub const META: usize = 6;

/// The most ranks a communicator may have.
pub const MAX_RANKS: usize = 512;

/// Why a wait ended without the other parties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The communicator was aborted (by a rank, or after a peer exited).
    Aborted,
    /// The process of this rank exited before the meeting.
    PeerExited(usize),
    /// This rank left the communicator ([`Member::leave`]) before posting.
    Left(usize),
    /// The wait's limit passed.
    TimedOut,
    /// The shared memory could not be made or read (`/dev/shm` full...).
    System,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Aborted => f.write_str("the communicator was aborted"),
            Failure::PeerExited(r) => write!(f, "the process of rank {r} exited"),
            Failure::Left(r) => write!(f, "rank {r} left the communicator"),
            Failure::TimedOut => f.write_str("the other ranks did not arrive in time"),
            Failure::System => f.write_str("the shared memory of the communicator failed"),
        }
    }
}

/// The control segment, shared by every rank.
#[repr(C)]
struct Control {
    nranks: AtomicU64,
    generation: AtomicU64,
    joined: AtomicU64,
    aborted: AtomicU64,
    pids: [AtomicU32; MAX_RANKS],
}

/// A rank's process id once it left ([`Member::leave`]).
const LEFT: u32 = u32::MAX;

/// Bytes before a posted file's data: readers (u64), length (u64), meta.
const HEAD: usize = 64;

/// Where the segments live.
const DIR: &str = "/dev/shm";

/// Whether process `pid` is running (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// One party's post: its file, removed when dropped.
#[derive(Debug)]
pub struct Posted {
    path: PathBuf,
    map: Map,
}

impl Drop for Posted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What one party posted, as another party reads it.
#[derive(Debug)]
pub struct View {
    map: Map,
}

impl View {
    /// The metadata words.
    pub fn meta(&self) -> [u64; META] {
        let mut m = [0; META];
        for (i, w) in m.iter_mut().enumerate() {
            *w = self.map.word(16 + 8 * i).load(Ordering::Acquire);
        }
        m
    }

    /// The data.
    pub fn data(&self) -> &[u8] {
        let len = self.map.word(8).load(Ordering::Acquire) as usize;
        &self.map.bytes()[HEAD..HEAD + len.min(self.map.len() - HEAD)]
    }
}

/// One rank's membership of a communicator.
#[derive(Debug)]
pub struct Member {
    /// The number of ranks.
    pub nranks: usize,
    /// This rank.
    pub rank: usize,
    name: String,
    prefix: String,
    ctl: Map,
}

impl Member {
    /// Joins the communicator of `id` as `rank` of `nranks` (the first
    /// rank to come makes it; the last one removes its name, which every
    /// rank has mapped by then). `Err` if `id` was used for another size
    /// or `rank` joined already.
    pub fn join(tag: &str, id: &[u8], nranks: usize, rank: usize) -> Result<Member, String> {
        if nranks == 0 || nranks > MAX_RANKS || rank >= nranks {
            return Err(format!(
                "rank {rank} of {nranks} (at most {MAX_RANKS} ranks)"
            ));
        }
        let name = shm_prefix(tag, id);
        let path = Path::new(DIR).join(&name);
        let size = std::mem::size_of::<Control>();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if file.metadata().map_or(0, |m| m.len()) < size as u64 {
            file.set_len(size as u64)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let ctl = Map::new(&file, size).map_err(|e| format!("{}: {e}", path.display()))?;
        drop(file);
        let c = ctl.control();
        if let Err(other) =
            c.nranks
                .compare_exchange(0, nranks as u64, Ordering::AcqRel, Ordering::Acquire)
        {
            if other != nranks as u64 {
                return Err(format!("the id was used for {other} ranks, not {nranks}"));
            }
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        let _ = c
            .generation
            .compare_exchange(0, stamp, Ordering::AcqRel, Ordering::Acquire);
        if c.pids[rank]
            .compare_exchange(0, std::process::id(), Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(format!("rank {rank} joined the communicator already"));
        }
        let prefix = format!("{name}-{:x}", c.generation.load(Ordering::Acquire));
        if c.joined.fetch_add(1, Ordering::AcqRel) + 1 == nranks as u64 {
            let _ = std::fs::remove_file(&path);
        }
        Ok(Member {
            nranks,
            rank,
            name,
            prefix,
            ctl,
        })
    }

    fn control(&self) -> &Control {
        self.ctl.control()
    }

    /// Whether every rank has joined.
    pub fn complete(&self) -> bool {
        self.control().joined.load(Ordering::Acquire) >= self.nranks as u64
    }

    /// Waits until every rank has joined (at most `limit`).
    pub fn wait_complete(&self, limit: Option<Duration>) -> Result<(), Failure> {
        self.wait(limit, || self.complete().then_some(()))
    }

    /// Aborts for every rank: each wait on it ends with [`Failure::Aborted`];
    /// the communicator's files are removed.
    pub fn abort(&self) {
        let _ = self
            .control()
            .aborted
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
        self.clean();
    }

    /// Aborts because rank `dead`'s process exited (every rank's wait then
    /// says so).
    fn abort_for(&self, dead: usize) {
        let _ = self.control().aborted.compare_exchange(
            0,
            2 + dead as u64,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.clean();
    }

    /// Why it was aborted, if it was.
    fn aborted(&self) -> Option<Failure> {
        match self.control().aborted.load(Ordering::Acquire) {
            0 => None,
            1 => Some(Failure::Aborted),
            n => Some(Failure::PeerExited((n - 2) as usize)),
        }
    }

    /// Whether it was aborted.
    pub fn is_aborted(&self) -> bool {
        self.control().aborted.load(Ordering::Acquire) != 0
    }

    /// Removes every file of the communicator from `/dev/shm`.
    fn clean(&self) {
        let _ = std::fs::remove_file(Path::new(DIR).join(&self.name));
        let Ok(dir) = std::fs::read_dir(DIR) else {
            return;
        };
        let mine = format!("{}.", self.prefix);
        for e in dir.flatten() {
            if e.file_name().to_string_lossy().starts_with(&mine) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// The first rank whose process is gone.
    fn dead_peer(&self) -> Option<usize> {
        let me = std::process::id();
        (0..self.nranks).find(|&r| {
            let pid = self.control().pids[r].load(Ordering::Acquire);
            pid != 0 && pid != LEFT && pid != me && !alive(pid)
        })
    }

    /// Whether `rank` left.
    fn has_left(&self, rank: usize) -> bool {
        self.control().pids[rank].load(Ordering::Acquire) == LEFT
    }

    /// Leaves the communicator for good (its other ranks carry on): a
    /// later wait of theirs for a post of this rank fails with
    /// [`Failure::Left`] instead of waiting for one that will never come.
    pub fn leave(&self) {
        self.control().pids[self.rank].store(LEFT, Ordering::Release);
    }

    /// Polls `ready` until it gives a value; fails when the communicator is
    /// aborted, a peer's process exited (which aborts it), or `limit` passed.
    fn wait<T>(
        &self,
        limit: Option<Duration>,
        ready: impl FnMut() -> Option<T>,
    ) -> Result<T, Failure> {
        self.wait_for(None, limit, ready)
    }

    /// [`Member::wait`], also failing when rank `poster` (whose post this
    /// waits for) left.
    fn wait_for<T>(
        &self,
        poster: Option<usize>,
        limit: Option<Duration>,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Result<T, Failure> {
        let start = Instant::now();
        let mut checked = start;
        let mut pause = Duration::from_micros(5);
        loop {
            if let Some(v) = ready() {
                return Ok(v);
            }
            if let Some(why) = self.aborted() {
                return Err(why);
            }
            let now = Instant::now();
            if now.duration_since(checked) >= Duration::from_millis(50) {
                checked = now;
                if let Some(r) = self.dead_peer() {
                    self.abort_for(r);
                    return Err(self.aborted().unwrap_or(Failure::PeerExited(r)));
                }
                if let Some(r) = poster.filter(|&r| r < self.nranks && self.has_left(r)) {
                    return Err(Failure::Left(r));
                }
            }
            if limit.is_some_and(|l| now.duration_since(start) >= l) {
                return Err(Failure::TimedOut);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    fn path(&self, key: Key, index: usize) -> PathBuf {
        Path::new(DIR).join(format!("{}.{}.{}.{index}", self.prefix, key.0, key.1))
    }

    /// Posts party `index`'s `meta` and `data` to meeting `key`; returns at once.
    pub fn post(
        &self,
        key: Key,
        index: usize,
        meta: [u64; META],
        data: &[u8],
    ) -> Result<Posted, Failure> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let tmp = Path::new(DIR).join(format!(
            "{}.t{}.{}",
            self.prefix,
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let made = (|| -> std::io::Result<Map> {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            file.set_len((HEAD + data.len()) as u64)?;
            let map = Map::new(&file, HEAD + data.len())?;
            map.word(8).store(data.len() as u64, Ordering::Release);
            for (i, &w) in meta.iter().enumerate() {
                map.word(16 + 8 * i).store(w, Ordering::Release);
            }
            // SAFETY: the mapping has HEAD + data.len() bytes, written only here.
            unsafe { map.write(HEAD, data) };
            Ok(map)
        })();
        let path = self.path(key, index);
        match made.and_then(|map| std::fs::rename(&tmp, &path).map(|()| map)) {
            Ok(map) => Ok(Posted { path, map }),
            Err(_) => {
                let _ = std::fs::remove_file(&tmp);
                Err(Failure::System)
            }
        }
    }

    /// Waits (at most `limit`) until party `index` of meeting `key`, rank
    /// `poster`, has posted; what it posted (the poster counts this read).
    pub fn read(
        &self,
        key: Key,
        index: usize,
        poster: usize,
        limit: Option<Duration>,
    ) -> Result<View, Failure> {
        let path = self.path(key, index);
        let file: File = self.wait_for(Some(poster), limit, || {
            OpenOptions::new().read(true).write(true).open(&path).ok()
        })?;
        let len = file.metadata().map_err(|_| Failure::System)?.len() as usize;
        let map = Map::new(&file, len.max(HEAD)).map_err(|_| Failure::System)?;
        drop(file);
        map.word(0).fetch_add(1, Ordering::AcqRel);
        Ok(View { map })
    }

    /// Waits (at most `limit`) until every party of meeting `key` (there
    /// are `parties`, party i being rank i) has posted; what each posted.
    pub fn gather(
        &self,
        key: Key,
        parties: usize,
        limit: Option<Duration>,
    ) -> Result<Vec<View>, Failure> {
        (0..parties).map(|i| self.read(key, i, i, limit)).collect()
    }

    /// [`Member::gather`] for a meeting whose party i is rank `posters[i]`.
    pub fn gather_from(
        &self,
        key: Key,
        posters: &[usize],
        limit: Option<Duration>,
    ) -> Result<Vec<View>, Failure> {
        (0..posters.len())
            .map(|i| self.read(key, i, posters[i], limit))
            .collect()
    }

    /// Waits (at most `limit`) until `readers` parties have read `posted`,
    /// then removes it.
    pub fn finish(
        &self,
        posted: Posted,
        readers: usize,
        limit: Option<Duration>,
    ) -> Result<(), Failure> {
        let count = posted.map.word(0);
        self.wait(limit, || {
            (count.load(Ordering::Acquire) >= readers as u64).then_some(())
        })
    }

    /// The second half of an all-reduce done as NCCL's guide describes it
    /// ("Executing ReduceScatter, followed by AllGather, is equivalent to
    /// the AllReduce operation."): given what every party posted to the
    /// first meeting (`posted`, equal lengths of `elem`-byte elements),
    /// this rank reduces its share of the elements with `reduce(inputs,
    /// out)`, posts it to meeting `key`, and returns every rank's share in
    /// order. Each rank reads and reduces `1/nranks` of the data.
    pub fn all_reduce_shares(
        &self,
        key: Key,
        posted: &[View],
        elem: usize,
        reduce: impl FnOnce(&[&[u8]], &mut [u8]),
        limit: Option<Duration>,
    ) -> Result<Vec<u8>, Failure> {
        let parties = posted.len();
        let elems = posted.get(self.rank).map_or(0, |v| v.data().len()) / elem.max(1);
        let share = |r: usize| elems * r / parties * elem;
        let (lo, hi) = (share(self.rank), share(self.rank + 1));
        let inputs: Vec<&[u8]> = posted.iter().map(|p| &p.data()[lo..hi]).collect();
        let mut mine = vec![0u8; hi - lo];
        reduce(&inputs, &mut mine);
        let post = self.post(key, self.rank, [0; META], &mine)?;
        let shares = self.gather(key, parties, limit)?;
        let mut out = Vec::with_capacity(elems * elem);
        for s in &shares {
            out.extend_from_slice(s.data());
        }
        self.finish(post, parties, limit)?;
        Ok(out)
    }
}

impl Drop for Member {
    /// Leaving before every rank joined aborts the communicator (the others
    /// would wait for ever); an aborted one's files are removed.
    fn drop(&mut self) {
        if !self.complete() {
            self.abort();
        } else if self.is_aborted() {
            self.clean();
        }
    }
}

impl Map {
    fn control(&self) -> &Control {
        debug_assert!(self.len() >= std::mem::size_of::<Control>());
        // SAFETY: a shared mapping of at least size_of::<Control>() bytes,
        // page-aligned; Control is atomics only, valid for any bytes.
        unsafe { &*self.ptr().cast::<Control>() }
    }
}

#[cfg(test)]
mod tests;
