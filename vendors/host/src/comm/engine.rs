//! The progress engine: operations are non-blocking state machines
//! ([`Task`]); a stream op polls its tasks round-robin until all are done,
//! backing off (spin, then yield, then sleep) while every one is blocked,
//! and checks on every blocked round that nobody aborted, every ~100 ms
//! that the peer processes live, and that the safety-net timeout has not
//! passed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_deviceapi::{Error, ErrorKind, Result};
use nix::errno::Errno;
use nix::unistd::Pid;

use super::state::CommState;
use crate::config::ENV_COMM_TIMEOUT;

/// What one poll achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The task is finished.
    Done,
    /// The task moved on but is not finished.
    Advanced,
    /// The task waits for another rank.
    Blocked,
}

/// One operation of one rank as a state machine.
pub(crate) trait Task: Send {
    /// Does whatever is possible now without waiting.
    fn poll(&mut self) -> Result<Progress>;
    /// The operation in words, e.g. `all_reduce(count 8, f32, sum)`.
    fn describe(&self) -> String;
    /// The communicator the task belongs to.
    fn comm(&self) -> &Arc<CommState>;
}

/// How often to look whether peer processes are alive.
const PID_CHECK_EVERY: Duration = Duration::from_millis(100);
/// How long a blocked op spins, then yields, before it sleeps between
/// polls. A step moves up to a chunk (hundreds of microseconds of copying),
/// so a peer is usually that close: sleeping at once (a sleep lasts at
/// least the timer slack, ~50 us) would put a sleep into every hand-off.
const SPIN_FOR: Duration = Duration::from_micros(20);
const YIELD_FOR: Duration = Duration::from_millis(2);
const SLEEP: Duration = Duration::from_micros(20);
/// After this long without progress (a peer is busy elsewhere), sleep
/// [`LONG_SLEEP`] between polls to leave the CPU to others.
const LONG_WAIT: Duration = Duration::from_millis(100);
const LONG_SLEEP: Duration = Duration::from_micros(500);

/// Runs `tasks` (one stream op: a single operation or a group) to the end.
/// A failure is recorded in every communicator involved and published to
/// their other ranks; it never becomes the stream's error.
pub(crate) fn run(mut tasks: Vec<Box<dyn Task>>) {
    let mut comms: Vec<Arc<CommState>> = Vec::new();
    for t in &tasks {
        if !comms.iter().any(|c| Arc::ptr_eq(c, t.comm())) {
            comms.push(Arc::clone(t.comm()));
        }
    }
    // Fail fast once a communicator is in error.
    if let Some(e) = comms.iter().find_map(|c| c.error()) {
        for c in &comms {
            c.record(e.clone());
        }
        return;
    }
    if let Err(e) = drive(&mut tasks, &comms) {
        for c in &comms {
            c.fail(e.clone());
        }
        // The op ends here and its buffers may be reused: not while a
        // peer may still write into them.
        for c in &comms {
            c.quiesce();
        }
    }
}

fn drive(tasks: &mut [Box<dyn Task>], comms: &[Arc<CommState>]) -> Result<()> {
    let mut done = vec![false; tasks.len()];
    let mut waiter = Waiter::new(comms);
    loop {
        let (mut pending, mut advanced) = (false, false);
        for (task, done) in tasks.iter_mut().zip(&mut done) {
            if *done {
                continue;
            }
            match task.poll()? {
                Progress::Done => (*done, advanced) = (true, true),
                Progress::Advanced => (pending, advanced) = (true, true),
                Progress::Blocked => pending = true,
            }
        }
        if !pending {
            return Ok(());
        }
        if advanced {
            waiter.progressed();
            continue;
        }
        let first = done.iter().position(|d| !d).unwrap_or(0);
        if let Err(e) = waiter.wait(|| describe(tasks, first)) {
            // A peer gave up: if this rank can see why itself (say, a
            // collective mismatch), report that rather than the peer's word.
            for (task, _) in tasks.iter_mut().zip(&done).filter(|(_, d)| !**d) {
                task.poll()?;
            }
            return Err(e);
        }
    }
}

/// The task(s) a rank waits in, for messages.
fn describe(tasks: &[Box<dyn Task>], first: usize) -> String {
    let what = tasks[first].describe();
    match tasks.len() {
        1 => what,
        n => format!("a group of {n} operations ({what}, ...)"),
    }
}

/// Backoff and the periodic checks of a blocked stream op.
struct Waiter<'a> {
    comms: &'a [Arc<CommState>],
    /// Whether the op is blocked since its last progress.
    blocked: bool,
    since: Instant,
    last_pid_check: Instant,
    timeout: Duration,
}

impl<'a> Waiter<'a> {
    fn new(comms: &'a [Arc<CommState>]) -> Self {
        let now = Instant::now();
        Waiter {
            comms,
            blocked: false,
            since: now,
            last_pid_check: now,
            timeout: comms
                .iter()
                .map(|c| c.timeout)
                .min()
                .unwrap_or(Duration::MAX),
        }
    }

    fn progressed(&mut self) {
        self.blocked = false;
    }

    /// One blocked round: checks, then backs off.
    fn wait(&mut self, what: impl Fn() -> String) -> Result<()> {
        for c in self.comms {
            if let Err(cause) = c.check_abort() {
                return Err(Error::new(
                    cause.kind(),
                    format!(
                        "{} while rank {} waited in {}",
                        cause.message(),
                        c.rank,
                        what()
                    ),
                ));
            }
        }
        let now = Instant::now();
        if !self.blocked {
            // The timeout counts from the last progress.
            self.blocked = true;
            self.since = now;
        }
        let waited = now.duration_since(self.since);
        if waited < SPIN_FOR {
            for _ in 0..4 {
                std::hint::spin_loop();
            }
            return Ok(());
        }
        if now.duration_since(self.last_pid_check) >= PID_CHECK_EVERY {
            self.last_pid_check = now;
            for c in self.comms {
                check_peers(c, &what)?;
            }
        }
        if now.duration_since(self.since) >= self.timeout {
            let c = &self.comms[0];
            let waiting = if c.ready() {
                "for its peers".to_owned()
            } else {
                format!("for rank(s) {} to join", c.missing())
            };
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "rank {} made no progress in {} for {:.1} s, waiting {waiting} \
                     (set {ENV_COMM_TIMEOUT} to wait longer)",
                    c.rank,
                    what(),
                    self.timeout.as_secs_f64()
                ),
            ));
        }
        if waited < YIELD_FOR {
            std::thread::yield_now();
        } else if waited < LONG_WAIT {
            std::thread::sleep(SLEEP);
        } else {
            std::thread::sleep(LONG_SLEEP);
        }
        Ok(())
    }
}

/// Fails if a peer process of `comm` is gone.
fn check_peers(comm: &CommState, what: &impl Fn() -> String) -> Result<()> {
    for peer in 0..comm.world {
        let pid = comm.pid_of(peer);
        if peer == comm.rank || pid == 0 || pid == comm.pid {
            continue;
        }
        if !alive(pid) {
            return Err(Error::new(
                ErrorKind::VendorError,
                format!(
                    "rank {peer} (pid {pid}) exited while rank {} waited in {}",
                    comm.rank,
                    what()
                ),
            ));
        }
    }
    Ok(())
}

/// Whether process `pid` exists and is not a zombie.
pub(crate) fn alive(pid: i32) -> bool {
    match nix::sys::signal::kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => false,
        _ => {
            // A killed child its parent has not reaped yet is a zombie.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            !matches!(state, Some('Z' | 'X'))
        }
    }
}
