//! The frees whose guards are being copied back, queued per stream in the
//! order their copies were queued there: copies on one stream complete in
//! that order, so only the front of each queue is ever polled, and a long
//! queue behind a busy stream costs one query per stream, not one per
//! block.

use std::collections::VecDeque;

use dipu_stream::Stream;

use super::Pending;

/// The pending frees of one device.
pub(super) type PendingFrees = PerStream<Stream, Pending>;

/// Items queued per stream `S`, in order (few streams: a list of queues).
pub(super) struct PerStream<S, T> {
    queues: Vec<(S, VecDeque<T>)>,
}

impl<S, T> Default for PerStream<S, T> {
    fn default() -> Self {
        PerStream { queues: Vec::new() }
    }
}

impl PendingFrees {
    /// Queues `p` behind the earlier copies on its stream.
    pub(super) fn push(&mut self, p: Pending) {
        self.push_on(p.live.stream, p);
    }
}

impl<S: PartialEq, T> PerStream<S, T> {
    /// Queues `p` behind the earlier items of `stream`.
    fn push_on(&mut self, stream: S, p: T) {
        match self.queues.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, q)) => q.push_back(p),
            None => self.queues.push((stream, VecDeque::from([p]))),
        }
    }

    /// Whether nothing is queued.
    pub(super) fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Every item, stream by stream.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.queues.iter().flat_map(|(_, q)| q)
    }

    /// Takes every item out.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = T> {
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
        mut ready: impl FnMut(&T) -> dipu_deviceapi::Result<bool>,
    ) -> (Vec<T>, dipu_deviceapi::Result<()>) {
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

#[cfg(test)]
mod tests {
    use dipu_deviceapi::Error;

    use super::*;

    #[test]
    fn only_each_streams_front_is_polled_and_order_is_kept() {
        let mut q = PerStream::default();
        for i in 0..100 {
            q.push_on(1_u64, i);
        }
        q.push_on(2_u64, 1000);
        q.push_on(2_u64, 1001);
        // Stream 1's items up to 2 are done; stream 2's first is done.
        let done = |i: &i32| *i <= 2 || *i == 1000;
        let mut polled = Vec::new();
        let (taken, r) = q.take_ready(|i| {
            polled.push(*i);
            Ok(done(i))
        });
        r.unwrap();
        assert_eq!(taken, [0, 1, 2, 1000]);
        // One poll past the last done item of each stream, none behind it.
        assert_eq!(polled, [0, 1, 2, 3, 1000, 1001]);
        assert_eq!(q.iter().count(), 98);
        let (taken, r) = q.take_ready(|_| Ok(true));
        r.unwrap();
        assert_eq!(taken.len(), 98);
        assert!(q.is_empty());
    }

    #[test]
    fn an_error_stops_the_walk_and_keeps_what_was_taken() {
        let mut q = PerStream::default();
        for i in 0..3 {
            q.push_on(7_u64, i);
        }
        let (taken, r) = q.take_ready(|i| match i {
            0 => Ok(true),
            _ => Err(Error::invalid_argument("query failed")),
        });
        assert_eq!(taken, [0]);
        assert!(r.is_err());
        assert_eq!(q.take_all().collect::<Vec<_>>(), [1, 2]);
        assert!(q.is_empty());
    }
}
