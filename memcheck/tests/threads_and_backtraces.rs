//! Reports name the allocating and freeing threads (named or not) and,
//! with backtraces on, the allocating functions; a double free shows the
//! first free's thread and backtrace. (A test binary of its own: the
//! checker's state is per process, and the tests here run one at a time
//! through a lock.)

use std::sync::Mutex;

use dipu_memcheck::{on_alloc, on_bad_free, on_free, report, Location, MemCheck};

static SERIAL: Mutex<()> = Mutex::new(());

#[inline(never)]
fn allocate_in_named_function(ptr: usize) {
    on_alloc(ptr, 512, Location::Device(1), None);
    std::hint::black_box(ptr);
}

#[inline(never)]
fn free_in_named_function(ptr: usize) {
    on_free(ptr);
    std::hint::black_box(ptr);
}

#[test]
fn reports_name_the_threads_and_the_allocating_function() {
    let _serial = SERIAL.lock().unwrap();
    MemCheck::clear();
    MemCheck::enable(true);
    let (named, unnamed) = (0x5100_0000usize, 0x5200_0000usize);
    std::thread::Builder::new()
        .name("memcheck-worker".into())
        .spawn(move || allocate_in_named_function(named))
        .unwrap()
        .join()
        .unwrap();
    std::thread::spawn(move || on_alloc(unnamed, 64, Location::Host, None))
        .join()
        .unwrap();
    let r = report();
    MemCheck::disable();
    MemCheck::clear();
    let text = r.to_string();
    let block = |ptr: usize| {
        r.groups
            .iter()
            .flat_map(|g| &g.blocks)
            .find(|b| b.ptr == ptr)
            .unwrap_or_else(|| panic!("{ptr:#x} not in {text}"))
            .clone()
    };
    let b = block(named);
    assert!(b.thread.starts_with("memcheck-worker (ThreadId("), "{b:?}");
    assert_eq!((b.size, b.location), (512, Location::Device(1)));
    let b = block(unnamed);
    assert!(b.thread.starts_with("<unnamed> (ThreadId("), "{b:?}");
    let group = r
        .groups
        .iter()
        .find(|g| g.blocks.iter().any(|b| b.ptr == named))
        .unwrap();
    assert!(
        group.frames[0]
            .function
            .ends_with("threads_and_backtraces::allocate_in_named_function"),
        "{text}"
    );
    // `cargo test` runs this in the crate's folder: the frame names this
    // file relative to it, not by the machine's directories.
    assert_eq!(
        group.frames[0].file.as_deref(),
        Some("tests/threads_and_backtraces.rs"),
        "{text}"
    );
}

#[test]
fn a_double_free_shows_the_first_free_with_its_thread_and_backtrace() {
    let _serial = SERIAL.lock().unwrap();
    MemCheck::clear();
    MemCheck::enable(true);
    let ptr = 0x5300_0000usize;
    allocate_in_named_function(ptr);
    std::thread::Builder::new()
        .name("first-freer".into())
        .spawn(move || free_in_named_function(ptr))
        .unwrap()
        .join()
        .unwrap();
    let err = on_bad_free(ptr, dipu_deviceapi::Error::invalid_argument("freed twice"));
    MemCheck::disable();
    MemCheck::clear();
    let message = err.to_string();
    assert!(message.contains("already freed"), "{message}");
    assert!(
        message.contains("by thread first-freer (ThreadId("),
        "{message}"
    );
    let first_freed = message.find("first freed at:").expect(&message);
    let allocated = message.find("allocated at:").expect(&message);
    assert!(
        message[first_freed..allocated].contains("free_in_named_function"),
        "{message}"
    );
    assert!(
        message[allocated..].contains("allocate_in_named_function"),
        "{message}"
    );
}

#[inline(never)]
fn leak_from_worker(ptr: usize) {
    on_alloc(ptr, 64, Location::Device(0), None);
    std::hint::black_box(ptr);
}

#[test]
fn eight_threads_capture_at_once_and_every_trace_names_its_caller() {
    let _serial = SERIAL.lock().unwrap();
    MemCheck::clear();
    MemCheck::enable(true);
    let base = 0x5400_0000usize;
    std::thread::scope(|s| {
        for t in 0..8usize {
            s.spawn(move || {
                for i in 0..500usize {
                    let ptr = base + (t * 1000 + i) * 256;
                    if i % 5 == 0 {
                        // Kept: reported with its backtrace.
                        leak_from_worker(ptr);
                    } else {
                        allocate_in_named_function(ptr);
                        free_in_named_function(ptr);
                    }
                }
            });
        }
    });
    let r = report();
    MemCheck::disable();
    MemCheck::clear();
    assert_eq!(r.blocks, 8 * 100);
    // One call site: one group, whose innermost frame is that function.
    assert_eq!(r.groups.len(), 1, "{r}");
    let frames = &r.groups[0].frames;
    assert!(
        frames[0]
            .function
            .ends_with("threads_and_backtraces::leak_from_worker"),
        "{r}"
    );
}
