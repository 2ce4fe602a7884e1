//! HCCL's sends and receives: `HcclSend`, `HcclRecv` and
//! `HcclBatchSendRecv` exchange messages per pair of ranks (the n-th send
//! from a rank to a peer meets that peer's n-th receive from it, in
//! whatever processes the two are), and `HcclGroupStart`/`End` hold them
//! per thread until the group ends.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::Ordering;

use dipu_fakekit::collective::{Key, META};

use crate::entry::{fail, R};
use crate::hccl::{bytes_of, comm, from_acl, timeout, Comm, E_PARA};
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

/// The meeting of the next message from `src` to `dst`, as rank `c`
/// counts them.
fn next_message(c: &Comm, src: u32, dst: u32) -> Key {
    let mut counts = c.messages.lock();
    let n = counts.entry((src, dst)).or_insert(0);
    *n += 1;
    (1 + u64::from(src) * 65536 + u64::from(dst), *n)
}

/// Runs `items` of rank `c`: every send is posted, then every receive is
/// read, then each send waits for its receiver to have read it.
fn exchange(c: &Comm, items: &[Item]) -> R {
    let limit = Some(timeout());
    let mut posted = Vec::new();
    for it in items.iter().filter(|it| it.send_recv_type == 0) {
        let bytes = it.count as usize * size_of(it.data_type).unwrap_or(1);
        let key = next_message(c, c.rank, it.remote_rank);
        let data = bytes_of(it.buf as usize, bytes);
        let p = c
            .member
            .post(key, 0, [0; META], data)
            .map_err(|f| c.failed(f))?;
        posted.push(p);
    }
    for it in items.iter().filter(|it| it.send_recv_type == 1) {
        let bytes = it.count as usize * size_of(it.data_type).unwrap_or(1);
        let key = next_message(c, it.remote_rank, c.rank);
        let sender = it.remote_rank as usize;
        let m = c
            .member
            .read(key, 0, sender, limit)
            .map_err(|f| c.failed(f))?;
        let sent = m.data();
        let copied = sent.len().min(bytes);
        // SAFETY: the sender's message (mapped) into our buffer of `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(sent.as_ptr(), it.buf.cast::<u8>(), copied) };
        if sent.len() != bytes {
            return fail(
                E_PARA,
                format!(
                    "rank {} sent {} bytes, rank {} expected {bytes}",
                    it.remote_rank,
                    sent.len(),
                    c.rank
                ),
            );
        }
    }
    for p in posted {
        c.member.finish(p, 1, limit).map_err(|f| c.failed(f))?;
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
            || it.remote_rank as usize >= c.member.nranks
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
