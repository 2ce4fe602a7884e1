//! What a memory snapshot holds: segments with their blocks, and each
//! device's recorded events (PyTorch's names for states and actions).

use std::collections::HashMap;
use std::sync::Arc;

use super::{Context, DeviceLog};
use crate::{BlockState, DeviceAllocator};

/// What happened in a recorded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Memory handed out (`alloc`).
    Alloc,
    /// The user gave it back (`free_requested`).
    FreeRequested,
    /// The allocator took it back (`free_completed`).
    FreeCompleted,
    /// A segment reserved from the vendor (`segment_alloc`).
    SegmentAlloc,
    /// A segment given back to the vendor (`segment_free`).
    SegmentFree,
    /// An allocation that ran out of memory (`oom`).
    Oom,
}

impl Action {
    /// PyTorch's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::Oom => "oom",
        }
    }

    /// The action PyTorch names `name`.
    pub fn from_name(name: &str) -> Option<Action> {
        [
            Action::Alloc,
            Action::FreeRequested,
            Action::FreeCompleted,
            Action::SegmentAlloc,
            Action::SegmentFree,
            Action::Oom,
        ]
        .into_iter()
        .find(|a| a.as_str() == name)
    }
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame {
    /// The function.
    pub name: String,
    /// Its source file ("" when unknown).
    pub filename: String,
    /// Its line (0 when unknown).
    pub line: u32,
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// What happened.
    pub action: Action,
    /// The address (of the block or segment; 0 for `oom`).
    pub addr: usize,
    /// Bytes (requested for blocks, reserved for segments).
    pub size: usize,
    /// The stream's id (0 when not known).
    pub stream: u32,
    /// When, in microseconds since the Unix epoch.
    pub time_us: u64,
    /// The stack, innermost first (empty without stacks).
    pub frames: Arc<[Frame]>,
}

/// One block of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Address.
    pub address: usize,
    /// Bytes.
    pub size: usize,
    /// Bytes the user asked for (0 when not allocated).
    pub requested_size: usize,
    /// `Allocated`, `Free` (PyTorch's `inactive`), `Pending` (`active_pending_free`).
    pub state: BlockState,
    /// The stack of its allocation, when recorded.
    pub frames: Arc<[Frame]>,
}

/// One segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Device.
    pub device: i32,
    /// Start address.
    pub address: usize,
    /// Bytes reserved.
    pub total_size: usize,
    /// The stream it serves.
    pub stream: u32,
    /// Its pool (`small`, `large`, a bin, or the algorithm).
    pub pool: String,
    /// Its blocks by address; their sizes add up to `total_size`.
    pub blocks: Vec<Block>,
}

impl Segment {
    /// Bytes of blocks in `state`.
    pub fn bytes_in(&self, state: BlockState) -> usize {
        self.blocks
            .iter()
            .filter(|b| b.state == state)
            .map(|b| b.size)
            .sum()
    }
}

/// Segments, blocks and recorded events of every device at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemorySnapshot {
    /// Every segment, by device then address.
    pub segments: Vec<Segment>,
    /// Each device's events, oldest first (index = device).
    pub device_traces: Vec<Vec<TraceEntry>>,
}

impl MemorySnapshot {
    /// Number of events over all devices.
    pub fn events(&self) -> usize {
        self.device_traces.iter().map(Vec::len).sum()
    }
}

/// The snapshot of `allocators` with the events of `logs`.
pub(crate) fn build<'a>(
    allocators: impl IntoIterator<Item = &'a dyn DeviceAllocator>,
    logs: &[Arc<DeviceLog>],
) -> MemorySnapshot {
    let devices = logs.iter().map(|l| l.device + 1).max().unwrap_or(0).max(0) as usize;
    let mut traces: Vec<Vec<TraceEntry>> = vec![Vec::new(); devices];
    let mut stacks: HashMap<(i32, usize), Arc<[Frame]>> = HashMap::new();
    let empty: Arc<[Frame]> = Arc::from(Vec::new());
    let mut resolved = HashMap::new();
    for log in logs {
        // Copied out first: a frame source names its frames outside the
        // log's lock (it may wait for the framework's own lock).
        let entries: Vec<(Action, usize, usize, u32, u64, Context)> = {
            let st = log.state.lock();
            st.entries
                .iter()
                .map(|r| {
                    (
                        r.action,
                        r.addr,
                        r.size,
                        r.stream,
                        r.time_us,
                        r.context.clone(),
                    )
                })
                .collect()
        };
        let out = &mut traces[log.device as usize];
        for (action, addr, size, stream, time_us, context) in entries {
            let frames = context.frames(&mut resolved);
            let frames = if frames.is_empty() {
                Arc::clone(&empty)
            } else {
                Arc::from(frames)
            };
            if action == Action::Alloc {
                stacks.insert((log.device, addr), Arc::clone(&frames));
            }
            out.push(TraceEntry {
                action,
                addr,
                size,
                stream,
                time_us,
                frames,
            });
        }
    }
    let mut segments = Vec::new();
    for alloc in allocators {
        for s in alloc.snapshot().segments {
            let blocks = s
                .blocks
                .iter()
                .map(|b| Block {
                    address: b.address,
                    size: b.size,
                    requested_size: b.requested,
                    state: b.state,
                    frames: match b.state {
                        BlockState::Free => Arc::clone(&empty),
                        _ => stacks
                            .get(&(s.device, b.address))
                            .map_or_else(|| Arc::clone(&empty), Arc::clone),
                    },
                })
                .collect();
            segments.push(Segment {
                device: s.device,
                address: s.address,
                total_size: s.size,
                stream: s.stream,
                pool: s.pool,
                blocks,
            });
        }
    }
    segments.sort_by_key(|s| (s.device, s.address));
    MemorySnapshot {
        segments,
        device_traces: traces,
    }
}
