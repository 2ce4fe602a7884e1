//! Send and receive, alone and in groups.

use dipu_deviceapi::{DataType, DeviceApi, ErrorKind, StreamHandle};

use super::data::input;
use super::{with_ranks, Mode, MODES};
use crate::comm::layout::{Layout, P2P_DEPTH};

/// Both directions of an exchange in one group, each far larger than a
/// channel's ring: without the group both sends would wait forever.
#[test]
fn grouped_exchange_in_both_directions() {
    for mode in MODES {
        let ring = P2P_DEPTH * Layout::new(2).p2p_chunk;
        let n = 3 * ring / 2 + 5; // f16 elements: 3 rings and 10 bytes
        with_ranks(2, mode, |r| {
            let peer = 1 - r.rank;
            let send = r.upload(&input(DataType::F16, r.rank, n));
            let recv = r.upload(&vec![0u8; n * 2]);
            let (c, s) = (r.comm, StreamHandle::DEFAULT);
            // SAFETY: live buffers of `n` f16 each, live stream and comm.
            unsafe {
                r.host.group_start().unwrap();
                r.host
                    .send(send, n, DataType::F16, peer as i32, c, s)
                    .unwrap();
                r.host
                    .recv(recv, n, DataType::F16, peer as i32, c, s)
                    .unwrap();
                r.host.group_end().unwrap();
            }
            assert_eq!(r.download(recv, n * 2), input(DataType::F16, peer, n));
            r.free(send);
            r.free(recv);
        });
    }
}

/// Every rank sends a block to every rank (itself included) and receives
/// one from each, all in one (nested) group.
#[test]
fn grouped_all_to_all() {
    for world in [2, 4] {
        for mode in MODES {
            let n = Layout::new(world).p2p_chunk + 3; // u32s: several chunks each
            with_ranks(world, mode, |r| {
                let block = n * 4;
                let send = r.upload(&input(DataType::U32, r.rank, n * world));
                let recv = r.upload(&vec![0u8; block * world]);
                let (c, s) = (r.comm, StreamHandle::DEFAULT);
                // SAFETY: blocks inside live buffers; live stream and comm.
                unsafe {
                    r.host.group_start().unwrap();
                    r.host.group_start().unwrap();
                    for p in 0..world {
                        let out = send.cast::<u8>().add(p * block).cast();
                        r.host.send(out, n, DataType::U32, p as i32, c, s).unwrap();
                    }
                    r.host.group_end().unwrap();
                    for p in (0..world).rev() {
                        let into = recv.cast::<u8>().add(p * block).cast();
                        r.host.recv(into, n, DataType::U32, p as i32, c, s).unwrap();
                    }
                    r.host.group_end().unwrap();
                }
                let got = r.download(recv, block * world);
                for p in 0..world {
                    let theirs = input(DataType::U32, p, n * world);
                    let want = &theirs[r.rank * block..(r.rank + 1) * block];
                    assert_eq!(
                        &got[p * block..(p + 1) * block],
                        want,
                        "block from rank {p}"
                    );
                }
                r.free(send);
                r.free(recv);
            });
        }
    }
}

/// A send that fits the ring completes before its receive is posted, and
/// messages between two ranks arrive in order; zero-byte transfers are
/// no-ops.
#[test]
fn ungrouped_sends_are_buffered_and_ordered() {
    with_ranks(3, Mode::SharedVendor, |r| {
        let (c, s) = (r.comm, StreamHandle::DEFAULT);
        let n = 1000;
        if r.rank == 0 {
            let a = r.upload(&input(DataType::I16, 10, n));
            let b = r.upload(&input(DataType::I16, 11, n));
            // SAFETY: live buffers, stream and communicator.
            unsafe {
                r.host.send(a, n, DataType::I16, 2, c, s).unwrap();
                r.host.send(b, n, DataType::I16, 2, c, s).unwrap();
                r.host.send(a, 0, DataType::I16, 1, c, s).unwrap();
                r.host.stream_synchronize(s).unwrap();
            }
            r.free(a);
            r.free(b);
        } else if r.rank == 2 {
            let into = r.upload(&vec![0u8; 2 * n]);
            // SAFETY: as above.
            unsafe {
                r.host.recv(into, n, DataType::I16, 0, c, s).unwrap();
                assert_eq!(r.download(into, 2 * n), input(DataType::I16, 10, n));
                r.host.recv(into, n, DataType::I16, 0, c, s).unwrap();
                assert_eq!(r.download(into, 2 * n), input(DataType::I16, 11, n));
            }
            r.free(into);
        }
    });
}

#[test]
fn bad_peers_are_rejected_when_issued() {
    with_ranks(2, Mode::OwnVendor, |r| {
        let buf = r.upload(&[0u8; 16]);
        let mut host_mem = [0u8; 16];
        let (c, s) = (r.comm, StreamHandle::DEFAULT);
        // SAFETY: live buffer, stream and communicator; the host buffer is
        // rejected before use.
        unsafe {
            let e = r.host.send(buf, 4, DataType::F32, 2, c, s).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().contains("peer 2 is not a rank"), "{e}");
            let e = r.host.recv(buf, 5, DataType::F32, -1, c, s).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
            assert!(e.message().contains("peer -1 is not a rank"), "{e}");
            let e = r
                .host
                .recv(host_mem.as_mut_ptr().cast(), 4, DataType::U8, 0, c, s);
            let e = e.unwrap_err();
            assert!(e.message().contains("receive buffer"), "{e}");
            assert!(e.message().contains("not device memory"), "{e}");
            let e = r.host.send(buf, 5, DataType::F32, 0, c, s).unwrap_err();
            assert!(e.message().contains("past the end"), "{e}");
        }
        r.free(buf);
    });
}
