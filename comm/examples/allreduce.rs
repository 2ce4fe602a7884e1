//! Every rank all-reduces a buffer and checks the sum: the two-process
//! example of docs/distributed.md. Rendezvous is torch's `env://`: run it
//! under `torchrun --no-python`, or set `MASTER_ADDR`, `MASTER_PORT`,
//! `RANK` and `WORLD_SIZE` by hand. The vendor is `DIPU_VENDOR` (default:
//! the built-in host vendor).

use std::sync::Arc;
use std::time::Duration;

use dipu_comm::store::{EnvRendezvous, Store};
use dipu_comm::{Buffer, Options, ProcessGroup};
use dipu_deviceapi::{DataType, ReduceOp, Result};
use dipu_runtime::RuntimeOptions;

fn main() -> Result<()> {
    let runtime = dipu_runtime::init(RuntimeOptions::default())?;
    let rendezvous = EnvRendezvous::from_env()?;
    let store: Arc<dyn Store> = Arc::new(rendezvous.store(Duration::from_secs(60))?);
    let (rank, world) = (rendezvous.rank as i32, rendezvous.world_size as i32);
    // torchrun numbers the ranks of one machine in LOCAL_RANK: one device each.
    let local: i32 = std::env::var("LOCAL_RANK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(rank);
    let device = local % runtime.device_count();
    let group = ProcessGroup::new(
        Arc::clone(&runtime),
        store,
        rank,
        world,
        device,
        Options::from_env()?,
    )?;

    // Each rank contributes rank + 1 in every element.
    let count = 1 << 20;
    let stream = runtime.context().current_stream(device)?;
    let memory = runtime.allocate(count * 4, stream)?;
    let mine: Vec<u8> = std::iter::repeat_n((rank as f32 + 1.0).to_le_bytes(), count)
        .flatten()
        .collect();
    memory.copy_from_host(&mine, None)?;
    let buffer = Buffer::from_device_buffer(&memory, DataType::F32)?;

    let work = group.all_reduce(&buffer, ReduceOp::Sum)?;
    work.wait_host(Duration::from_secs(60))?;

    let mut result = vec![0u8; count * 4];
    memory.copy_to_host(&mut result, None)?;
    let want = (world * (world + 1) / 2) as f32;
    let wrong = result
        .chunks_exact(4)
        .filter(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) != want)
        .count();
    let took = work.duration().unwrap_or_default();
    println!(
        "rank {rank} of {world} (device {device}): all_reduce of {} MiB: {} (every element {want}), {:.3} ms on the device",
        (count * 4) >> 20,
        if wrong == 0 { "ok" } else { "WRONG" },
        took.as_secs_f64() * 1e3
    );
    group.barrier()?;
    if wrong != 0 {
        std::process::exit(1);
    }
    Ok(())
}
