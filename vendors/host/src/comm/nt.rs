//! Stores that bypass the caches (non-temporal), for outputs too large to
//! stay cached: they skip the read-for-ownership a normal store of a line
//! costs, which for a large all-reduce is most of its memory traffic.

/// Copies `len` bytes from `src` to `dst`, through non-temporal stores
/// when `streaming` and the CPU has them. Call [`fence`] before
/// publishing what was written.
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`]: `src` readable and `dst`
/// writable for `len` bytes, not overlapping; no alignment needed.
#[inline]
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize, streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    if streaming {
        // SAFETY: the caller's contract is `stream`'s.
        unsafe { stream(src, dst, len) };
        return;
    }
    let _ = streaming;
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Orders earlier non-temporal stores before every later store.
#[inline]
pub(crate) fn fence() {
    // SAFETY: SSE is part of every x86-64 CPU.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
}

/// The SSE2 (every x86-64 CPU) streaming copy: a head up to 16-byte
/// alignment of `dst`, 16-byte non-temporal stores, a tail.
///
/// # Safety
/// As for [`copy`].
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn stream(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let head = dst.align_offset(16).min(len);
    // SAFETY: every access below stays inside `src..src + len` and
    // `dst..dst + len` (the caller's ranges); `dst + at` is 16-byte aligned
    // for the streaming stores, loads are unaligned.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut at = head;
        while at + 16 <= len {
            let v = _mm_loadu_si128(src.add(at).cast::<__m128i>());
            _mm_stream_si128(dst.add(at).cast::<__m128i>(), v);
            at += 16;
        }
        std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), len - at);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn copies_any_alignment_and_length() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        for offset in 0..17 {
            for len in [0, 1, 15, 16, 17, 64, 200, 283] {
                let mut dst = vec![0u8; 320];
                // SAFETY: both ranges are inside their buffers.
                unsafe { super::copy(src.as_ptr(), dst.as_mut_ptr().add(offset), len, true) };
                super::fence();
                assert_eq!(&dst[offset..offset + len], &src[..len]);
                assert!(dst[..offset]
                    .iter()
                    .chain(&dst[offset + len..])
                    .all(|b| *b == 0));
            }
        }
    }
}
