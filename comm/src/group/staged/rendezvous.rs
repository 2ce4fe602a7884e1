//! How the ranks of a host-staged communicator meet through the store, and
//! which host transport they choose.
//!
//! - At creation, as the vendor path publishes its unique id: the lowest
//!   rank publishes a record under the communicator's key (a magic word, a
//!   random nonce and the world size); the others read it, waiting up to
//!   the store's timeout, and check it. A record that is not ours is
//!   `InvalidArgument`, and so is a world size that differs.
//! - On the first operation, in the communicator's worker: each rank
//!   publishes where it runs (boot id and IPC namespace: ranks that share
//!   both can share memory) and the transport it asks for, under keys named
//!   by the nonce; once every rank's is there, all choose alike: shared
//!   memory when they share a machine (`auto`), else TCP. Waiting here
//!   ends when the group stops the communicator (its watchdog's timeout).

use std::sync::Arc;
use std::time::{Duration, Instant};

use dipu_deviceapi::{Error, ErrorKind, Result};

use super::shared::{gave_up, safety_deadline, Backoff, Shared};
use super::{shm, tcp, Transport};
use crate::group::options::StagedTransport;
use crate::store::Store;

/// The record's first bytes.
const MAGIC: &[u8; 8] = b"DIPUSTG1";
/// Magic, nonce, world size.
const RECORD: usize = 8 + 16 + 4;

/// What a communicator's worker needs to connect its transport.
pub(crate) struct Setup {
    pub(crate) store: Arc<dyn Store>,
    /// Every key of this communicator starts with it.
    pub(crate) prefix: String,
    pub(crate) nonce: [u8; 16],
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) transport: StagedTransport,
    pub(crate) address: Option<std::net::IpAddr>,
    /// The group's timeout (waits give up at twice it).
    pub(crate) timeout: Duration,
}

/// Publishes (the lowest rank) or reads and checks (the others) the
/// communicator's record under `key`; returns its nonce.
pub(crate) fn meet(store: &dyn Store, key: &str, rank: usize, size: usize) -> Result<[u8; 16]> {
    if rank == 0 {
        let mut nonce = [0u8; 16];
        getrandom::getrandom(&mut nonce).map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("no random bytes for a communicator's nonce: {e}"),
            )
        })?;
        let mut record = Vec::with_capacity(RECORD);
        record.extend_from_slice(MAGIC);
        record.extend_from_slice(&nonce);
        record.extend_from_slice(&(size as u32).to_le_bytes());
        store.set(key, &record)?;
        return Ok(nonce);
    }
    let record = store.get(key).map_err(|e| {
        e.context(format!(
            "waiting for rank 0 to publish the host-staged communicator under `{key}`"
        ))
    })?;
    if record.len() != RECORD || &record[..8] != MAGIC {
        return Err(Error::invalid_argument(format!(
            "the record under `{key}` ({} bytes) is not a host-staged communicator's (do all \
             ranks use the same vendor?)",
            record.len()
        )));
    }
    let world = u32::from_le_bytes(record[24..].try_into().expect("4 bytes"));
    if world as usize != size {
        return Err(Error::invalid_argument(format!(
            "rank 0 created the communicator under `{key}` with world size {world}, but this \
             rank has world size {size}"
        )));
    }
    Ok(record[8..24].try_into().expect("16 bytes"))
}

/// Connects the transport on the first operation (see the module
/// documentation).
pub(crate) fn connect(setup: &Setup, shared: &Arc<Shared>) -> Result<Box<dyn Transport>> {
    let deadline = safety_deadline(setup.timeout);
    let key = |r: usize| format!("{}/rank/{r}", setup.prefix);
    let mine = format!(
        "{}|{}|{}|{}",
        setup.transport.name(),
        machine(),
        hostname(),
        std::process::id()
    );
    setup.store.set(&key(setup.rank), mine.as_bytes())?;
    let keys: Vec<String> = (0..setup.size).map(key).collect();
    let records = wait_all(setup, shared, &keys, deadline, "every rank's host")?;
    let mut same_machine = true;
    let mine: Vec<&str> = mine.split('|').collect();
    for (r, record) in records.iter().enumerate() {
        let text = String::from_utf8_lossy(record);
        let theirs: Vec<&str> = text.split('|').collect();
        if theirs.len() != 4 {
            return Err(Error::invalid_argument(format!(
                "rank {r}'s record under `{}` is not a host-staged rank's: {text:?}",
                key(r)
            )));
        }
        if theirs[0] != mine[0] {
            return Err(Error::invalid_argument(format!(
                "rank {r} asks for the {} host transport, rank {} for {} (set \
                 DIPU_COMM_STAGED_TRANSPORT alike on every rank)",
                theirs[0], setup.rank, mine[0]
            )));
        }
        same_machine &= theirs[1] == mine[1];
    }
    let shared_memory = match setup.transport {
        // The host vendor's communicators have at most MAX_WORLD ranks.
        StagedTransport::Auto => same_machine && setup.size <= dipu_vendor_host::MAX_WORLD,
        StagedTransport::Tcp => false,
        StagedTransport::Shm if same_machine => true,
        StagedTransport::Shm => {
            return Err(Error::invalid_argument(
                "DIPU_COMM_STAGED_TRANSPORT=shm, but the ranks are not all on one machine (or \
                 in one IPC namespace); use tcp or auto",
            ))
        }
    };
    tracing::debug!(
        target: "dipu::comm",
        rank = setup.rank,
        size = setup.size,
        transport = if shared_memory { "shared memory" } else { "tcp" },
        "host-staged communicator connecting"
    );
    if shared_memory {
        shm::connect(setup, shared, deadline)
    } else {
        tcp::connect(setup, shared, same_machine, deadline)
    }
}

/// This machine's name (empty if unknown).
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// Where this process runs, as far as sharing memory goes: the boot (a
/// machine) and the IPC namespace (a container).
fn machine() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ipc = std::fs::read_link("/proc/self/ns/ipc")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    format!("{} {ipc}", boot.trim())
}

/// The values of `keys` once all are set; polls the store (a blocking wait
/// could not end when the communicator stops, and would hold a client that
/// others share).
pub(crate) fn wait_all(
    setup: &Setup,
    shared: &Shared,
    keys: &[String],
    deadline: Instant,
    what: &str,
) -> Result<Vec<Vec<u8>>> {
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut backoff = Backoff::new(Duration::from_millis(20));
    loop {
        if setup.store.check(&refs)? {
            return setup.store.multi_get(&refs);
        }
        shared.check()?;
        if Instant::now() >= deadline {
            return Err(gave_up(
                &format!("waiting in the store for {what} ({})", refs.join(", ")),
                setup.timeout,
            ));
        }
        backoff.pause();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::HashStore;

    #[test]
    fn the_record_is_checked() {
        let store = HashStore::new();
        let nonce = meet(&store, "k", 0, 3).unwrap();
        assert_eq!(meet(&store, "k", 2, 3).unwrap(), nonce);
        let e = meet(&store, "k", 1, 4).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("world size 3"), "{e}");
        store.set("k", &[0x5a; 28]).unwrap();
        let e = meet(&store, "k", 1, 3).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("same vendor"), "{e}");
    }
}
