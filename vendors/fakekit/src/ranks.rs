//! A test harness for ranks as processes: a test re-runs its own
//! executable once per rank (the rank, the world size and a shared folder
//! in the environment), the ranks pass the unique id through a file of
//! that folder (as `torchrun` ranks pass it through the store), and the
//! parent waits for them with a limit, kills one on request, and reads
//! what each printed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The variable holding a child's rank.
pub const RANK: &str = "DIPU_FAKE_RANK";
/// The variable holding the world size.
pub const WORLD: &str = "DIPU_FAKE_WORLD";
/// The variable holding the folder the ranks share.
pub const DIR: &str = "DIPU_FAKE_RANKS_DIR";

/// In a child: its rank and the world size; `None` in the parent.
pub fn child() -> Option<(usize, usize)> {
    let get = |v: &str| std::env::var(v).ok()?.parse::<usize>().ok();
    Some((get(RANK)?, get(WORLD)?))
}

fn shared_dir() -> PathBuf {
    PathBuf::from(std::env::var_os(DIR).expect("DIPU_FAKE_RANKS_DIR is set in a rank"))
}

/// In a child: makes `bytes` visible to the others as `name`.
pub fn publish(name: &str, bytes: &[u8]) {
    let dir = shared_dir();
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&tmp, bytes).expect("write to the ranks' folder");
    std::fs::rename(&tmp, dir.join(name)).expect("publish in the ranks' folder");
}

/// In a child: what another rank published as `name`, waiting up to 60 s.
pub fn fetch(name: &str) -> Vec<u8> {
    let path = shared_dir().join(name);
    let start = Instant::now();
    loop {
        if let Ok(bytes) = std::fs::read(&path) {
            return bytes;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "nobody published {name} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// How one rank ended.
#[derive(Debug)]
pub struct Outcome {
    /// Its rank.
    pub rank: usize,
    /// Whether it exited with success.
    pub success: bool,
    /// What it printed (stdout and stderr).
    pub output: String,
}

/// The ranks of a running job.
#[derive(Debug)]
pub struct Ranks {
    children: Vec<Option<Child>>,
    dir: PathBuf,
    /// Names in `/dev/shm` removed when the job is dropped (after a
    /// failed test, whose ranks are all killed and clean nothing).
    shm: Option<String>,
}

impl Ranks {
    /// Starts `world` ranks re-running test `name` of this executable,
    /// each with `configure` applied to its command.
    pub fn launch(name: &str, world: usize, configure: impl Fn(&mut Command)) -> Ranks {
        static JOBS: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "dipu-fake-ranks-{}-{}",
            std::process::id(),
            JOBS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make the ranks' folder");
        let exe = std::env::current_exe().expect("the test executable");
        let children = (0..world)
            .map(|rank| {
                let log =
                    std::fs::File::create(dir.join(format!("rank{rank}.log"))).expect("rank log");
                let mut cmd = Command::new(&exe);
                cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
                    .env(RANK, rank.to_string())
                    .env(WORLD, world.to_string())
                    .env(DIR, &dir)
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().expect("rank log"))
                    .stderr(log);
                configure(&mut cmd);
                Some(cmd.spawn().expect("start a rank"))
            })
            .collect();
        Ranks {
            children,
            dir,
            shm: None,
        }
    }

    /// The folder the ranks share.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits until `path` (in the shared folder) exists, up to `limit`.
    pub fn await_file(&self, name: &str, limit: Duration) {
        let start = Instant::now();
        while !self.dir.join(name).exists() {
            assert!(
                start.elapsed() < limit,
                "no rank wrote {name} within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills `rank` (SIGKILL) and reaps it.
    pub fn kill(&mut self, rank: usize) {
        if let Some(mut c) = self.children[rank].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for every rank still running, up to `limit` in all; past it
    /// kills them all and panics (a hang). Killed ranks are left out.
    pub fn wait(&mut self, limit: Duration) -> Vec<Outcome> {
        let deadline = Instant::now() + limit;
        // A thread per rank blocks until it exits and says so.
        let (exited, exits) = std::sync::mpsc::channel();
        let mut running = vec![false; self.children.len()];
        for (rank, child) in self.children.iter().enumerate() {
            let Some(child) = child else { continue };
            running[rank] = true;
            let (pid, exited) = (child.id(), exited.clone());
            std::thread::spawn(move || {
                wait_for_exit(pid);
                let _ = exited.send(rank);
            });
        }
        drop(exited);
        while let Some(rank) = running.iter().position(|&r| r) {
            match exits.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(done) => running[done] = false,
                Err(_) => {
                    for c in self.children.iter_mut().flatten() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    panic!(
                        "rank {rank} still running after {limit:?} (a hang); its output:\n{}",
                        self.log(rank)
                    );
                }
            }
        }
        let mut outcomes = Vec::new();
        for rank in 0..self.children.len() {
            let Some(mut child) = self.children[rank].take() else {
                continue;
            };
            let status = child.wait().expect("wait for a rank");
            outcomes.push(Outcome {
                rank,
                success: status.success(),
                output: self.log(rank),
            });
        }
        outcomes
    }

    fn log(&self, rank: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("rank{rank}.log"))).unwrap_or_default()
    }

    /// Waits as [`Ranks::wait`] and asserts every rank succeeded and
    /// printed `ok`.
    pub fn expect_success(&mut self, limit: Duration, ok: &str) {
        for o in self.wait(limit) {
            assert!(
                o.success && o.output.contains(ok),
                "rank {} failed (or did not print {ok:?}); its output:\n{}",
                o.rank,
                o.output
            );
        }
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(prefix) = &self.shm {
            for name in shm_left(prefix) {
                let _ = std::fs::remove_file(Path::new("/dev/shm").join(name));
            }
        }
    }
}

impl Ranks {
    /// Removes what is left in `/dev/shm` under `prefix` when the job is
    /// dropped (a test asserts there is nothing before that).
    pub fn clean_on_drop(&mut self, prefix: &str) {
        self.shm = Some(prefix.to_owned());
    }

    /// Waits until `/dev/shm` holds a name starting with `prefix`, up to `limit`.
    pub fn await_shm(&self, prefix: &str, limit: Duration) {
        let start = Instant::now();
        while shm_left(prefix).is_empty() {
            assert!(
                start.elapsed() < limit,
                "nothing of the job in /dev/shm (under {prefix}) within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// What rank 0 published as `name` (after the job).
    pub fn published(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name))
            .unwrap_or_else(|e| panic!("no rank published {name}: {e}"))
    }
}

/// Waits for `child` to exit, up to `limit`: its status, or `None` once
/// `limit` has passed (the child then still runs; the caller kills it).
pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let (exited, exit) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        wait_for_exit(pid);
        let _ = exited.send(());
    });
    exit.recv_timeout(limit).ok()?;
    Some(child.wait().expect("wait for a child"))
}

/// Blocks until the child `pid` (not yet reaped) has exited, leaving it
/// to be reaped by its `Child::wait`.
fn wait_for_exit(pid: libc::id_t) {
    loop {
        // SAFETY: an all-zero `siginfo_t` is a valid value to overwrite.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a live `siginfo_t` for waitid to fill; WNOWAIT
        // leaves the child waitable, so its `Child` still reaps it.
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// The names in `/dev/shm` starting with `prefix`.
pub fn shm_left(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}
