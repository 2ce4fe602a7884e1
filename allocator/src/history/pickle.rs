//! The pickle (protocol 2) layout of a snapshot, as PyTorch's
//! `torch.cuda.memory._snapshot()` returns it: `{"segments": [...],
//! "device_traces": [[...], ...]}` with PyTorch's key names, states and
//! actions. Written and read with serde-pickle's value tree.

use std::collections::BTreeMap;
use std::sync::Arc;

use dipu_deviceapi::{Error, ErrorKind, Result};
use serde_pickle::{DeOptions, HashableValue, SerOptions, Value};

use super::{Action, Block, Frame, MemorySnapshot, Segment, TraceEntry};
use crate::BlockState;

fn int(n: impl TryInto<i64>) -> Result<Value> {
    n.try_into()
        .map(Value::I64)
        .map_err(|_| Error::invalid_argument("a number of the snapshot does not fit in 64 bits"))
}

fn dict(items: Vec<(&str, Value)>) -> Value {
    Value::Dict(
        items
            .into_iter()
            .map(|(k, v)| (HashableValue::String(k.to_owned()), v))
            .collect(),
    )
}

fn frames(frames: &[Frame]) -> Result<Value> {
    Ok(Value::List(
        frames
            .iter()
            .map(|f| {
                Ok(dict(vec![
                    ("filename", Value::String(f.filename.clone())),
                    ("line", int(f.line)?),
                    ("name", Value::String(f.name.clone())),
                ]))
            })
            .collect::<Result<_>>()?,
    ))
}

fn state_name(state: BlockState) -> &'static str {
    match state {
        BlockState::Allocated => "active_allocated",
        BlockState::Free => "inactive",
        BlockState::Pending => "active_pending_free",
    }
}

impl MemorySnapshot {
    /// The snapshot as pickle bytes (protocol 2) in PyTorch's layout.
    pub fn to_pickle(&self) -> Result<Vec<u8>> {
        let mut segments = Vec::with_capacity(self.segments.len());
        for s in &self.segments {
            let mut blocks = Vec::with_capacity(s.blocks.len());
            for b in &s.blocks {
                blocks.push(dict(vec![
                    ("address", int(b.address)?),
                    ("size", int(b.size)?),
                    ("requested_size", int(b.requested_size)?),
                    ("state", Value::String(state_name(b.state).into())),
                    ("frames", frames(&b.frames)?),
                ]));
            }
            let allocated = s.bytes_in(BlockState::Allocated);
            let active = allocated + s.bytes_in(BlockState::Pending);
            let requested: usize = s.blocks.iter().map(|b| b.requested_size).sum();
            segments.push(dict(vec![
                ("device", int(s.device)?),
                ("address", int(s.address)?),
                ("total_size", int(s.total_size)?),
                ("allocated_size", int(allocated)?),
                ("active_size", int(active)?),
                ("requested_size", int(requested)?),
                ("stream", int(s.stream)?),
                ("segment_type", Value::String(s.pool.clone())),
                (
                    "segment_pool_id",
                    Value::Tuple(vec![Value::I64(0), Value::I64(0)]),
                ),
                ("is_expandable", Value::Bool(false)),
                ("frames", Value::List(Vec::new())),
                ("blocks", Value::List(blocks)),
            ]));
        }
        let mut traces = Vec::with_capacity(self.device_traces.len());
        for device in &self.device_traces {
            let mut events = Vec::with_capacity(device.len());
            for e in device {
                let mut items = vec![
                    ("action", Value::String(e.action.as_str().into())),
                    ("addr", int(e.addr)?),
                    ("size", int(e.size)?),
                    ("stream", int(e.stream)?),
                    ("time_us", int(e.time_us)?),
                    ("frames", frames(&e.frames)?),
                ];
                if e.action == Action::Oom {
                    items.push(("device_free", Value::I64(0)));
                }
                events.push(dict(items));
            }
            traces.push(Value::List(events));
        }
        let root = dict(vec![
            ("segments", Value::List(segments)),
            ("device_traces", Value::List(traces)),
        ]);
        serde_pickle::value_to_vec(&root, SerOptions::new().proto_v2())
            .map_err(|e| Error::new(ErrorKind::Internal, format!("writing the pickle: {e}")))
    }

    /// Reads a snapshot from pickle bytes in PyTorch's layout (ours, or one
    /// `torch.cuda.memory._dump_snapshot` wrote). Anything else is an
    /// `InvalidArgument` error naming what is wrong.
    pub fn from_pickle(bytes: &[u8]) -> Result<MemorySnapshot> {
        let root =
            serde_pickle::value_from_slice(bytes, DeOptions::new().replace_unresolved_globals())
                .map_err(|e| Error::invalid_argument(format!("not a pickle: {e}")))?;
        let root = as_dict(&root, "the snapshot")?;
        let mut segments = Vec::new();
        for s in as_list(get(root, "segments", "the snapshot")?, "segments")? {
            let s = as_dict(s, "a segment")?;
            let mut blocks = Vec::new();
            let mut address = as_usize(get(s, "address", "a segment")?, "segment address")?;
            for b in as_list(get(s, "blocks", "a segment")?, "blocks")? {
                let b = as_dict(b, "a block")?;
                let size = as_usize(get(b, "size", "a block")?, "block size")?;
                let state = match as_str(get(b, "state", "a block")?, "block state")? {
                    "active_allocated" => BlockState::Allocated,
                    "active_pending_free" => BlockState::Pending,
                    "inactive" => BlockState::Free,
                    other => return Err(bad(format!("block state {other:?}"))),
                };
                let block_addr = match opt(b, "address") {
                    Some(v) => as_usize(v, "block address")?,
                    None => address,
                };
                blocks.push(Block {
                    address: block_addr,
                    size,
                    requested_size: match opt(b, "requested_size") {
                        Some(v) => as_usize(v, "requested_size")?,
                        None => 0,
                    },
                    state,
                    frames: read_frames(opt(b, "frames"))?,
                });
                address = block_addr + size;
            }
            segments.push(Segment {
                device: as_i64(get(s, "device", "a segment")?, "device")? as i32,
                address: as_usize(get(s, "address", "a segment")?, "segment address")?,
                total_size: as_usize(get(s, "total_size", "a segment")?, "total_size")?,
                stream: opt(s, "stream").map_or(Ok(0), |v| as_i64(v, "stream"))? as u32,
                pool: match opt(s, "segment_type") {
                    Some(v) => as_str(v, "segment_type")?.to_owned(),
                    None => String::new(),
                },
                blocks,
            });
        }
        let mut device_traces = Vec::new();
        if let Some(traces) = opt(root, "device_traces") {
            for device in as_list(traces, "device_traces")? {
                let mut events = Vec::new();
                for e in as_list(device, "a device's trace")? {
                    let e = as_dict(e, "a trace entry")?;
                    let name = as_str(get(e, "action", "a trace entry")?, "action")?;
                    // Actions we do not draw (snapshot, annotate) are skipped.
                    let Some(action) = Action::from_name(name) else {
                        continue;
                    };
                    events.push(TraceEntry {
                        action,
                        addr: opt(e, "addr").map_or(Ok(0), |v| as_usize(v, "addr"))?,
                        size: as_usize(get(e, "size", "a trace entry")?, "size")?,
                        stream: opt(e, "stream").map_or(Ok(0), |v| as_i64(v, "stream"))? as u32,
                        time_us: opt(e, "time_us").map_or(Ok(0), |v| as_usize(v, "time_us"))?
                            as u64,
                        frames: read_frames(opt(e, "frames"))?,
                    });
                }
                device_traces.push(events);
            }
        }
        Ok(MemorySnapshot {
            segments,
            device_traces,
        })
    }
}

type Dict = BTreeMap<HashableValue, Value>;

fn bad(what: String) -> Error {
    Error::invalid_argument(format!("not a memory snapshot: {what}"))
}

fn opt<'a>(d: &'a Dict, key: &str) -> Option<&'a Value> {
    d.get(&HashableValue::String(key.to_owned()))
}

fn get<'a>(d: &'a Dict, key: &str, what: &str) -> Result<&'a Value> {
    opt(d, key).ok_or_else(|| bad(format!("{what} has no {key:?}")))
}

fn as_dict<'a>(v: &'a Value, what: &str) -> Result<&'a Dict> {
    match v {
        Value::Dict(d) => Ok(d),
        _ => Err(bad(format!("{what} is not a dict"))),
    }
}

fn as_list<'a>(v: &'a Value, what: &str) -> Result<&'a [Value]> {
    match v {
        Value::List(l) | Value::Tuple(l) => Ok(l),
        _ => Err(bad(format!("{what} is not a list"))),
    }
}

fn as_str<'a>(v: &'a Value, what: &str) -> Result<&'a str> {
    match v {
        Value::String(s) => Ok(s),
        _ => Err(bad(format!("{what} is not a string"))),
    }
}

fn as_i64(v: &Value, what: &str) -> Result<i64> {
    match v {
        Value::I64(n) => Ok(*n),
        Value::Bool(b) => Ok(*b as i64),
        _ => Err(bad(format!("{what} is not an integer"))),
    }
}

fn as_usize(v: &Value, what: &str) -> Result<usize> {
    usize::try_from(as_i64(v, what)?).map_err(|_| bad(format!("{what} is negative")))
}

fn read_frames(v: Option<&Value>) -> Result<Arc<[Frame]>> {
    let Some(v) = v else {
        return Ok(Arc::from(Vec::new()));
    };
    let mut out = Vec::new();
    for f in as_list(v, "frames")? {
        let f = as_dict(f, "a frame")?;
        out.push(Frame {
            name: opt(f, "name")
                .map_or(Ok(""), |v| as_str(v, "frame name"))?
                .to_owned(),
            filename: opt(f, "filename")
                .map_or(Ok(""), |v| as_str(v, "frame filename"))?
                .to_owned(),
            line: opt(f, "line").map_or(Ok(0), |v| as_i64(v, "frame line"))? as u32,
        });
    }
    Ok(Arc::from(out))
}
