//! Many host threads using the vendor at once, each with its own device,
//! stream and buffers.

use dipu_deviceapi::DeviceApi;

use crate::check::{compare, ensure, ensure_eq, pattern, During, Fail, Verdict};
use crate::resources::{memcpy, DeviceBuffer, HostBuffer, OwnedStream};
use crate::{Check, Ctx};

const THREADS: usize = 8;

pub(crate) fn checks() -> Vec<Check> {
    vec![
        Check::new("threads::own_streams_at_once", own_streams_at_once),
        Check::new(
            "threads::allocate_and_free_at_once",
            allocate_and_free_at_once,
        ),
    ]
}

/// Runs `body(thread index)` on [`THREADS`] threads at once and returns the
/// first failure (a panic in a thread is a failure too).
fn on_threads(body: impl Fn(usize) -> Verdict + Sync) -> Verdict {
    let body = &body;
    let results: Vec<Verdict> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS).map(|t| s.spawn(move || body(t))).collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(t, h)| {
                h.join()
                    .unwrap_or_else(|_| Err(Fail(format!("thread {t} panicked"))))
            })
            .collect()
    });
    results.into_iter().collect()
}

/// Eight threads, each on device `t % count` with its own stream and
/// buffers, copy distinct patterns host → device → device → host, mixing
/// `memcpy_async` and `memcpy`, and verify every iteration.
fn own_streams_at_once(ctx: &Ctx<'_>) -> Verdict {
    const ITERATIONS: usize = 25;
    let api = ctx.api;
    let count = ctx.device_count;
    on_threads(|t| {
        let device = t as i32 % count;
        api.set_device(device)
            .during(format_args!("thread {t}: set_device({device})"))?;
        let len = 65536 + 17 * t;
        let stream = OwnedStream::new(api).during(format_args!("thread {t}: stream_create"))?;
        let a = DeviceBuffer::new(api, len).during(format_args!("thread {t}: malloc"))?;
        let b = DeviceBuffer::new(api, len).during(format_args!("thread {t}: malloc"))?;
        let src = HostBuffer::pinned(api, len).during(format_args!("thread {t}: malloc_host"))?;
        let dst = HostBuffer::pinned(api, len).during(format_args!("thread {t}: malloc_host"))?;
        for i in 0..ITERATIONS {
            let data = pattern((t * 1000 + i) as u64, len);
            src.write(0, &data);
            let what = format!("thread {t} (device {device}) iteration {i}");
            if i % 3 == 2 {
                memcpy(api, a.all(), src.all(), len).during(&what)?;
                memcpy(api, b.all(), a.all(), len).during(&what)?;
                memcpy(api, dst.all(), b.all(), len).during(&what)?;
            } else {
                stream.copy(a.all(), src.all(), len).during(&what)?;
                stream.copy(b.all(), a.all(), len).during(&what)?;
                stream.copy(dst.all(), b.all(), len).during(&what)?;
                stream.synchronize().during(&what)?;
            }
            compare(&dst.to_vec(), &data, &what)?;
            ensure_eq!(
                api.current_device().during(&what)?,
                device,
                "{what}: current_device (other threads chose other devices)"
            );
        }
        Ok(())
    })?;
    ctx.note(format!(
        "{THREADS} threads × {ITERATIONS} iterations on {count} device(s)"
    ));
    Ok(())
}

/// Eight threads allocate, use and free at once; every allocation is
/// private to its thread and the device's free memory comes back.
fn allocate_and_free_at_once(ctx: &Ctx<'_>) -> Verdict {
    const ROUNDS: usize = 40;
    let api: &dyn DeviceApi = ctx.api;
    let before = api.memory_info().during("memory_info")?;
    on_threads(|t| {
        for round in 0..ROUNDS {
            let len = 1 + (t * 977 + round * 131) % 20000;
            let buf =
                DeviceBuffer::new(api, len).during(format_args!("thread {t}: malloc({len})"))?;
            let value = (t * ROUNDS + round) as u8;
            buf.fill(value).during(format_args!("thread {t}: memset"))?;
            let got = buf
                .read_all()
                .during(format_args!("thread {t}: memcpy D2H"))?;
            ensure!(
                got.iter().all(|&b| b == value),
                "thread {t} round {round}: a private {len}-byte buffer set to {value} reads back otherwise"
            );
        }
        Ok(())
    })?;
    let after = api.memory_info().during("memory_info")?;
    ensure!(
        after.free >= before.free,
        "free memory on device 0 was {} before and {} after threads freed all they allocated",
        before.free,
        after.free
    );
    Ok(())
}
