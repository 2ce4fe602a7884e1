//! Communicators whose ranks are threads of one process: ranks join by a
//! unique id, and every operation is a meeting of its parties where each
//! posts what it brings (buffer addresses), reads what the others posted,
//! and leaves only when every party has finished reading.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// A meeting's key: (kind, sequence) chosen by the fake (a collective's
/// sequence number, a send/receive pair's own counter...).
pub type Key = (u64, u64);

/// Why a wait ended without the other parties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aborted;

#[derive(Debug, Default)]
struct Meeting {
    posted: Vec<Option<Vec<usize>>>,
    finished: usize,
}

#[derive(Debug, Default)]
struct State {
    joined: usize,
    meetings: HashMap<Key, Meeting>,
}

/// One communicator, shared by its ranks.
#[derive(Debug)]
pub struct Comm {
    /// The number of ranks.
    pub nranks: usize,
    state: Mutex<State>,
    cv: Condvar,
    aborted: AtomicBool,
}

impl Comm {
    fn new(nranks: usize) -> Self {
        Comm {
            nranks,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            aborted: AtomicBool::new(false),
        }
    }

    /// Whether every rank has joined.
    pub fn complete(&self) -> bool {
        self.state.lock().joined >= self.nranks
    }

    /// Blocks until every rank has joined, or the communicator is aborted.
    pub fn wait_complete(&self) -> Result<(), Aborted> {
        let mut s = self.state.lock();
        while s.joined < self.nranks {
            if self.aborted.load(Ordering::Acquire) {
                return Err(Aborted);
            }
            self.cv.wait_for(&mut s, Duration::from_millis(20));
        }
        Ok(())
    }

    /// Aborts: every wait on it ends with [`Aborted`].
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
        self.cv.notify_all();
    }

    /// Whether it was aborted.
    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// Posts what party `index` of `parties` brings to meeting `key`;
    /// returns at once.
    pub fn post(&self, key: Key, parties: usize, index: usize, value: Vec<usize>) {
        let mut s = self.state.lock();
        let m = s.meetings.entry(key).or_default();
        if m.posted.len() < parties {
            m.posted.resize(parties, None);
        }
        m.posted[index] = Some(value);
        self.cv.notify_all();
    }

    /// Blocks until every party of meeting `key` has posted; what each posted.
    pub fn gather(&self, key: Key, parties: usize) -> Result<Vec<Vec<usize>>, Aborted> {
        let mut s = self.state.lock();
        loop {
            if self.aborted.load(Ordering::Acquire) {
                return Err(Aborted);
            }
            if let Some(m) = s.meetings.get(&key) {
                if m.posted.len() == parties && m.posted.iter().all(Option::is_some) {
                    return Ok(m.posted.iter().flatten().cloned().collect());
                }
            }
            self.cv.wait_for(&mut s, Duration::from_millis(20));
        }
    }

    /// Marks this party done with meeting `key` and blocks until every
    /// party is (so no buffer is reused while another party reads it).
    pub fn finish(&self, key: Key, parties: usize) -> Result<(), Aborted> {
        let mut s = self.state.lock();
        if let Some(m) = s.meetings.get_mut(&key) {
            m.finished += 1;
        }
        self.cv.notify_all();
        loop {
            if self.aborted.load(Ordering::Acquire) {
                return Err(Aborted);
            }
            match s.meetings.get(&key) {
                Some(m) if m.finished >= parties => {
                    // The last to see it complete removes it; finished
                    // counts past `parties` only as parties leave.
                    let m = s.meetings.get_mut(&key).expect("just seen");
                    m.finished += 1;
                    if m.finished == 2 * parties {
                        s.meetings.remove(&key);
                    }
                    return Ok(());
                }
                Some(_) => {}
                None => return Ok(()),
            }
            self.cv.wait_for(&mut s, Duration::from_millis(20));
        }
    }
}

/// Communicators being formed or live, by unique id.
#[derive(Debug, Default)]
pub struct Registry {
    comms: Mutex<HashMap<Vec<u8>, Arc<Comm>>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Joins the communicator of `id` (created by the first rank to come)
    /// as one of `nranks`; `Err` if it exists with another size.
    pub fn join(&self, id: &[u8], nranks: usize) -> Result<Arc<Comm>, String> {
        let comm = {
            let mut comms = self.comms.lock();
            let comm = comms
                .entry(id.to_vec())
                .or_insert_with(|| Arc::new(Comm::new(nranks)));
            if comm.nranks != nranks {
                return Err(format!(
                    "the id was used for {} ranks, not {nranks}",
                    comm.nranks
                ));
            }
            let comm = Arc::clone(comm);
            let mut s = comm.state.lock();
            s.joined += 1;
            if s.joined == nranks {
                comms.remove(id);
            }
            drop(s);
            comm
        };
        comm.cv.notify_all();
        Ok(comm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_meet_and_exchange() {
        let reg = Arc::new(Registry::new());
        let sums: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|rank| {
                    let reg = Arc::clone(&reg);
                    s.spawn(move || {
                        let comm = reg.join(b"id", 4).unwrap();
                        comm.wait_complete().unwrap();
                        let mut total = 0;
                        for seq in 0..3 {
                            comm.post((0, seq), 4, rank, vec![rank + seq as usize]);
                            total += comm
                                .gather((0, seq), 4)
                                .unwrap()
                                .iter()
                                .map(|v| v[0])
                                .sum::<usize>();
                            comm.finish((0, seq), 4).unwrap();
                        }
                        total
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(sums, vec![6 + 10 + 14; 4]);
    }

    #[test]
    fn a_missing_rank_is_aborted() {
        let reg = Registry::new();
        let comm = reg.join(b"x", 2).unwrap();
        assert!(!comm.complete());
        comm.abort();
        assert_eq!(comm.wait_complete(), Err(Aborted));
        assert_eq!(
            reg.join(b"x", 3).unwrap_err(),
            "the id was used for 2 ranks, not 3"
        );
    }
}
