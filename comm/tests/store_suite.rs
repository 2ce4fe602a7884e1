//! One behavioural suite over every store: HashStore, FileStore, TcpStore
//! (our client on our server), and PrefixStore over each.

mod store_common;

use std::sync::Arc;
use std::time::Duration;

use dipu_comm::store::Store;
use dipu_deviceapi::ErrorKind;
use store_common::{assert_times_out, fixture};

/// Timeout of stores whose calls are expected to succeed.
const LONG: Duration = Duration::from_secs(30);
/// Timeout of calls that are expected to time out.
const SHORT: Duration = Duration::from_millis(300);

fn set_get_overwrite(kind: &str) {
    let f = fixture(kind, LONG);
    let s = &f.store;
    s.set("a", b"1").unwrap();
    assert_eq!(s.get("a").unwrap(), b"1");
    s.set("a", b"second").unwrap();
    assert_eq!(s.get("a").unwrap(), b"second");
    let binary = [0u8, 255, 0, 10, 13];
    s.set("bin", &binary).unwrap();
    s.set("empty", b"").unwrap();
    let peer = f.peer();
    assert_eq!(peer.get("bin").unwrap(), binary);
    assert_eq!(peer.get("empty").unwrap(), b"");
    assert_eq!(peer.get("a").unwrap(), b"second");
}

fn add_counts_in_decimal(kind: &str) {
    let f = fixture(kind, LONG);
    let s = &f.store;
    assert_eq!(s.add("c", 5).unwrap(), 5);
    assert_eq!(s.add("c", -2).unwrap(), 3);
    assert_eq!(s.get("c").unwrap(), b"3");
    assert_eq!(f.peer().add("c", 1).unwrap(), 4);
    s.set("n", b"41").unwrap();
    assert_eq!(s.add("n", 1).unwrap(), 42);
    s.set("text", b"not a number").unwrap();
    let err = s.add("text", 1).unwrap_err();
    if !kind.ends_with("tcp") {
        // Over TCP the server can only drop the connection, as torch's does.
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.message().contains("text"), "{err}");
    }
    // The store is still usable afterwards.
    assert_eq!(s.add("c", 1).unwrap(), 5);
}

fn compare_set_follows_torch(kind: &str) {
    let f = fixture(kind, LONG);
    let s = &f.store;
    // Missing key, non-empty expected: nothing set, `expected` answered.
    assert_eq!(s.compare_set("k", b"x", b"y").unwrap(), b"x");
    assert!(!s.check(&["k"]).unwrap());
    // Missing key, empty expected: set.
    assert_eq!(s.compare_set("k", b"", b"v1").unwrap(), b"v1");
    // Present, matching: swapped.
    assert_eq!(s.compare_set("k", b"v1", b"v2").unwrap(), b"v2");
    // Present, not matching: the current value answered, nothing set.
    assert_eq!(s.compare_set("k", b"v1", b"v3").unwrap(), b"v2");
    assert_eq!(f.peer().get("k").unwrap(), b"v2");
}

fn delete_key_reports_existence(kind: &str) {
    let f = fixture(kind, LONG);
    let s = &f.store;
    s.set("d", b"1").unwrap();
    assert!(s.delete_key("d").unwrap());
    assert!(!s.delete_key("d").unwrap());
    assert!(!f.peer().check(&["d"]).unwrap());
}

fn check_does_not_wait(kind: &str) {
    let f = fixture(kind, LONG);
    let s = &f.store;
    assert!(s.check(&[]).unwrap());
    // A check that waited for "x" would time out (an error), not say no.
    assert!(!s.check(&["x"]).unwrap());
    s.set("x", b"").unwrap();
    assert!(s.check(&["x"]).unwrap());
    assert!(!s.check(&["x", "y"]).unwrap());
    f.peer().set("y", b"1").unwrap();
    assert!(s.check(&["x", "y"]).unwrap());
}

fn wait_returns_when_a_peer_sets(kind: &str) {
    let f = fixture(kind, LONG);
    let peer = f.peer();
    f.store.set("early", b"1").unwrap();
    f.store.wait(&["early"], LONG).unwrap();
    let setter = std::thread::spawn(move || {
        // Late, so that the call below usually blocks first (the outcome
        // is the same either way).
        std::thread::sleep(Duration::from_millis(100));
        peer.set("late1", b"1").unwrap();
        peer.set("late2", b"2").unwrap();
    });
    f.store.wait(&["early", "late1", "late2"], LONG).unwrap();
    setter.join().unwrap();
    assert_eq!(f.store.get("late2").unwrap(), b"2");
}

fn get_blocks_until_set(kind: &str) {
    let f = fixture(kind, LONG);
    let peer = f.peer();
    let setter = std::thread::spawn(move || {
        // Late, so that the call below usually blocks first (the outcome
        // is the same either way).
        std::thread::sleep(Duration::from_millis(100));
        peer.set("later", b"here").unwrap();
    });
    assert_eq!(f.store.get("later").unwrap(), b"here");
    setter.join().unwrap();
}

fn get_times_out_naming_the_key(kind: &str) {
    let f = fixture(kind, SHORT);
    assert_times_out(SHORT, "no-such-key", || f.store.get("no-such-key"));
    // Still usable after the timeout (over TCP: the wait was cancelled).
    f.store.set("after", b"ok").unwrap();
    assert_eq!(f.store.get("after").unwrap(), b"ok");
}

fn wait_times_out_naming_the_key(kind: &str) {
    let f = fixture(kind, LONG);
    f.store.set("here", b"1").unwrap();
    assert_times_out(SHORT, "never-set", || {
        f.store.wait(&["here", "never-set"], SHORT)
    });
    assert_eq!(f.store.add("after", 2).unwrap(), 2);
    let zero = f.store.wait(&["never-set"], Duration::ZERO).unwrap_err();
    assert_eq!(zero.kind(), ErrorKind::Timeout);
    f.store.wait(&["here"], Duration::ZERO).unwrap();
}

fn num_keys_counts(kind: &str) {
    let f = fixture(kind, LONG);
    let s = &f.store;
    let base = s.num_keys().unwrap();
    s.set("n1", b"").unwrap();
    s.add("n2", 1).unwrap();
    s.set("n1", b"again").unwrap();
    assert_eq!(s.num_keys().unwrap(), base + 2);
    s.delete_key("n1").unwrap();
    assert_eq!(f.peer().num_keys().unwrap(), base + 1);
}

fn append_concatenates(kind: &str) {
    let f = fixture(kind, LONG);
    let s = &f.store;
    s.append("log", b"ab").unwrap();
    s.append("log", b"").unwrap();
    f.peer().append("log", b"cd").unwrap();
    assert_eq!(s.get("log").unwrap(), b"abcd");
}

fn multi_set_and_multi_get(kind: &str) {
    let f = fixture(kind, LONG);
    let s = &f.store;
    s.multi_set(&["m1", "m2", "m3"], &[b"1", b"", b"333"])
        .unwrap();
    assert_eq!(
        f.peer().multi_get(&["m3", "m1", "m2"]).unwrap(),
        vec![b"333".to_vec(), b"1".to_vec(), b"".to_vec()]
    );
    assert!(s.multi_get(&[]).unwrap().is_empty());
    let err = s.multi_set(&["a", "b"], &[b"1"]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    s.set_timeout(SHORT);
    assert_times_out(SHORT, "m-missing", || s.multi_get(&["m1", "m-missing"]));
}

fn concurrent_adds_are_exact(kind: &str) {
    const THREADS: usize = 8;
    const ADDS: i64 = 50;
    let f = fixture(kind, LONG);
    let handles: Vec<Arc<dyn Store>> = (0..THREADS).map(|_| f.peer()).collect();
    let results: Vec<Vec<i64>> = std::thread::scope(|scope| {
        let workers: Vec<_> = handles
            .iter()
            .map(|h| scope.spawn(move || (0..ADDS).map(|_| h.add("counter", 1).unwrap()).collect()))
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let total = THREADS as i64 * ADDS;
    assert_eq!(f.store.add("counter", 0).unwrap(), total);
    // Every intermediate value was handed out exactly once.
    let mut seen: Vec<i64> = results.into_iter().flatten().collect();
    seen.sort_unstable();
    assert_eq!(seen, (1..=total).collect::<Vec<_>>());
}

fn timeout_is_settable(kind: &str) {
    let f = fixture(kind, LONG);
    assert_eq!(f.store.timeout(), LONG);
    f.store.set_timeout(SHORT);
    assert_eq!(f.store.timeout(), SHORT);
    assert_times_out(SHORT, "unset", || f.store.get("unset"));
}

fn list_keys_names_the_values(kind: &str) {
    let f = fixture(kind, LONG);
    f.store.set("a", b"1").unwrap();
    f.store.add("b/c", 2).unwrap();
    f.store.set("gone", b"x").unwrap();
    f.store.delete_key("gone").unwrap();
    let peer = f.peer();
    let mut keys = peer.list_keys().unwrap();
    keys.sort();
    assert_eq!(keys, ["a", "b/c"]);
}

#[test]
fn prefix_store_lists_and_queues_only_its_own() {
    use dipu_comm::store::{HashStore, PrefixStore};
    let inner: Arc<dyn Store> = Arc::new(HashStore::new());
    inner.set("pg0/a", b"1").unwrap();
    inner.set("pg1/b", b"2").unwrap();
    inner.set("c", b"3").unwrap();
    let pg0 = PrefixStore::new("pg0", Arc::clone(&inner));
    assert_eq!(pg0.list_keys().unwrap(), ["a"]);
    pg0.queue_push("q", b"x").unwrap();
    assert_eq!(inner.queue_len("pg0/q").unwrap(), 1);
    assert_eq!(PrefixStore::new("pg1", inner).queue_len("q").unwrap(), 0);
}

/// FileStore has no queues, as torch's has none.
fn has_queues(kind: &str) -> bool {
    !kind.ends_with("file")
}

fn queues_are_fifo_and_apart_from_values(kind: &str) {
    let f = fixture(kind, LONG);
    let s = &f.store;
    if !has_queues(kind) {
        for err in [
            s.queue_push("q", b"1").unwrap_err(),
            s.queue_pop("q", false).unwrap_err(),
            s.queue_len("q").unwrap_err(),
        ] {
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        }
        return;
    }
    assert_eq!(s.queue_len("q").unwrap(), 0);
    assert!(!s.check(&["q"]).unwrap());
    for v in [b"1", b"2", b"3"] {
        s.queue_push("q", v).unwrap();
    }
    let peer = f.peer();
    assert_eq!(peer.queue_len("q").unwrap(), 3);
    // A non-empty queue counts as set for check and wait.
    assert!(peer.check(&["q"]).unwrap());
    peer.wait(&["q"], LONG).unwrap();
    // ... but it is not a value: list_keys and num_keys leave it out.
    assert!(!peer.list_keys().unwrap().iter().any(|k| k == "q"));
    assert_eq!(peer.num_keys().unwrap(), s.num_keys().unwrap());
    assert_eq!(peer.queue_pop("q", false).unwrap(), b"1");
    assert_eq!(s.queue_pop("q", true).unwrap(), b"2");
    assert_eq!(peer.queue_pop("q", false).unwrap(), b"3");
    assert_eq!(s.queue_len("q").unwrap(), 0);
    assert!(!s.check(&["q"]).unwrap());
    let err = s.queue_pop("q", false).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotReady, "{err}");
    assert!(err.message().contains("q\" is empty"), "{err}");
    // Values of any size and content come back whole.
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    s.queue_push("q", &big).unwrap();
    s.queue_push("q", b"").unwrap();
    assert_eq!(peer.queue_pop("q", false).unwrap(), big);
    assert_eq!(peer.queue_pop("q", false).unwrap(), b"");
}

fn blocking_pop_waits_for_a_push(kind: &str) {
    if !has_queues(kind) {
        return;
    }
    let f = fixture(kind, LONG);
    let peer = f.peer();
    let pusher = std::thread::spawn(move || {
        // Late, so that the call below usually blocks first (the outcome
        // is the same either way).
        std::thread::sleep(Duration::from_millis(100));
        peer.queue_push("jobs", b"work").unwrap();
    });
    assert_eq!(f.store.queue_pop("jobs", true).unwrap(), b"work");
    pusher.join().unwrap();
}

fn blocking_pop_times_out_naming_the_queue(kind: &str) {
    if !has_queues(kind) {
        return;
    }
    let f = fixture(kind, SHORT);
    assert_times_out(SHORT, "empty-queue", || {
        f.store.queue_pop("empty-queue", true)
    });
    f.store.queue_push("empty-queue", b"now").unwrap();
    assert_eq!(f.store.queue_pop("empty-queue", true).unwrap(), b"now");
}

fn concurrent_pops_take_each_value_once(kind: &str) {
    if !has_queues(kind) {
        return;
    }
    const POPPERS: usize = 4;
    const EACH: usize = 25;
    let f = fixture(kind, LONG);
    let handles: Vec<Arc<dyn Store>> = (0..POPPERS).map(|_| f.peer()).collect();
    let pusher = f.peer();
    let popped: Vec<Vec<u8>> = std::thread::scope(|scope| {
        let poppers: Vec<_> = handles
            .iter()
            .map(|h| {
                scope.spawn(move || {
                    (0..EACH)
                        .map(|_| h.queue_pop("shared", true).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for i in 0..POPPERS * EACH {
            pusher
                .queue_push("shared", i.to_string().as_bytes())
                .unwrap();
        }
        poppers
            .into_iter()
            .flat_map(|p| p.join().unwrap())
            .collect()
    });
    let mut seen: Vec<usize> = popped
        .iter()
        .map(|v| std::str::from_utf8(v).unwrap().parse().unwrap())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..POPPERS * EACH).collect::<Vec<_>>());
    assert_eq!(f.store.queue_len("shared").unwrap(), 0);
}

fn barrier_releases_everyone_once_all_arrive(kind: &str) {
    const RANKS: usize = 4;
    let f = fixture(kind, LONG);
    let arrived = std::sync::atomic::AtomicUsize::new(0);
    let handles: Vec<Arc<dyn Store>> = (0..RANKS).map(|_| f.peer()).collect();
    std::thread::scope(|scope| {
        for (rank, h) in handles.iter().enumerate() {
            let arrived = &arrived;
            scope.spawn(move || {
                // Staggered arrivals (the outcome is the same without).
                std::thread::sleep(Duration::from_millis(30 * rank as u64));
                arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                h.barrier("start", RANKS, LONG).unwrap();
                // Nobody leaves before the last one came.
                assert_eq!(arrived.load(std::sync::atomic::Ordering::SeqCst), RANKS);
            });
        }
    });
}

fn barrier_times_out_when_a_rank_is_missing(kind: &str) {
    let f = fixture(kind, LONG);
    assert_times_out(SHORT, "lonely", || f.store.barrier("lonely", 2, SHORT));
    let err = f.store.barrier("zero", 0, SHORT).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    // Still usable after the timeout (over TCP: the wait was cancelled).
    f.store.set("after", b"ok").unwrap();
    assert_eq!(f.store.get("after").unwrap(), b"ok");
}

macro_rules! suite_for {
    ($module:ident, $kind:literal) => {
        mod $module {
            #[test]
            fn set_get_overwrite() {
                super::set_get_overwrite($kind)
            }
            #[test]
            fn add_counts_in_decimal() {
                super::add_counts_in_decimal($kind)
            }
            #[test]
            fn compare_set_follows_torch() {
                super::compare_set_follows_torch($kind)
            }
            #[test]
            fn delete_key_reports_existence() {
                super::delete_key_reports_existence($kind)
            }
            #[test]
            fn check_does_not_wait() {
                super::check_does_not_wait($kind)
            }
            #[test]
            fn wait_returns_when_a_peer_sets() {
                super::wait_returns_when_a_peer_sets($kind)
            }
            #[test]
            fn get_blocks_until_set() {
                super::get_blocks_until_set($kind)
            }
            #[test]
            fn get_times_out_naming_the_key() {
                super::get_times_out_naming_the_key($kind)
            }
            #[test]
            fn wait_times_out_naming_the_key() {
                super::wait_times_out_naming_the_key($kind)
            }
            #[test]
            fn num_keys_counts() {
                super::num_keys_counts($kind)
            }
            #[test]
            fn append_concatenates() {
                super::append_concatenates($kind)
            }
            #[test]
            fn multi_set_and_multi_get() {
                super::multi_set_and_multi_get($kind)
            }
            #[test]
            fn concurrent_adds_are_exact() {
                super::concurrent_adds_are_exact($kind)
            }
            #[test]
            fn timeout_is_settable() {
                super::timeout_is_settable($kind)
            }
            #[test]
            fn list_keys_names_the_values() {
                super::list_keys_names_the_values($kind)
            }
            #[test]
            fn queues_are_fifo_and_apart_from_values() {
                super::queues_are_fifo_and_apart_from_values($kind)
            }
            #[test]
            fn blocking_pop_waits_for_a_push() {
                super::blocking_pop_waits_for_a_push($kind)
            }
            #[test]
            fn blocking_pop_times_out_naming_the_queue() {
                super::blocking_pop_times_out_naming_the_queue($kind)
            }
            #[test]
            fn concurrent_pops_take_each_value_once() {
                super::concurrent_pops_take_each_value_once($kind)
            }
            #[test]
            fn barrier_releases_everyone_once_all_arrive() {
                super::barrier_releases_everyone_once_all_arrive($kind)
            }
            #[test]
            fn barrier_times_out_when_a_rank_is_missing() {
                super::barrier_times_out_when_a_rank_is_missing($kind)
            }
        }
    };
}

suite_for!(hash, "hash");
suite_for!(file, "file");
suite_for!(tcp, "tcp");
suite_for!(prefix_hash, "prefix-hash");
suite_for!(prefix_file, "prefix-file");
suite_for!(prefix_tcp, "prefix-tcp");
