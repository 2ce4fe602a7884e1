//! [`FileStore`]: a store in one file, for the processes of one host.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dipu_deviceapi::{Error, ErrorKind, Result};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use parking_lot::Mutex;

use super::errors;
use super::kv::{self, AddError};
use super::timeout::{deadline, remaining, TimeoutCell};
use super::Store;

mod log;

use log::Record;

/// User keys are stored as `/<key>`, so the bookkeeping keys below never
/// collide with them (torch's FileStore does the same).
const USER: &str = "/";
const REFCOUNT: &str = "refcount/";
const CLEANUP: &str = "cleanup/";
/// Longest sleep between two looks at the file while waiting for a key.
const MAX_POLL: Duration = Duration::from_millis(10);

/// A [`Store`] kept in a file that every process of a job opens: an
/// append-only log of operations, each written under an exclusive `flock`
/// and read under a shared one, like torch's `FileStore` (whose on-disk
/// format it does not share). Blocking calls poll the file (every 1 to
/// 10 ms), which also works on shared file systems where inotify does not.
///
/// Each process replays only what others appended since its last look.
/// When `num_workers` is given, the last of that many stores to be dropped
/// removes the file.
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    num_workers: Option<usize>,
    cache: Mutex<Cache>,
    timeout: TimeoutCell,
}

/// What this process has replayed of the file.
#[derive(Debug, Default)]
struct Cache {
    /// The first record of the file replayed (its epoch), to notice a file
    /// removed and made anew, even one that got the old inode number.
    epoch: Option<Vec<u8>>,
    /// Bytes of the file replayed.
    pos: u64,
    map: HashMap<String, Vec<u8>>,
}

/// How an operation locks the file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

impl FileStore {
    /// Opens (creating it if needed) the store in `path`, shared by
    /// `num_workers` processes if known (then the last one to drop its store
    /// removes the file), with the default timeout.
    pub fn new(path: impl AsRef<Path>, num_workers: Option<usize>) -> Result<Self> {
        let store = FileStore {
            path: path.as_ref().to_owned(),
            num_workers,
            cache: Mutex::new(Cache::default()),
            timeout: TimeoutCell::new(super::DEFAULT_TIMEOUT),
        };
        store.add_raw(REFCOUNT, 1)?;
        Ok(store)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn name(&self) -> String {
        format!("FileStore({})", self.path.display())
    }

    /// Runs `op` on the up-to-date map with the file locked for `access`;
    /// `op` returns its result and the records to append.
    fn with_file<T>(
        &self,
        access: Access,
        op: impl FnOnce(&HashMap<String, Vec<u8>>) -> Result<(T, Vec<Record>)>,
    ) -> Result<T> {
        let mut cache = self.cache.lock();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(|e| errors::io(format!("{}: opening the file", self.name()), &e))?;
        let mut file = self.lock(file, access)?;
        let whole = self.refresh(&mut cache, &mut file)?;
        if access == Access::Write && !whole {
            // A writer died mid-record: cut its remains off before appending.
            file.set_len(cache.pos)
                .map_err(|e| errors::io(format!("{}: truncating the file", self.name()), &e))?;
        }
        let (result, mut records) = op(&cache.map)?;
        if cache.pos == 0 && !records.is_empty() {
            // A new file starts with its epoch.
            records.insert(0, log::epoch());
        }
        if !records.is_empty() {
            let mut bytes = Vec::new();
            for record in &records {
                record.encode(&mut bytes).ok_or_else(|| {
                    Error::invalid_argument(format!(
                        "{}: a key or value longer than 4 GiB cannot be stored",
                        self.name()
                    ))
                })?;
            }
            file.write_all(&bytes)
                .map_err(|e| errors::io(format!("{}: appending to the file", self.name()), &e))?;
            for record in records {
                record.apply(&mut cache.map);
            }
            if cache.pos == 0 {
                cache.epoch = Some(bytes[..log::EPOCH_LEN].to_vec());
            }
            cache.pos += bytes.len() as u64;
        }
        Ok(result)
    }

    /// Locks `file` for `access`, trying for up to the store's timeout (a
    /// process that holds the lock forever is an error, not a hang).
    fn lock(&self, file: File, access: Access) -> Result<Flock<File>> {
        let how = match access {
            Access::Read => FlockArg::LockSharedNonblock,
            Access::Write => FlockArg::LockExclusiveNonblock,
        };
        let timeout = self.timeout();
        let at = deadline(timeout);
        let mut nap = Duration::from_millis(1);
        let mut file = file;
        loop {
            match Flock::lock(file, how) {
                Ok(locked) => return Ok(locked),
                Err((back, Errno::EWOULDBLOCK | Errno::EINTR)) => file = back,
                Err((_, errno)) => {
                    let e = std::io::Error::from(errno);
                    return Err(errors::io(format!("{}: locking the file", self.name()), &e));
                }
            }
            let left = remaining(at);
            if left.is_zero() {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{}: could not lock the file within {}: another process holds it",
                        self.name(),
                        errors::show_duration(timeout)
                    ),
                ));
            }
            std::thread::sleep(nap.min(left));
            nap = (nap * 2).min(MAX_POLL);
        }
    }

    /// Replays what was appended since the last look; returns whether the
    /// file ends on a whole record.
    fn refresh(&self, cache: &mut Cache, file: &mut File) -> Result<bool> {
        let len = file
            .metadata()
            .map_err(|e| errors::io(format!("{}: reading its size", self.name()), &e))?
            .len();
        let mut epoch = vec![0; log::EPOCH_LEN];
        let epoch = file.read_exact_at(&mut epoch, 0).ok().map(|()| epoch);
        if cache.epoch != epoch || len < cache.pos {
            *cache = Cache {
                epoch,
                ..Cache::default()
            };
        }
        if len == cache.pos {
            return Ok(true);
        }
        let mut bytes = Vec::new();
        file.seek(SeekFrom::Start(cache.pos))
            .and_then(|_| file.read_to_end(&mut bytes))
            .map_err(|e| errors::io(format!("{}: reading the file", self.name()), &e))?;
        let used = log::replay(&bytes, &mut cache.map).map_err(|c| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "{}: not a dipu-rs FileStore, or corrupt: {} at byte {}",
                    self.name(),
                    c.what,
                    cache.pos + c.offset as u64
                ),
            )
        })?;
        cache.pos += used as u64;
        Ok(used == bytes.len())
    }

    /// `add` on a raw (already prefixed) key.
    fn add_raw(&self, key: &str, delta: i64) -> Result<i64> {
        self.with_file(Access::Write, |map| {
            let old = map.get(key).map(Vec::as_slice);
            let n = kv::add(old, delta).map_err(|e| {
                let user_key = key.strip_prefix(USER).unwrap_or(key);
                match e {
                    AddError::NotAnInteger => {
                        errors::not_an_integer(&self.name(), user_key, old.unwrap_or_default())
                    }
                    AddError::Overflow(old) => {
                        errors::add_overflow(&self.name(), user_key, old, delta)
                    }
                }
            })?;
            Ok((n, vec![Record::Set(key.to_owned(), kv::counter_bytes(n))]))
        })
    }

    /// Polls until every one of `keys` is in the file, up to the instant
    /// `at` (`timeout` from the start of the call, for the message).
    fn poll(&self, keys: &[&str], at: Option<Instant>, timeout: Duration) -> Result<()> {
        let mut nap = Duration::from_millis(1);
        loop {
            let missing: Vec<&str> = self.with_file(Access::Read, |map| {
                let missing = keys
                    .iter()
                    .copied()
                    .filter(|k| !map.contains_key(&user_key(k)))
                    .collect();
                Ok((missing, Vec::new()))
            })?;
            if missing.is_empty() {
                return Ok(());
            }
            let left = remaining(at);
            if left.is_zero() {
                return Err(errors::wait_timeout(&self.name(), &missing, timeout));
            }
            std::thread::sleep(nap.min(left));
            nap = (nap * 2).min(MAX_POLL);
        }
    }
}

/// The key a user key is stored under.
fn user_key(key: &str) -> String {
    format!("{USER}{key}")
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.with_file(Access::Write, |_| {
            Ok(((), vec![Record::Set(user_key(key), value.to_vec())]))
        })
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let timeout = self.timeout();
        let at = deadline(timeout);
        loop {
            self.poll(&[key], at, timeout)?;
            // Deleted again between the two looks: wait for it anew.
            let value = self.with_file(Access::Read, |map| {
                Ok((map.get(&user_key(key)).cloned(), Vec::new()))
            })?;
            if let Some(value) = value {
                return Ok(value);
            }
        }
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.add_raw(&user_key(key), delta)
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let key = user_key(key);
        self.with_file(Access::Write, |map| {
            let (store, answer) =
                kv::compare_set(map.get(&key).map(Vec::as_slice), expected, desired);
            let records = if store {
                vec![Record::Set(key.clone(), desired.to_vec())]
            } else {
                Vec::new()
            };
            Ok((answer.to_vec(), records))
        })
    }

    fn delete_key(&self, key: &str) -> Result<bool> {
        let key = user_key(key);
        self.with_file(Access::Write, |map| {
            if map.contains_key(&key) {
                Ok((true, vec![Record::Delete(key.clone())]))
            } else {
                Ok((false, Vec::new()))
            }
        })
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        self.with_file(Access::Read, |map| {
            let all = keys.iter().all(|k| map.contains_key(&user_key(k)));
            Ok((all, Vec::new()))
        })
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.poll(keys, deadline(timeout), timeout)
    }

    fn num_keys(&self) -> Result<i64> {
        self.with_file(Access::Read, |map| {
            let n = map.keys().filter(|k| k.starts_with(USER)).count();
            Ok((n as i64, Vec::new()))
        })
    }

    fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    fn set_timeout(&self, timeout: Duration) {
        self.timeout.set(timeout);
    }

    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        self.with_file(Access::Write, |_| {
            Ok(((), vec![Record::Append(user_key(key), value.to_vec())]))
        })
    }

    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        let timeout = self.timeout();
        let at = deadline(timeout);
        loop {
            self.poll(keys, at, timeout)?;
            let values: Option<Vec<Vec<u8>>> = self.with_file(Access::Read, |map| {
                let values = keys.iter().map(|k| map.get(&user_key(k)).cloned());
                Ok((values.collect(), Vec::new()))
            })?;
            if let Some(values) = values {
                return Ok(values);
            }
        }
    }

    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        errors::check_multi_set(keys, values)?;
        self.with_file(Access::Write, |_| {
            let records = keys
                .iter()
                .zip(values)
                .map(|(k, v)| Record::Set(user_key(k), v.to_vec()))
                .collect();
            Ok(((), records))
        })
    }

    fn list_keys(&self) -> Result<Vec<String>> {
        self.with_file(Access::Read, |map| {
            let keys = map
                .keys()
                .filter_map(|k| k.strip_prefix(USER))
                .map(str::to_owned)
                .collect();
            Ok((keys, Vec::new()))
        })
    }
}

impl Drop for FileStore {
    fn drop(&mut self) {
        if !self.path.exists() {
            return;
        }
        let done = self.add_raw(CLEANUP, 1);
        let refs = self.add_raw(REFCOUNT, -1);
        match (done, refs, self.num_workers) {
            (Ok(done), Ok(0), Some(n)) if done >= n as i64 => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::debug!("{}: removing the file at the end: {e}", self.name());
                }
            }
            (Err(e), _, _) | (_, Err(e), _) => {
                tracing::debug!("{}: leaving the store: {e}", self.name());
            }
            _ => {}
        }
    }
}
