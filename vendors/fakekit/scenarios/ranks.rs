//! What one rank of a multi-process job does, for any vendor on its fake
//! (included by each vendor's `tests/processes.rs` with `#[path]`): the
//! ranks share the unique id through the job's folder
//! (`dipu_fakekit::ranks`), form one communicator, and check every result
//! against the value each rank computes for itself.

use std::ffi::c_void;

use dipu_deviceapi::{CommHandle, CopyKind, DataType, DeviceApi, ReduceOp, StreamHandle};

use crate::dipu_fakekit::ranks::{fetch, publish};

/// Rank 0's unique id, shared with every rank through the job's folder.
pub(crate) fn share_id(v: &dyn DeviceApi, rank: usize) -> Vec<u8> {
    if rank == 0 {
        let id = v.comm_get_unique_id().expect("comm_get_unique_id");
        publish("id", &id);
        id
    } else {
        fetch("id")
    }
}

/// A rank's communicator, stream and two device buffers of `bytes`.
pub(crate) struct Setup {
    pub(crate) comm: CommHandle,
    pub(crate) stream: StreamHandle,
    pub(crate) send: *mut c_void,
    pub(crate) recv: *mut c_void,
    pub(crate) bytes: usize,
}

/// Joins the job's communicator as `rank` of `world` on device 0.
pub(crate) fn setup(v: &dyn DeviceApi, rank: usize, world: usize, bytes: usize) -> Setup {
    v.set_device(0).expect("set_device");
    let id = share_id(v, rank);
    let comm = v
        .comm_init_rank(world as i32, &id, rank as i32)
        .unwrap_or_else(|e| panic!("rank {rank}: comm_init_rank: {e}"));
    Setup {
        comm,
        stream: v.stream_create(0).expect("stream_create"),
        send: v.malloc(bytes).expect("malloc"),
        recv: v.malloc(bytes).expect("malloc"),
        bytes,
    }
}

impl Setup {
    /// Writes `values` to the send buffer.
    pub(crate) fn upload(&self, v: &dyn DeviceApi, values: &[f32]) {
        assert!(values.len() * 4 <= self.bytes);
        // SAFETY: a device buffer of `self.bytes` and `values` on the host.
        unsafe {
            v.memcpy(
                self.send,
                values.as_ptr().cast(),
                values.len() * 4,
                CopyKind::HostToDevice,
            )
        }
        .expect("upload");
    }

    /// Waits for the stream and reads `n` floats of `buf`.
    pub(crate) fn download(&self, v: &dyn DeviceApi, buf: *mut c_void, n: usize) -> Vec<f32> {
        // SAFETY: a live stream.
        unsafe { v.stream_synchronize(self.stream) }.expect("stream_synchronize");
        let mut out = vec![0f32; n];
        // SAFETY: a device buffer of at least n floats and a host one of n.
        unsafe { v.memcpy(out.as_mut_ptr().cast(), buf, n * 4, CopyKind::DeviceToHost) }
            .expect("download");
        out
    }

    /// Destroys everything, the communicator last.
    pub(crate) fn close(self, v: &dyn DeviceApi) {
        // SAFETY: live handles, each released once, after their work.
        unsafe {
            v.stream_synchronize(self.stream)
                .expect("stream_synchronize");
            v.comm_async_error(self.comm)
                .expect("no asynchronous error");
            v.free(self.send).expect("free");
            v.free(self.recv).expect("free");
            v.stream_destroy(self.stream).expect("stream_destroy");
            v.comm_destroy(self.comm).expect("comm_destroy");
        }
    }
}

/// Rank `r`'s i-th value: small integers, exact in f32 under every operator.
fn value(r: usize, i: usize) -> f32 {
    ((i + 3 * r) % 5 + 1) as f32
}

/// The reduction of every rank's i-th value.
fn reduced(op: ReduceOp, world: usize, i: usize) -> f32 {
    let vals = (0..world).map(|r| value(r, i));
    match op {
        ReduceOp::Sum => vals.sum(),
        ReduceOp::Prod => vals.product(),
        ReduceOp::Min => vals.fold(f32::MAX, f32::min),
        ReduceOp::Max => vals.fold(f32::MIN, f32::max),
        ReduceOp::Avg => vals.sum::<f32>() / world as f32,
        other => panic!("no reference for {other:?}"),
    }
}

/// All-reduce (sum) of `count` floats, checked: rank r's values are
/// `block % 1000 + r` in blocks of 1024 (a value per block keeps a large
/// job's set-up and checks cheap in a debug build, while any misplaced
/// block still shows).
pub(crate) fn all_reduce_sum(v: &dyn DeviceApi, rank: usize, world: usize, count: usize) {
    let start = std::time::Instant::now();
    let s = setup(v, rank, world, count * 4);
    let mut mine = vec![0f32; count];
    for (b, block) in mine.chunks_mut(1024).enumerate() {
        block.fill((b % 1000 + rank) as f32);
    }
    s.upload(v, &mine);
    // SAFETY: buffers of `count` floats, a live communicator and stream.
    unsafe {
        v.all_reduce(
            s.send,
            s.recv,
            count,
            DataType::F32,
            ReduceOp::Sum,
            s.comm,
            s.stream,
        )
    }
    .expect("all_reduce");
    let got = s.download(v, s.recv, count);
    let base = (world * (world - 1) / 2) as f32;
    let want = |b: usize| (world * (b % 1000)) as f32 + base;
    let wrong = got
        .chunks(1024)
        .enumerate()
        .find(|(b, block)| block.iter().any(|&x| x != want(*b)));
    if let Some((b, block)) = wrong {
        panic!(
            "rank {rank}: block {b} of the all-reduce is {block:?}, not {}",
            want(b)
        );
    }
    s.close(v);
    println!(
        "rank {rank}: all_reduce ok ({} MiB in {:.2} s)",
        (count * 4) >> 20,
        start.elapsed().as_secs_f64()
    );
}

/// Every collective, with every operator in `ops` (and each of
/// `refused` refused at once, as the vendor documents), checked.
pub(crate) fn every_collective(
    v: &dyn DeviceApi,
    rank: usize,
    world: usize,
    ops: &[ReduceOp],
    refused: &[ReduceOp],
) {
    let count = 64;
    let s = setup(v, rank, world, count * world * 4);
    let mine: Vec<f32> = (0..count * world).map(|i| value(rank, i)).collect();
    let (send, recv, comm, stream, f32_) = (s.send, s.recv, s.comm, s.stream, DataType::F32);
    for &op in ops {
        s.upload(v, &mine);
        // SAFETY: buffers of count * world floats, live handles (so below).
        unsafe { v.all_reduce(send, recv, count, f32_, op, comm, stream) }.expect("all_reduce");
        let got = s.download(v, recv, count);
        let want: Vec<f32> = (0..count).map(|i| reduced(op, world, i)).collect();
        assert_eq!(got, want, "rank {rank}: all_reduce {op:?}");

        // SAFETY: as above.
        unsafe { v.reduce_scatter(send, recv, count, f32_, op, comm, stream) }
            .expect("reduce_scatter");
        let got = s.download(v, recv, count);
        let want: Vec<f32> = (0..count)
            .map(|i| reduced(op, world, rank * count + i))
            .collect();
        assert_eq!(got, want, "rank {rank}: reduce_scatter {op:?}");

        let root = world - 1;
        s.upload(v, &vec![-1.0; count]);
        // The root's receive buffer only is written: fill it first.
        // SAFETY: as above.
        unsafe { v.memcpy(recv, send, count * 4, CopyKind::DeviceToDevice) }.expect("copy");
        s.upload(v, &mine);
        // SAFETY: as above.
        unsafe { v.reduce(send, recv, count, f32_, op, root as i32, comm, stream) }
            .expect("reduce");
        let got = s.download(v, recv, count);
        let want: Vec<f32> = if rank == root {
            (0..count).map(|i| reduced(op, world, i)).collect()
        } else {
            vec![-1.0; count]
        };
        assert_eq!(got, want, "rank {rank}: reduce {op:?} to {root}");
    }
    for &op in refused {
        // SAFETY: as above; refused before anything is queued.
        let e = unsafe { v.all_reduce(send, recv, count, f32_, op, comm, stream) };
        assert!(e.is_err(), "rank {rank}: all_reduce {op:?} was not refused");
    }

    s.upload(v, &mine);
    // SAFETY: as above.
    unsafe { v.all_gather(send, recv, count, f32_, comm, stream) }.expect("all_gather");
    let got = s.download(v, recv, count * world);
    let want: Vec<f32> = (0..world)
        .flat_map(|r| (0..count).map(move |i| value(r, i)))
        .collect();
    assert_eq!(got, want, "rank {rank}: all_gather");

    // In place, from rank 1 (HCCL's broadcast has one buffer).
    // SAFETY: as above.
    unsafe { v.broadcast(send, send, count, f32_, 1, comm, stream) }.expect("broadcast");
    let got = s.download(v, send, count);
    let want: Vec<f32> = (0..count).map(|i| value(1, i)).collect();
    assert_eq!(got, want, "rank {rank}: broadcast from 1");

    // A ring: to the next rank, from the previous one, in one group.
    s.upload(v, &mine);
    v.group_start().expect("group_start");
    // SAFETY: as above.
    unsafe {
        v.send(send, count, f32_, ((rank + 1) % world) as i32, comm, stream)
            .expect("send");
        v.recv(
            recv,
            count,
            f32_,
            ((rank + world - 1) % world) as i32,
            comm,
            stream,
        )
        .expect("recv");
    }
    v.group_end().expect("group_end");
    let got = s.download(v, recv, count);
    let want: Vec<f32> = (0..count)
        .map(|i| value((rank + world - 1) % world, i))
        .collect();
    assert_eq!(got, want, "rank {rank}: send/recv ring");
    s.close(v);
    println!("rank {rank}: every collective ok");
}

/// The killed-rank job: every rank joins; the last one then waits to be
/// killed, having sent rank 0 a message nobody receives (its post stays
/// in shared memory); the others all-reduce, which needs the last rank,
/// tell the parent they are waiting, and must see an error (not hang)
/// once it is killed.
pub(crate) fn survive_a_killed_rank(v: &dyn DeviceApi, rank: usize, world: usize) {
    let count = 1024;
    let s = setup(v, rank, world, count * 4);
    s.upload(v, &vec![1.0; count]);
    if rank == world - 1 {
        // SAFETY: a buffer of `count` floats, live handles.
        unsafe { v.send(s.send, count, DataType::F32, 0, s.comm, s.stream) }.expect("send");
        publish(&format!("waiting{rank}"), b"");
        // Blocks until the parent kills it.
        loop {
            std::thread::park();
        }
    }
    // SAFETY: as above.
    unsafe {
        v.all_reduce(
            s.send,
            s.recv,
            count,
            DataType::F32,
            ReduceOp::Sum,
            s.comm,
            s.stream,
        )
    }
    .expect("all_reduce is queued");
    publish(&format!("waiting{rank}"), b"");
    let start = std::time::Instant::now();
    // SAFETY: live handles.
    let synced = unsafe { v.stream_synchronize(s.stream) };
    // SAFETY: a live communicator.
    let error = unsafe { v.comm_async_error(s.comm) };
    let e = match (synced, error) {
        (Err(e), _) | (Ok(()), Err(e)) => e,
        (Ok(()), Ok(())) => panic!("rank {rank}: the all-reduce with a dead rank succeeded"),
    };
    println!(
        "rank {rank}: failed after {:.2} s: {e}",
        start.elapsed().as_secs_f64()
    );
    // SAFETY: the communicator, given up at once; the rest released.
    unsafe {
        let _ = v.comm_abort(s.comm);
        v.free(s.send).expect("free");
        v.free(s.recv).expect("free");
    }
    println!("rank {rank}: saw the error");
}
