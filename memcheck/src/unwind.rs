//! The capture path's unwinder: return addresses only, with the unwind
//! rule of each address cached per thread.
//!
//! On Linux x86-64 the loaded objects are found with `dl_iterate_phdr`
//! (each one's executable range and its `.eh_frame_hdr` / `.eh_frame`,
//! copied once) and handed to framehop, whose per-thread cache keeps the
//! unwind rule of every address it has seen: a repeated capture executes
//! cached rules instead of searching and interpreting DWARF CFI for every
//! frame, as libgcc's `_Unwind_Backtrace` does. Stack words are read only
//! between the capture's stack pointer and the top of the thread's stack,
//! so a wrong rule ends a trace early but can never fault. A return
//! address in no known object makes the objects be scanned again once
//! (a plugin loaded since); if it is still unknown the trace ends there.
//!
//! Elsewhere, or where this cannot be set up (an unknown stack, a capture
//! on a signal stack, a thread being torn down), [`capture`] returns `None`
//! and the caller uses `backtrace::trace`.

/// Fills `ips` with the return addresses of the caller's frames, innermost
/// first (the first is the return address into the caller of `capture`),
/// and returns how many it wrote; `None` where the fast unwinder is not
/// available.
#[inline(never)]
pub(crate) fn capture(ips: &mut [usize]) -> Option<usize> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        let (pc, sp, fp) = fast::registers();
        fast::walk(pc, sp, fp, ips)
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        let _ = ips;
        None
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod fast {
    use std::cell::RefCell;
    use std::ffi::{c_int, c_void, CStr};
    use std::mem::MaybeUninit;
    use std::ops::Range;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
    use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
    use parking_lot::Mutex;

    /// The loaded objects as of one scan.
    struct Objects {
        unwinder: UnwinderX86_64<Vec<u8>>,
        /// Executable ranges of the objects with unwind information, sorted.
        text: Vec<Range<u64>>,
        /// The loader's (additions, removals) counters at the scan.
        stamp: (u64, u64),
    }

    impl Objects {
        /// Whether `addr` is in an object with unwind information; `hot`
        /// is the index of the range that held the last address (most
        /// frames are in one object), tried first.
        fn knows_from(&self, addr: u64, hot: &mut usize) -> bool {
            if self.text.get(*hot).is_some_and(|r| r.contains(&addr)) {
                return true;
            }
            let i = self.text.partition_point(|r| r.start <= addr);
            if i > 0 && addr < self.text[i - 1].end {
                *hot = i - 1;
                return true;
            }
            false
        }

        #[cfg(test)]
        fn knows(&self, addr: u64) -> bool {
            self.knows_from(addr, &mut 0)
        }
    }

    /// framehop's rule cache is direct-mapped (the address modulo 509
    /// slots): two hot addresses in one slot would miss on every capture,
    /// each miss a DWARF CFI search and evaluation (which addresses of
    /// two objects meet in a slot changes with their load addresses).
    /// Each address is given one of several caches by another hash of
    /// it, so such a pair usually lands in different caches.
    const CACHES: usize = 8;

    fn cache_for(caches: &mut [Option<Box<CacheX86_64>>; CACHES], addr: u64) -> &mut CacheX86_64 {
        let i = (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61) as usize;
        caches[i % CACHES].get_or_insert_with(|| Box::new(CacheX86_64::new()))
    }

    /// The latest scan, shared by the threads (each keeps an `Arc` to it).
    static OBJECTS: Mutex<Option<Arc<Objects>>> = Mutex::new(None);
    /// Bumped with each new scan, so threads pick it up without a lock.
    static GENERATION: AtomicU64 = AtomicU64::new(0);

    /// One thread's unwinder: its copy of the scan and its rule cache.
    struct Local {
        objects: Arc<Objects>,
        generation: u64,
        /// Rule caches, created on first use (see [`CACHES`]).
        caches: [Option<Box<CacheX86_64>>; CACHES],
        /// The text range of the last address seen.
        hot: usize,
        /// This thread's stack.
        stack: Range<u64>,
    }

    enum State {
        Unset,
        /// The stack or the objects could not be found: use the fallback.
        Unusable,
        Ready(Box<Local>),
    }

    thread_local! {
        static LOCAL: RefCell<State> = const { RefCell::new(State::Unset) };
    }

    /// The current pc, stack pointer and frame pointer.
    #[inline(always)]
    pub(super) fn registers() -> (u64, u64, u64) {
        let (pc, sp, fp): (u64, u64, u64);
        // SAFETY: copies rip (through lea), rsp and rbp into three output
        // registers; reads and writes no memory, no stack, no flags.
        unsafe {
            std::arch::asm!(
                "lea {pc}, [rip]",
                "mov {sp}, rsp",
                "mov {fp}, rbp",
                pc = out(reg) pc,
                sp = out(reg) sp,
                fp = out(reg) fp,
                options(nomem, nostack, preserves_flags),
            );
        }
        (pc, sp, fp)
    }

    /// Unwinds from `pc`, `sp`, `fp` (registers of the frame of
    /// `super::capture`, read in it) into `ips`.
    pub(super) fn walk(pc: u64, sp: u64, fp: u64, ips: &mut [usize]) -> Option<usize> {
        LOCAL
            .try_with(|cell| {
                // A capture interrupting a capture (a signal handler) uses
                // the fallback.
                let mut state = cell.try_borrow_mut().ok()?;
                if let State::Unset = *state {
                    *state = match Local::new() {
                        Some(l) => State::Ready(Box::new(l)),
                        None => State::Unusable,
                    };
                }
                let State::Ready(local) = &mut *state else {
                    return None;
                };
                local.walk(pc, sp, fp, ips)
            })
            .ok()
            .flatten()
    }

    impl Local {
        fn new() -> Option<Local> {
            let stack = stack_bounds()?;
            let (objects, generation) = shared();
            Some(Local {
                objects,
                generation,
                caches: Default::default(),
                hot: 0,
                stack,
            })
        }

        fn walk(&mut self, pc: u64, sp: u64, fp: u64, ips: &mut [usize]) -> Option<usize> {
            if GENERATION.load(Ordering::Acquire) != self.generation {
                (self.objects, self.generation) = shared();
            }
            // Not on this thread's stack (a signal stack, a coroutine's),
            // or in code without unwind information: the fallback.
            if !self.stack.contains(&sp) || !self.objects.knows_from(pc, &mut self.hot) {
                return None;
            }
            // Everything from the capture's stack pointer to the top of
            // the thread's stack is mapped (the callers' frames).
            let readable = sp..self.stack.end;
            let mut read_stack = |addr: u64| -> Result<u64, ()> {
                let in_bounds = addr % 8 == 0
                    && addr >= readable.start
                    && addr.checked_add(8).is_some_and(|end| end <= readable.end);
                if !in_bounds {
                    return Err(());
                }
                // SAFETY: `addr` is 8-aligned and the 8 bytes at it lie
                // between this thread's current stack pointer and the top
                // of its stack, which stay mapped while this function runs
                // (they hold its callers' frames); a volatile read of a
                // stack word another frame may still write is fine for a
                // plain integer.
                Ok(unsafe { std::ptr::read_volatile(addr as *const u64) })
            };
            let mut regs = UnwindRegsX86_64::new(pc, sp, fp);
            let mut address = FrameAddress::from_instruction_pointer(pc);
            let mut rescanned = false;
            let mut n = 0;
            while n < ips.len() {
                let last_sp = regs.sp();
                let cache = cache_for(&mut self.caches, address.address());
                let ra = match self.objects.unwinder.unwind_frame(
                    address,
                    &mut regs,
                    cache,
                    &mut read_stack,
                ) {
                    Ok(Some(ra)) => ra,
                    // The root frame, or a rule that read outside the stack.
                    Ok(None) | Err(_) => break,
                };
                // Each caller's frame lies above its callee's.
                if regs.sp() <= last_sp {
                    break;
                }
                if !self.objects.knows_from(ra, &mut self.hot) {
                    if rescanned {
                        break;
                    }
                    rescanned = true;
                    match rescan(&self.objects) {
                        Some((objects, generation)) => {
                            (self.objects, self.generation) = (objects, generation);
                        }
                        None => break,
                    }
                    if !self.objects.knows_from(ra, &mut self.hot) {
                        break;
                    }
                }
                let Some(next) = FrameAddress::from_return_address(ra) else {
                    break;
                };
                ips[n] = ra as usize;
                n += 1;
                address = next;
            }
            Some(n)
        }
    }

    /// The latest scan (scanning the first time) and its generation.
    fn shared() -> (Arc<Objects>, u64) {
        let mut objects = OBJECTS.lock();
        match &*objects {
            Some(o) => (Arc::clone(o), GENERATION.load(Ordering::Acquire)),
            None => {
                let o = Arc::new(scan());
                *objects = Some(Arc::clone(&o));
                let generation = GENERATION.fetch_add(1, Ordering::AcqRel) + 1;
                (o, generation)
            }
        }
    }

    /// A new scan when objects were loaded or unloaded since `old` was
    /// taken (another thread's, or one of this call's own); `None` when
    /// nothing changed.
    fn rescan(old: &Objects) -> Option<(Arc<Objects>, u64)> {
        let now = loader_stamp();
        if now == old.stamp {
            return None;
        }
        let mut objects = OBJECTS.lock();
        if let Some(o) = &*objects {
            if o.stamp == now {
                return Some((Arc::clone(o), GENERATION.load(Ordering::Acquire)));
            }
        }
        let o = Arc::new(scan());
        *objects = Some(Arc::clone(&o));
        let generation = GENERATION.fetch_add(1, Ordering::AcqRel) + 1;
        Some((o, generation))
    }

    /// The bounds of the current thread's stack.
    fn stack_bounds() -> Option<Range<u64>> {
        let mut attr = MaybeUninit::<libc::pthread_attr_t>::uninit();
        // SAFETY: `attr` is written by pthread_getattr_np before any read;
        // pthread_self() is always a valid thread.
        if unsafe { libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) } != 0 {
            return None;
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        // SAFETY: `attr` was initialised by the successful call above; it
        // is destroyed exactly once, after the read.
        let rc = unsafe {
            let rc = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size);
            libc::pthread_attr_destroy(attr.as_mut_ptr());
            rc
        };
        let start = addr as u64;
        (rc == 0 && size > 0).then(|| start..start.saturating_add(size as u64))
    }

    /// Byte size of `dl_phdr_info` up to and including `dlpi_subs`: older
    /// loaders pass a shorter structure.
    const STAMP_END: usize = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8;

    /// The loader's counters of objects added and removed.
    fn loader_stamp() -> (u64, u64) {
        unsafe extern "C" fn first(
            info: *mut libc::dl_phdr_info,
            size: usize,
            data: *mut c_void,
        ) -> c_int {
            if size >= STAMP_END {
                // SAFETY: the loader passes a valid `info` of `size` bytes
                // (which covers the counters) for the call; `data` is the
                // `&mut (u64, u64)` given to dl_iterate_phdr below.
                unsafe {
                    *data.cast::<(u64, u64)>() = ((*info).dlpi_adds, (*info).dlpi_subs);
                }
            }
            1 // the counters are the same for every object: stop
        }
        let mut stamp = (0u64, 0u64);
        // SAFETY: `first` only writes through `data`, which points to
        // `stamp`, alive for the whole call.
        unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut stamp).cast()) };
        stamp
    }

    /// Every loaded object with an `.eh_frame_hdr`, its unwind sections
    /// copied (so an object unloaded later leaves no dangling data).
    fn scan() -> Objects {
        let mut found: Vec<Found> = Vec::new();
        // SAFETY: `each_object` only pushes to the `Vec<Found>` that `data`
        // points to, alive for the whole call.
        unsafe { libc::dl_iterate_phdr(Some(each_object), (&raw mut found).cast()) };
        let mut unwinder = UnwinderX86_64::new();
        let mut text = Vec::with_capacity(found.len());
        let mut stamp = (0, 0);
        for f in found {
            stamp = f.stamp;
            text.push(f.avma.clone());
            unwinder.add_module(Module::new(f.name, f.avma, f.bias, f.sections));
        }
        text.sort_by_key(|r| r.start);
        Objects {
            unwinder,
            text,
            stamp,
        }
    }

    /// One object found by the scan.
    struct Found {
        name: String,
        bias: u64,
        avma: Range<u64>,
        sections: ExplicitModuleSectionInfo<Vec<u8>>,
        stamp: (u64, u64),
    }

    unsafe extern "C" fn each_object(
        info: *mut libc::dl_phdr_info,
        size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid `info` for the duration of the
        // call; `data` is the `&mut Vec<Found>` given by `scan`.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<Vec<Found>>()) };
        // SAFETY: as above; `info` and its program headers describe an
        // object that stays loaded during the callback.
        if let Some(mut f) = unsafe { object(info) } {
            if size >= STAMP_END {
                f.stamp = (info.dlpi_adds, info.dlpi_subs);
            }
            found.push(f);
        }
        0
    }

    /// `info`'s executable range and unwind sections.
    ///
    /// # Safety
    ///
    /// `info` must come from `dl_iterate_phdr`, inside its callback.
    unsafe fn object(info: &libc::dl_phdr_info) -> Option<Found> {
        if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
            return None;
        }
        // SAFETY: the loader's program headers of a loaded object:
        // `dlpi_phnum` entries at `dlpi_phdr`.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
        let bias = info.dlpi_addr;
        let loads = || phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD);
        let exec = loads().filter(|p| p.p_flags & libc::PF_X != 0);
        let text = exec.fold(None, |acc: Option<Range<u64>>, p| {
            let (s, e) = (p.p_vaddr, p.p_vaddr + p.p_memsz);
            Some(acc.map_or(s..e, |a| a.start.min(s)..a.end.max(e)))
        })?;
        let hdr = phdrs.iter().find(|p| p.p_type == libc::PT_GNU_EH_FRAME)?;
        // The mapped (file-backed) part of the loaded segment holding `svma`.
        let mapped_end = |svma: u64| {
            loads()
                .find(|p| p.p_vaddr <= svma && svma < p.p_vaddr + p.p_filesz)
                .map(|p| p.p_vaddr + p.p_filesz)
        };
        let hdr_svma = hdr.p_vaddr..hdr.p_vaddr + hdr.p_memsz;
        if mapped_end(hdr_svma.start)? < hdr_svma.end || hdr.p_memsz < 8 {
            return None;
        }
        // SAFETY: the header lies in the file-backed part of a loaded
        // segment (checked above), mapped while the object is loaded.
        let hdr_bytes = unsafe { mapped(bias, &hdr_svma) }.to_vec();
        let eh_frame_start = eh_frame_address(&hdr_bytes, hdr_svma.start)?;
        // `.eh_frame_hdr` does not give `.eh_frame`'s length: take the rest
        // of its segment (FDEs are found through the header's table).
        let eh_frame_svma = eh_frame_start..mapped_end(eh_frame_start)?;
        // SAFETY: as above, within the file-backed part of a loaded segment.
        let eh_frame = unsafe { mapped(bias, &eh_frame_svma) }.to_vec();
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: the loader's NUL-terminated name of the object.
            unsafe { CStr::from_ptr(info.dlpi_name) }
                .to_string_lossy()
                .into_owned()
        };
        let avma = bias.checked_add(text.start)?..bias.checked_add(text.end)?;
        Some(Found {
            name,
            bias,
            avma,
            sections: ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: Some(text),
                eh_frame_svma: Some(eh_frame_svma),
                eh_frame: Some(eh_frame),
                eh_frame_hdr_svma: Some(hdr_svma),
                eh_frame_hdr: Some(hdr_bytes),
                ..Default::default()
            },
            stamp: (0, 0),
        })
    }

    /// The bytes of `svma` in an object loaded at `bias`.
    ///
    /// # Safety
    ///
    /// The range must be mapped and readable for the returned lifetime.
    unsafe fn mapped<'a>(bias: u64, svma: &Range<u64>) -> &'a [u8] {
        let start = bias.wrapping_add(svma.start) as *const u8;
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(start, (svma.end - svma.start) as usize) }
    }

    /// `.eh_frame`'s address from `.eh_frame_hdr` (version 1): its
    /// `eh_frame_ptr`, in the pointer encodings linkers use.
    fn eh_frame_address(hdr: &[u8], hdr_svma: u64) -> Option<u64> {
        const ABSPTR: u8 = 0x00;
        const UDATA4: u8 = 0x03;
        const UDATA8: u8 = 0x04;
        const SDATA4: u8 = 0x0b;
        const SDATA8: u8 = 0x0c;
        const PCREL: u8 = 0x10;
        let (&version, rest) = hdr.split_first()?;
        let (&enc, _) = rest.split_first()?;
        if version != 1 {
            return None;
        }
        let field = hdr.get(4..)?;
        let value = match enc & 0x0f {
            ABSPTR | UDATA8 | SDATA8 => u64::from_le_bytes(field.get(..8)?.try_into().ok()?),
            UDATA4 => u64::from(u32::from_le_bytes(field.get(..4)?.try_into().ok()?)),
            SDATA4 => i32::from_le_bytes(field.get(..4)?.try_into().ok()?) as i64 as u64,
            _ => return None,
        };
        match enc & 0x70 {
            0 => Some(value),
            PCREL => Some((hdr_svma + 4).wrapping_add(value)),
            _ => None,
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn eh_frame_pointer_encodings() {
            // pcrel | sdata4, the usual: -0x20 from the field at +4.
            let hdr = [1, 0x1b, 0x03, 0x3b, 0xe0, 0xff, 0xff, 0xff];
            assert_eq!(eh_frame_address(&hdr, 0x1000), Some(0x1000 + 4 - 0x20));
            let hdr = [1, 0x03, 0x03, 0x3b, 0x00, 0x20, 0x00, 0x00];
            assert_eq!(eh_frame_address(&hdr, 0x1000), Some(0x2000));
            assert_eq!(eh_frame_address(&[2, 0x1b, 0, 0, 0, 0, 0, 0], 0), None);
            assert_eq!(eh_frame_address(&[1, 0x1b, 0, 0, 0], 0), None);
        }

        #[test]
        fn the_scan_finds_this_test_binary_and_libc() {
            let objects = scan();
            assert!(objects.knows(super::super::capture as *const () as usize as u64));
            assert!(objects.knows(libc::malloc as *const () as usize as u64));
            assert!(!objects.knows(0x10));
            assert_ne!(objects.stamp, (0, 0));
            assert_eq!(loader_stamp(), objects.stamp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::capture;

    fn function_of(ip: usize) -> String {
        let mut name = String::new();
        // Return addresses: `resolve` looks up the call before them.
        backtrace::resolve(ip as *mut std::ffi::c_void, |sym| {
            if name.is_empty() {
                if let Some(n) = sym.name() {
                    name = format!("{n:#}");
                }
            }
        });
        name
    }

    #[inline(never)]
    fn innermost_call(ips: &mut [usize]) -> usize {
        let n = capture(ips).expect("the fast unwinder works on this target");
        std::hint::black_box(n)
    }

    #[inline(never)]
    fn middle_call(ips: &mut [usize]) -> usize {
        std::hint::black_box(innermost_call(ips))
    }

    #[test]
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn a_capture_resolves_to_the_calling_functions() {
        let mut ips = [0; 32];
        let n = middle_call(&mut ips);
        assert!(n >= 3, "{:x?}", &ips[..n]);
        let names: Vec<String> = ips[..n].iter().map(|&ip| function_of(ip)).collect();
        assert!(
            names[0].ends_with("unwind::tests::innermost_call"),
            "{names:#?}"
        );
        assert!(
            names[1].ends_with("unwind::tests::middle_call"),
            "{names:#?}"
        );
        assert!(
            names[2].ends_with("unwind::tests::a_capture_resolves_to_the_calling_functions"),
            "{names:#?}"
        );
    }

    /// The fast trace and `backtrace::trace` (libgcc) taken in the same
    /// function: `(fast, libgcc)`.
    #[inline(never)]
    fn both_traces() -> (Vec<usize>, Vec<usize>) {
        let mut ips = [0; 64];
        let n = capture(&mut ips).expect("the fast unwinder works on this target");
        let mut slow = Vec::new();
        backtrace::trace(|frame| {
            slow.push(frame.ip() as usize);
            slow.len() < 128
        });
        std::hint::black_box((ips[..n].to_vec(), slow))
    }

    #[inline(never)]
    fn nested(depth: usize) -> (Vec<usize>, Vec<usize>) {
        let r = if depth == 0 {
            both_traces()
        } else {
            nested(depth - 1)
        };
        std::hint::black_box(r)
    }

    #[test]
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn fast_trace_matches_libgcc_frame_for_frame() {
        for _ in 0..3 {
            // Twice from the same place: the second runs on cached rules.
            let (fast, slow) = nested(4);
            // fast[0] and one libgcc frame return into `both_traces` from
            // its two calls; every caller's frame after them is the same.
            assert!(function_of(fast[0]).ends_with("both_traces"), "{fast:x?}");
            let k = slow
                .iter()
                .position(|&ip| function_of(ip).ends_with("both_traces"))
                .expect("libgcc's trace passes through both_traces");
            let slow = &slow[k + 1..];
            let fast = &fast[1..];
            assert!(fast.len() >= 6, "{fast:x?}");
            assert_eq!(fast, &slow[..fast.len().min(slow.len())]);
            // Nothing but a root frame libgcc walks past and we do not.
            assert!(slow.len() <= fast.len() + 1, "{fast:x?} {slow:x?}");
        }
    }
}
