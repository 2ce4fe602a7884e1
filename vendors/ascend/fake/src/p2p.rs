//! HCCL's sends and receives: `HcclSend`, `HcclRecv` and
//! `HcclBatchSendRecv` post messages in per-pair queues of the clique, and
//! `HcclGroupStart`/`End` hold them per thread until the group ends.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::entry::{fail, R};
use crate::hccl::{comm, from_acl, timeout, Comm, Message, E_PARA, E_TIMEOUT};
use crate::reduce::size_of;
use crate::streams::resolve;

/// One send or receive (`HcclSendRecvItem`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Item {
    pub(crate) send_recv_type: i32,
    pub(crate) buf: *mut c_void,
    pub(crate) count: u64,
    pub(crate) data_type: i32,
    pub(crate) remote_rank: u32,
}

// SAFETY: the buffer address is only used by the stream task the caller
// keeps the buffer alive for.
unsafe impl Send for Item {}

/// Runs `items` of rank `c`: every send is posted, then every receive is
/// taken, then the sends wait to be taken.
fn exchange(c: &Comm, items: &[Item]) -> R {
    let mut posted = Vec::new();
    for it in items.iter().filter(|it| it.send_recv_type == 0) {
        let bytes = it.count as usize * size_of(it.data_type).unwrap_or(1);
        let taken = Arc::new((Mutex::new(false), Condvar::new()));
        let mut s = c.clique.state.lock();
        s.pairs
            .entry((c.rank, it.remote_rank))
            .or_default()
            .push_back(Message {
                ptr: it.buf as usize,
                bytes,
                taken: Arc::clone(&taken),
            });
        c.clique.changed.notify_all();
        posted.push(taken);
    }
    for it in items.iter().filter(|it| it.send_recv_type == 1) {
        let bytes = it.count as usize * size_of(it.data_type).unwrap_or(1);
        let key = (it.remote_rank, c.rank);
        let message = {
            let mut s = c.clique.state.lock();
            c.clique
                .wait(&mut s, |s| s.pairs.get(&key).is_some_and(|q| !q.is_empty()))?;
            s.pairs.get_mut(&key).and_then(VecDeque::pop_front)
        };
        let Some(m) = message else { continue };
        let copied = m.bytes.min(bytes);
        // SAFETY: the sender's buffer (alive until it is taken) into ours.
        unsafe { std::ptr::copy_nonoverlapping(m.ptr as *const u8, it.buf as *mut u8, copied) };
        *m.taken.0.lock() = true;
        m.taken.1.notify_all();
        if m.bytes != bytes {
            return fail(
                E_PARA,
                format!(
                    "rank {} sent {} bytes, rank {} expected {bytes}",
                    it.remote_rank, m.bytes, c.rank
                ),
            );
        }
    }
    let deadline = Instant::now() + timeout();
    for taken in posted {
        let mut done = taken.0.lock();
        while !*done {
            if taken.1.wait_until(&mut done, deadline).timed_out() && !*done {
                return fail(E_TIMEOUT, "a send was not received in time");
            }
        }
    }
    Ok(())
}

/// An open group: its depth and the held items, with their communicator
/// and stream.
type Group = (u32, Vec<(usize, usize, Item)>);

thread_local! {
    /// `HcclGroupStart` depth and the sends and receives held for `HcclGroupEnd`.
    static GROUP: RefCell<Option<Group>> = const { RefCell::new(None) };
}

/// `HcclBatchSendRecv` (and a single `HcclSend`/`HcclRecv`, or one held
/// in a group).
pub(crate) fn batch(items: &[Item], handle: *mut c_void, stream: *mut c_void) -> R {
    let c = comm(handle)?;
    let s = resolve(stream).map_err(from_acl)?;
    for it in items {
        if it.buf.is_null()
            || it.send_recv_type > 1
            || it.remote_rank as usize >= c.clique.size
            || size_of(it.data_type).is_none()
        {
            return fail(E_PARA, format!("bad send/recv item {it:?}"));
        }
    }
    let held = GROUP.with(|g| match g.borrow_mut().as_mut() {
        Some((_, list)) => {
            list.extend(
                items
                    .iter()
                    .map(|it| (handle as usize, stream as usize, *it)),
            );
            true
        }
        None => false,
    });
    if held {
        return Ok(());
    }
    let items = items.to_vec();
    s.enqueue(Box::new(move || {
        if let Err(f) = exchange(&c, &items) {
            crate::entry::trace("hccl send/recv", f.code, &f.message);
            c.error.store(f.code, Ordering::Release);
        }
    }))
    .map_err(from_acl)
}

/// `HcclGroupStart`.
#[cfg_attr(
    feature = "old-cann",
    expect(dead_code, reason = "not exported by the old build")
)]
pub(crate) fn group_start() -> R {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        match g.as_mut() {
            Some((depth, _)) => *depth += 1,
            None => *g = Some((1, Vec::new())),
        }
    });
    Ok(())
}

/// `HcclGroupEnd`: the held sends and receives go out, one batch per
/// communicator and stream.
#[cfg_attr(
    feature = "old-cann",
    expect(dead_code, reason = "not exported by the old build")
)]
pub(crate) fn group_end() -> R {
    let held = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        match g.as_mut() {
            None => None,
            Some((depth, _)) if *depth > 1 => {
                *depth -= 1;
                Some(Vec::new())
            }
            Some(_) => g.take().map(|(_, list)| list),
        }
    });
    let Some(held) = held else {
        return fail(E_PARA, "HcclGroupEnd without HcclGroupStart");
    };
    let mut batches: Vec<((usize, usize), Vec<Item>)> = Vec::new();
    for (c, s, it) in held {
        match batches.iter_mut().find(|(k, _)| *k == (c, s)) {
            Some((_, list)) => list.push(it),
            None => batches.push(((c, s), vec![it])),
        }
    }
    for ((c, s), items) in batches {
        batch(&items, c as *mut c_void, s as *mut c_void)?;
    }
    Ok(())
}
