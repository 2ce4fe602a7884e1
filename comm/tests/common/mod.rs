//! Shared helpers of the process-group tests: a runtime on the host vendor
//! with 4 devices, ranks as threads, and typed buffers.

#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dipu_comm::store::{HashStore, Store};
use dipu_comm::{Buffer, Options, ProcessGroup};
use dipu_deviceapi::DataType;
use dipu_runtime::{DeviceBuffer, Runtime, RuntimeOptions};
use half::{bf16, f16};

/// One runtime for the whole test binary: the host vendor with 4 devices,
/// so 4 thread ranks each get their own device; or, when `DIPU_VENDOR` is
/// set, that vendor (CI runs these tests on the fake Ascend this way).
/// With `DIPU_HOST_COLLECTIVES=0` the host vendor hides its collectives and
/// the process group stages them through host memory.
pub fn runtime() -> Arc<Runtime> {
    static RT: OnceLock<Arc<Runtime>> = OnceLock::new();
    Arc::clone(RT.get_or_init(|| {
        let rt = if std::env::var_os("DIPU_VENDOR").is_some() {
            Runtime::new(RuntimeOptions::from_env()).expect("the DIPU_VENDOR runtime")
        } else {
            // SAFETY: set once, before the vendor reads it, by the first
            // test to get here (under the OnceLock's initialisation lock).
            std::env::set_var("DIPU_HOST_DEVICES", "4");
            Runtime::new(RuntimeOptions::default()).expect("the host vendor runtime")
        };
        if std::env::var("DIPU_HOST_COLLECTIVES").is_ok_and(|v| v.trim() == "0") {
            assert!(
                !rt.api()
                    .capabilities()
                    .contains(dipu_deviceapi::Capabilities::COLLECTIVES),
                "DIPU_HOST_COLLECTIVES=0, yet the vendor reports collectives"
            );
        }
        rt
    }))
}

/// Runs `f` on `n` thread ranks sharing an in-memory store; rank r uses
/// device r. Returns each rank's result in rank order.
pub fn with_ranks<R: Send>(
    n: i32,
    options: Options,
    f: impl Fn(&ProcessGroup) -> R + Sync,
) -> Vec<R> {
    let rt = runtime();
    let store: Arc<dyn Store> = Arc::new(HashStore::new());
    store.set_timeout(Duration::from_secs(20));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let (rt, store, f, options) =
                    (Arc::clone(&rt), Arc::clone(&store), &f, options.clone());
                s.spawn(move || {
                    rt.set_device(rank).unwrap();
                    // Each rank its own current stream: ranks of tests running
                    // at once must not share a device's default stream (one
                    // test's waits would order another's collectives).
                    let stream = rt.context().new_stream(rank, 0).unwrap();
                    rt.context().set_current_stream(stream);
                    let collectives = rt
                        .api()
                        .capabilities()
                        .contains(dipu_deviceapi::Capabilities::COLLECTIVES);
                    let pg = ProcessGroup::new(rt, store, rank, n, rank, options).unwrap();
                    assert_eq!(
                        pg.host_staged(),
                        !collectives,
                        "host-staged exactly when the vendor has no collectives"
                    );
                    f(&pg)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Options with a short timeout for tests (the rest from the environment,
/// such as `DIPU_COMM_STAGED_TRANSPORT`).
pub fn quick() -> Options {
    options().with_timeout(Duration::from_secs(20))
}

/// The options the environment sets (`Options::from_env`).
pub fn options() -> Options {
    Options::from_env().expect("valid DIPU_COMM_* variables")
}

/// Encodes `values` as `dtype` elements (values must be representable).
pub fn encode(dtype: DataType, values: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * dtype.size_in_bytes());
    for &v in values {
        match dtype {
            DataType::F16 => out.extend(f16::from_f64(v).to_le_bytes()),
            DataType::BF16 => out.extend(bf16::from_f64(v).to_le_bytes()),
            DataType::F32 => out.extend((v as f32).to_le_bytes()),
            DataType::F64 => out.extend(v.to_le_bytes()),
            DataType::I8 => out.extend((v as i8).to_le_bytes()),
            DataType::U8 => out.extend((v as u8).to_le_bytes()),
            DataType::I16 => out.extend((v as i16).to_le_bytes()),
            DataType::I32 => out.extend((v as i32).to_le_bytes()),
            DataType::I64 => out.extend((v as i64).to_le_bytes()),
            DataType::U32 => out.extend((v as u32).to_le_bytes()),
            DataType::U64 => out.extend((v as u64).to_le_bytes()),
            other => panic!("no encoding for {other:?}"),
        }
    }
    out
}

/// Decodes `dtype` elements to f64.
pub fn decode(dtype: DataType, bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(dtype.size_in_bytes())
        .map(|b| match dtype {
            DataType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
            DataType::BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f64(),
            DataType::F32 => f64::from(f32::from_le_bytes(b.try_into().unwrap())),
            DataType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
            DataType::I8 => f64::from(b[0] as i8),
            DataType::U8 => f64::from(b[0]),
            DataType::I16 => f64::from(i16::from_le_bytes(b.try_into().unwrap())),
            DataType::I32 => f64::from(i32::from_le_bytes(b.try_into().unwrap())),
            DataType::I64 => i64::from_le_bytes(b.try_into().unwrap()) as f64,
            DataType::U32 => f64::from(u32::from_le_bytes(b.try_into().unwrap())),
            DataType::U64 => u64::from_le_bytes(b.try_into().unwrap()) as f64,
            other => panic!("no decoding for {other:?}"),
        })
        .collect()
}

/// A device buffer on the group's device holding `values` as `dtype`.
pub fn upload(pg: &ProcessGroup, dtype: DataType, values: &[f64]) -> (DeviceBuffer, Buffer) {
    let bytes = encode(dtype, values);
    let rt = runtime();
    let stream = rt.context().current_stream(pg.device()).unwrap();
    let dev = rt.allocate(bytes.len().max(1), stream).unwrap();
    dev.copy_from_host(&bytes, None).unwrap();
    let buffer = Buffer::from_device_buffer(&dev, dtype)
        .unwrap()
        .slice(0, values.len())
        .unwrap();
    (dev, buffer)
}

/// A zeroed device buffer of `count` elements.
pub fn zeros(pg: &ProcessGroup, dtype: DataType, count: usize) -> (DeviceBuffer, Buffer) {
    upload(pg, dtype, &vec![0.0; count])
}

/// The elements of `buffer`, read on the caller's current stream (so after
/// a `Work::wait`).
pub fn download(dev: &DeviceBuffer, buffer: &Buffer) -> Vec<f64> {
    let mut bytes = vec![0u8; dev.len()];
    dev.copy_to_host(&mut bytes, None).unwrap();
    decode(buffer.dtype(), &bytes[..buffer.bytes()])
}

/// A small positive value that depends on rank and index, exact in every type.
pub fn value(rank: i32, i: usize) -> f64 {
    (1 + (rank as usize * 7 + i) % 3) as f64
}

/// The reference result of reducing `value(r, i)` over `n` ranks with `op`.
pub fn reference(op: dipu_deviceapi::ReduceOp, dtype: DataType, n: i32, i: usize) -> f64 {
    use dipu_deviceapi::ReduceOp;
    let vals = (0..n).map(|r| value(r, i));
    let integer = !matches!(
        dtype,
        DataType::F16 | DataType::BF16 | DataType::F32 | DataType::F64
    );
    match op {
        ReduceOp::Sum => vals.sum(),
        ReduceOp::Prod => vals.product(),
        ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
        ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Avg => {
            let sum: f64 = vals.sum();
            if integer {
                (sum / f64::from(n)).trunc()
            } else {
                sum / f64::from(n)
            }
        }
        other => panic!("no reference for {other:?}"),
    }
}

/// All-reduce with every data type and operator, `count` elements each,
/// checked against [`reference`] (waits on the host).
pub fn all_reduce_every_type_and_op(pg: &ProcessGroup, count: usize) {
    use dipu_deviceapi::ReduceOp;
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            let mine: Vec<f64> = (0..count).map(|i| value(pg.rank(), i)).collect();
            let (dev, buf) = upload(pg, dtype, &mine);
            let work = pg.all_reduce(&buf, op).unwrap();
            work.wait_host(quick().timeout).unwrap();
            let got = download(&dev, &buf);
            for (i, g) in got.iter().enumerate() {
                let want = reference(op, dtype, pg.world_size(), i);
                assert_eq!(
                    *g,
                    want,
                    "{} ranks, {dtype:?} {op:?}, element {i}",
                    pg.world_size()
                );
            }
        }
    }
}
