//! The communicators' own tests (ranks as threads of the test).

use super::*;

fn id(name: &str) -> Vec<u8> {
    format!("{name}-{}-{:?}", std::process::id(), Instant::now()).into_bytes()
}

#[test]
fn ranks_meet_and_exchange() {
    let id = id("meet");
    let sums: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|rank| {
                let id = id.clone();
                s.spawn(move || {
                    let m = Member::join("test", &id, 4, rank).unwrap();
                    m.wait_complete(None).unwrap();
                    let mut total = 0;
                    for seq in 0..3u64 {
                        let value = rank as u64 + seq;
                        let p = m
                            .post((0, seq), rank, [value, 0, 0, 0, 0, 0], &value.to_ne_bytes())
                            .unwrap();
                        for v in m.gather((0, seq), 4, None).unwrap() {
                            let bytes: [u8; 8] = v.data().try_into().unwrap();
                            assert_eq!(v.meta()[0], u64::from_ne_bytes(bytes));
                            total += v.meta()[0];
                        }
                        m.finish(p, 4, None).unwrap();
                    }
                    total
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(sums, vec![6 + 10 + 14; 4]);
    let prefix = shm_prefix("test", &id);
    let left: Vec<_> = std::fs::read_dir(DIR)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

#[test]
fn a_missing_rank_times_out_and_leaving_cleans_up() {
    let id = id("missing");
    let m = Member::join("test", &id, 2, 0).unwrap();
    assert!(!m.complete());
    assert_eq!(
        Member::join("test", &id, 3, 1).unwrap_err(),
        "the id was used for 2 ranks, not 3"
    );
    assert_eq!(
        Member::join("test", &id, 2, 0).unwrap_err(),
        "rank 0 joined the communicator already"
    );
    assert_eq!(
        m.wait_complete(Some(Duration::from_millis(30))),
        Err(Failure::TimedOut)
    );
    let control = Path::new(DIR).join(shm_prefix("test", &id));
    assert!(control.exists());
    drop(m);
    assert!(!control.exists(), "the control segment outlived its ranks");
}

#[test]
fn an_all_reduce_in_uneven_shares_covers_every_element() {
    let id = id("shares");
    let outs: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|rank| {
                let id = id.clone();
                s.spawn(move || {
                    let m = Member::join("test", &id, 3, rank).unwrap();
                    m.wait_complete(None).unwrap();
                    let data: Vec<u8> = (0..7).map(|i| i * 10 + rank as u8).collect();
                    let p = m.post((0, 0), rank, [0; META], &data).unwrap();
                    let views = m.gather((0, 0), 3, None).unwrap();
                    let sum = |inputs: &[&[u8]], out: &mut [u8]| {
                        for (i, o) in out.iter_mut().enumerate() {
                            *o = inputs.iter().map(|x| x[i]).sum();
                        }
                    };
                    let out = m.all_reduce_shares((2, 0), &views, 1, sum, None).unwrap();
                    m.finish(p, 3, None).unwrap();
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let want: Vec<u8> = (0..7).map(|i| 30 * i + 3).collect();
    assert_eq!(outs, vec![want; 3]);
}

#[test]
fn a_rank_that_left_fails_later_waits_for_posts_only() {
    let id = id("left");
    let a = Member::join("test", &id, 2, 0).unwrap();
    let b = Member::join("test", &id, 2, 1).unwrap();
    let p = a.post((0, 0), 0, [0; META], b"x").unwrap();
    let v = b.read((0, 0), 0, 0, None).unwrap();
    assert_eq!(v.data(), b"x");
    b.leave();
    // Its read was counted: a's wait for it still succeeds.
    a.finish(p, 1, None).unwrap();
    assert_eq!(a.read((0, 1), 1, 1, None).unwrap_err(), Failure::Left(1));
}

#[test]
fn an_abort_ends_every_wait() {
    let id = id("abort");
    let a = Member::join("test", &id, 2, 0).unwrap();
    let b = Member::join("test", &id, 2, 1).unwrap();
    let p = a.post((0, 0), 0, [0; META], b"x").unwrap();
    b.abort();
    assert_eq!(a.read((0, 0), 1, 1, None).unwrap_err(), Failure::Aborted);
    assert_eq!(a.finish(p, 2, None), Err(Failure::Aborted));
}

#[test]
fn a_peer_process_that_exited_fails_waits_and_cleans_up() {
    let id = id("dead");
    let m = Member::join("test", &id, 2, 0).unwrap();
    // Rank 1 is another process, killed and left a zombie (not reaped):
    // it counts as gone. (Reaped when the guard goes, a failed test too.)
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut peer = Reaped(
        std::process::Command::new("sleep")
            .arg("infinity")
            .spawn()
            .unwrap(),
    );
    m.control().pids[1].store(peer.0.id(), Ordering::Release);
    m.control().joined.fetch_add(1, Ordering::AcqRel);
    assert!(m.complete());
    let p = m.post((0, 0), 0, [0; META], b"mine").unwrap();
    peer.0.kill().unwrap();
    // Without a limit, only the peer's death can end these waits.
    assert_eq!(
        m.read((0, 0), 1, 1, None).unwrap_err(),
        Failure::PeerExited(1)
    );
    assert_eq!(m.finish(p, 2, None), Err(Failure::PeerExited(1)));
    drop(peer);
    let prefix = shm_prefix("test", &id);
    let left: Vec<_> = std::fs::read_dir(DIR)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}
