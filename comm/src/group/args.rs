//! Argument checks of the collectives: roots, peers, per-rank lists,
//! flat buffers and all-to-all splits.

use dipu_deviceapi::{Error, Result};

use super::{Buffer, ProcessGroup};

impl ProcessGroup {
    pub(super) fn check_root(&self, root: i32) -> Result<()> {
        if (0..self.inner.size).contains(&root) {
            Ok(())
        } else {
            Err(Error::invalid_argument(format!(
                "root {root} is not a rank of a group of {}",
                self.inner.size
            )))
        }
    }

    pub(super) fn check_peer(&self, peer: i32) -> Result<()> {
        self.check_root(peer)?;
        if peer == self.inner.rank {
            return Err(Error::invalid_argument(format!(
                "rank {peer} cannot send to or receive from itself"
            )));
        }
        Ok(())
    }

    /// A list of one buffer per rank, each of `like`'s type.
    pub(super) fn check_list(&self, what: &str, list: &[Buffer], like: &Buffer) -> Result<()> {
        if list.len() != self.inner.size as usize {
            return Err(Error::invalid_argument(format!(
                "{what}: {} buffers for a group of {} ranks",
                list.len(),
                self.inner.size
            )));
        }
        list.iter().try_for_each(|b| same_dtype(what, b, like))
    }

    /// `big` holds world_size blocks of `block` elements.
    pub(super) fn check_flat(
        &self,
        what: &str,
        big: &Buffer,
        small: &Buffer,
        block: usize,
    ) -> Result<()> {
        same_dtype(what, big, small)?;
        let want = block.checked_mul(self.inner.size as usize);
        if want != Some(big.count()) {
            return Err(Error::invalid_argument(format!(
                "{what}: the flat buffer has {} elements, not {} x {block} (world size x block)",
                big.count(),
                self.inner.size
            )));
        }
        Ok(())
    }

    /// (offset, count) of each rank's block of `buffer`.
    pub(super) fn splits(
        &self,
        what: &str,
        buffer: &Buffer,
        splits: Option<&[usize]>,
    ) -> Result<Vec<(usize, usize)>> {
        let n = self.inner.size as usize;
        let counts: Vec<usize> = match splits {
            None => {
                if buffer.count() % n != 0 {
                    return Err(Error::invalid_argument(format!(
                        "{what}: {} elements do not split evenly over {n} ranks; pass splits",
                        buffer.count()
                    )));
                }
                vec![buffer.count() / n; n]
            }
            Some(s) if s.len() != n => {
                return Err(Error::invalid_argument(format!(
                    "{what}: {} splits for a group of {n} ranks",
                    s.len()
                )))
            }
            Some(s) => s.to_vec(),
        };
        let mut offset = 0usize;
        let mut out = Vec::with_capacity(n);
        for c in counts {
            out.push((offset, c));
            offset = offset
                .checked_add(c)
                .filter(|o| *o <= buffer.count())
                .ok_or_else(|| {
                    Error::invalid_argument(format!(
                        "{what}: the splits add up to more than the buffer's {} elements",
                        buffer.count()
                    ))
                })?;
        }
        Ok(out)
    }
}

pub(super) fn same_dtype(what: &str, a: &Buffer, b: &Buffer) -> Result<()> {
    if a.dtype() == b.dtype() {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "{what}: element types differ ({:?} and {:?})",
            a.dtype(),
            b.dtype()
        )))
    }
}

pub(super) fn same_count(what: &str, b: &Buffer, count: usize) -> Result<()> {
    if b.count() == count {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "{what} has {} elements, but this rank contributes {count}",
            b.count()
        )))
    }
}

pub(super) fn uneven(equal: bool) -> &'static str {
    if equal {
        ""
    } else {
        ", uneven"
    }
}
