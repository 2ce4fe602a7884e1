//! Cross-memory attach: reading and writing another process's memory with
//! `process_vm_readv` and `process_vm_writev` (Linux; needs the permission
//! to ptrace the peer: the same user and no Yama restriction, or
//! CAP_SYS_PTRACE).

use nix::errno::Errno;

/// Copies `len` bytes at `remote` in process `pid` to `local`; a short
/// transfer is continued until all bytes are in or the kernel fails.
///
/// # Safety
/// `local` must be writable for `len` bytes that nothing else reads or
/// writes meanwhile. (`remote` may be anything: the kernel checks it, an
/// unmapped range is `EFAULT`.)
pub(crate) unsafe fn read(
    pid: i32,
    remote: usize,
    local: *mut u8,
    len: usize,
) -> Result<(), Errno> {
    // SAFETY: the caller's contract.
    unsafe { transfer(Direction::Read, pid, remote, local, len) }
}

/// Copies `len` bytes at `local` to `remote` in process `pid`; a short
/// transfer is continued until all bytes are out or the kernel fails.
///
/// # Safety
/// `local` must be readable for `len` bytes that nothing writes meanwhile.
/// (`remote` is checked by the kernel: an unmapped range is `EFAULT`.)
pub(crate) unsafe fn write(
    pid: i32,
    remote: usize,
    local: *const u8,
    len: usize,
) -> Result<(), Errno> {
    // SAFETY: the caller's contract; the kernel only reads `local` here.
    unsafe { transfer(Direction::Write, pid, remote, local.cast_mut(), len) }
}

#[derive(Clone, Copy)]
enum Direction {
    Read,
    Write,
}

/// [`read`] or [`write`], continuing short transfers.
///
/// # Safety
/// As for the direction's function.
unsafe fn transfer(
    direction: Direction,
    pid: i32,
    remote: usize,
    local: *mut u8,
    len: usize,
) -> Result<(), Errno> {
    let mut done = 0;
    while done < len {
        // SAFETY: the caller's contract, for the part not moved yet.
        match unsafe { once(direction, pid, remote + done, local.add(done), len - done) } {
            Ok(0) => return Err(Errno::EFAULT),
            Ok(n) => done += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
unsafe fn once(
    direction: Direction,
    pid: i32,
    remote: usize,
    local: *mut u8,
    len: usize,
) -> Result<usize, Errno> {
    use nix::libc;
    let local = libc::iovec {
        iov_base: local.cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: one local iovec the caller lets the kernel write (read) or
    // read (write); the remote range is checked by the kernel against the
    // other process's mappings.
    let n = unsafe {
        match direction {
            Direction::Read => libc::process_vm_readv(pid, &local, 1, &remote, 1, 0),
            Direction::Write => libc::process_vm_writev(pid, &local, 1, &remote, 1, 0),
        }
    };
    usize::try_from(n).map_err(|_| Errno::last())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
unsafe fn once(_: Direction, _: i32, _: usize, _: *mut u8, _: usize) -> Result<usize, Errno> {
    Err(Errno::ENOSYS)
}

/// The value rank `rank` keeps in its probe word: made from the
/// communicator's segment name, so a pid reused by another process, or a
/// rank of another communicator, does not pass for it.
pub(crate) fn probe_value(name: &str, rank: usize) -> u64 {
    // FNV-1a of the name, then the rank mixed in.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    hash ^ (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_reports_bad_addresses() {
        let pid = i32::try_from(std::process::id()).unwrap();
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 31) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        // SAFETY: `dst` is ours, of `src.len()` bytes.
        unsafe { read(pid, src.as_ptr() as usize, dst.as_mut_ptr(), src.len()) }.unwrap();
        assert_eq!(dst, src);
        // SAFETY: as above; address 8 is never mapped.
        let e = unsafe { read(pid, 8, dst.as_mut_ptr(), 8) }.unwrap_err();
        assert_eq!(e, Errno::EFAULT);
        let mut back = vec![0u8; src.len()];
        // SAFETY: `src` is readable for its length; `back` is ours.
        unsafe { write(pid, back.as_mut_ptr() as usize, src.as_ptr(), src.len()) }.unwrap();
        assert_eq!(back, src);
        // SAFETY: as above; address 8 is never mapped.
        let e = unsafe { write(pid, 8, src.as_ptr(), 8) }.unwrap_err();
        assert_eq!(e, Errno::EFAULT);
        assert_ne!(probe_value("/a", 0), probe_value("/a", 1));
        assert_ne!(probe_value("/a", 0), probe_value("/b", 0));
    }
}
