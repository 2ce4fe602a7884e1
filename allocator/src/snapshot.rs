//! A snapshot of every segment and block, and its JSON form.

use std::fmt::Write;

/// One block of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    /// Address.
    pub address: usize,
    /// Bytes.
    pub size: usize,
    /// `allocated`, `free`, or `pending` (freed, waiting for other streams).
    pub state: BlockState,
    /// Bytes the user asked for (0 when free).
    pub requested: usize,
}

/// The state of a block in a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out.
    Allocated,
    /// Cached, reusable.
    Free,
    /// Freed by its user, waiting for other streams' work before reuse.
    Pending,
}

impl BlockState {
    fn as_str(self) -> &'static str {
        match self {
            BlockState::Allocated => "allocated",
            BlockState::Free => "free",
            BlockState::Pending => "pending",
        }
    }
}

/// One segment (memory from one vendor allocation, or one expandable range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Device.
    pub device: i32,
    /// Start address.
    pub address: usize,
    /// Bytes reserved.
    pub size: usize,
    /// The stream the segment serves (its id as a number).
    pub stream: u32,
    /// A pool name (`small`, `large`, a bin) or the algorithm's name.
    pub pool: String,
    /// Its blocks, by address.
    pub blocks: Vec<BlockInfo>,
}

/// Every segment of a device allocator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The segments, by address.
    pub segments: Vec<SegmentInfo>,
}

impl Snapshot {
    /// Bytes reserved in all segments.
    pub fn reserved(&self) -> usize {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// Bytes of blocks in `state`.
    pub fn bytes_in(&self, state: BlockState) -> usize {
        self.segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == state)
            .map(|b| b.size)
            .sum()
    }

    /// The snapshot as JSON: `{"segments":[{"device":0,"address":..,"size":..,
    /// "stream":..,"pool":"..","blocks":[{"address":..,"size":..,"state":"..",
    /// "requested":..}]}]}`.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\"segments\":[");
        for (i, s) in self.segments.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"device\":{},\"address\":{},\"size\":{},\"stream\":{},\"pool\":\"{}\",\"blocks\":[",
                s.device,
                s.address,
                s.size,
                s.stream,
                s.pool.replace(['"', '\\'], "")
            );
            for (j, b) in s.blocks.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                let _ = write!(
                    out,
                    "{{\"address\":{},\"size\":{},\"state\":\"{}\",\"requested\":{}}}",
                    b.address,
                    b.size,
                    b.state.as_str(),
                    b.requested
                );
            }
            out.push_str("]}");
        }
        out.push_str("]}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lists_segments_and_blocks() {
        let snap = Snapshot {
            segments: vec![SegmentInfo {
                device: 1,
                address: 4096,
                size: 1024,
                stream: 0,
                pool: "large".into(),
                blocks: vec![
                    BlockInfo {
                        address: 4096,
                        size: 512,
                        state: BlockState::Allocated,
                        requested: 500,
                    },
                    BlockInfo {
                        address: 4608,
                        size: 512,
                        state: BlockState::Free,
                        requested: 0,
                    },
                ],
            }],
        };
        assert_eq!(
            snap.to_json(),
            "{\"segments\":[{\"device\":1,\"address\":4096,\"size\":1024,\"stream\":0,\"pool\":\"large\",\"blocks\":[\
             {\"address\":4096,\"size\":512,\"state\":\"allocated\",\"requested\":500},\
             {\"address\":4608,\"size\":512,\"state\":\"free\",\"requested\":0}]}]}"
        );
        assert_eq!(
            (snap.reserved(), snap.bytes_in(BlockState::Free)),
            (1024, 512)
        );
    }
}
