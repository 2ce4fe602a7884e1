//! FileStore beyond the shared suite: several processes on one file, a
//! writer that died mid-record, a file that is not a store, and removal of
//! the file by the last of its workers.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use dipu_comm::store::{FileStore, Store};
use dipu_deviceapi::ErrorKind;

const CHILD_VAR: &str = "DIPU_FILE_STORE_CHILD";
const ADDS: i64 = 100;

fn open(path: &Path, workers: Option<usize>) -> FileStore {
    let store = FileStore::new(path, workers).expect("opening the FileStore");
    store.set_timeout(Duration::from_secs(30));
    store
}

#[test]
fn two_processes_share_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    // Three workers: this process and two children; the last to leave
    // removes the file.
    let parent = open(&path, Some(3));
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|id| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "file_store_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_VAR, &path)
                .env("DIPU_FILE_STORE_CHILD_ID", id.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Both children end before any assertion can fail the test.
    let outputs: Vec<_> = children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    for (id, out) in outputs.into_iter().enumerate() {
        assert!(
            out.status.success(),
            "child {id} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(parent.add("counter", 0).unwrap(), 2 * ADDS);
    assert_eq!(parent.get("child1").unwrap(), b"1");
    assert_eq!(parent.num_keys().unwrap(), 3);
    assert!(path.exists());
    drop(parent);
    assert!(!path.exists(), "the last worker removes the file");
}

/// One child of `two_processes_share_one_file` (does nothing unless started
/// by it).
#[test]
fn file_store_child() {
    let Some(path) = std::env::var_os(CHILD_VAR) else {
        return;
    };
    let id = std::env::var("DIPU_FILE_STORE_CHILD_ID").unwrap();
    let store = open(Path::new(&path), Some(3));
    for _ in 0..ADDS {
        store.add("counter", 1).unwrap();
    }
    store.set(&format!("child{id}"), id.as_bytes()).unwrap();
    store
        .wait(&["child0", "child1"], Duration::from_secs(30))
        .unwrap();
}

#[test]
fn a_record_cut_short_by_a_dead_writer_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = open(&path, None);
    store.set("a", b"1").unwrap();
    // A writer died after writing half of a SET record.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(&[1, 10, 0, 0, 0, b'/', b'h']).unwrap();
    drop(file);
    let reader = open(&path, None);
    assert_eq!(reader.get("a").unwrap(), b"1");
    assert!(!reader.check(&["h"]).unwrap());
    // The next writer cuts the remains off; everyone reads on.
    reader.set("b", b"2").unwrap();
    assert_eq!(store.get("b").unwrap(), b"2");
    assert_eq!(open(&path, None).num_keys().unwrap(), 2);
}

#[test]
fn a_file_that_is_not_a_store_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-store");
    std::fs::write(&path, b"hello, world\n").unwrap();
    let err = FileStore::new(&path, None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("not-a-store"), "{err}");
    assert!(err.message().contains("byte 0"), "{err}");
}

#[test]
fn without_a_worker_count_the_file_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = open(&path, None);
    store.set("k", b"v").unwrap();
    assert_eq!(store.path(), path);
    drop(store);
    assert!(path.exists());
    assert_eq!(open(&path, None).get("k").unwrap(), b"v");
}

#[test]
fn a_file_made_anew_is_read_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = open(&path, None);
    store.set("old", b"1").unwrap();
    std::fs::remove_file(&path).unwrap();
    let other = open(&path, None);
    other.set("new", b"2").unwrap();
    assert!(!store.check(&["old"]).unwrap());
    assert_eq!(store.get("new").unwrap(), b"2");
}

#[test]
fn a_lock_held_forever_is_a_timeout_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = open(&path, None);
    store.set("k", b"v").unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).unwrap();
    store.set_timeout(Duration::from_millis(200));
    let err = store.get("k").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.message().contains("lock"), "{err}");
    drop(held);
    assert_eq!(store.get("k").unwrap(), b"v");
}
