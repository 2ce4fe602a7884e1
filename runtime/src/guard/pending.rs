//! The frees whose guards are being copied back, queued per stream in the
//! order their copies were queued there: copies on one stream complete in
//! that order, so only the front of each queue is ever polled, and a long
//! queue behind a busy stream costs one query per stream, not one per
//! block.

use std::collections::VecDeque;

use dipu_stream::Stream;

use super::Pending;

/// The pending frees of one device.
#[derive(Default)]
pub(super) struct PendingFrees {
    /// One queue per stream with copies pending (few streams: a list).
    queues: Vec<(Stream, VecDeque<Pending>)>,
}

impl PendingFrees {
    /// Queues `p` behind the earlier copies on its stream.
    pub(super) fn push(&mut self, p: Pending) {
        let stream = p.live.stream;
        match self.queues.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, q)) => q.push_back(p),
            None => self.queues.push((stream, VecDeque::from([p]))),
        }
    }

    /// Whether no copy is pending.
    pub(super) fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Every pending free, stream by stream.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Pending> {
        self.queues.iter().flat_map(|(_, q)| q)
    }

    /// Takes every pending free out.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = Pending> {
        std::mem::take(&mut self.queues)
            .into_iter()
            .flat_map(|(_, q)| q)
    }

    /// Takes out, in order, the fronts of each stream's queue for which
    /// `ready` answers `Ok(true)`, and stops at each stream's first
    /// `Ok(false)`; the first error ends the walk (what was taken so far
    /// is returned with it).
    pub(super) fn take_ready(
        &mut self,
        mut ready: impl FnMut(&Pending) -> dipu_deviceapi::Result<bool>,
    ) -> (Vec<Pending>, dipu_deviceapi::Result<()>) {
        let mut taken = Vec::new();
        let mut result = Ok(());
        'streams: for (_, queue) in &mut self.queues {
            while let Some(front) = queue.front() {
                match ready(front) {
                    Ok(true) => taken.extend(queue.pop_front()),
                    Ok(false) => break,
                    Err(e) => {
                        result = Err(e);
                        break 'streams;
                    }
                }
            }
        }
        self.queues.retain(|(_, q)| !q.is_empty());
        (taken, result)
    }
}
