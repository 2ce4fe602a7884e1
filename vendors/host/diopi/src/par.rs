//! Parallel loops that stay on the calling thread when the work is small:
//! handing a job to rayon's pool and waiting for it costs microseconds,
//! more than a small kernel takes.

use rayon::prelude::*;

/// Below this many elements of work a loop runs on the calling thread.
pub const PAR_WORK: usize = 1 << 15;

fn parallel(work: usize) -> bool {
    work >= PAR_WORK && rayon::current_num_threads() > 1
}

/// `f(i, chunk)` for each `chunk`-sized piece of `data`.
pub fn chunks_each<T: Send>(
    data: &mut [T],
    chunk: usize,
    work: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    if chunk == 0 {
        return;
    }
    if parallel(work) {
        data.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    } else {
        data.chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    }
}

/// `f(i, a_chunk, b_chunk)` over matching pieces of two slices.
pub fn chunks2_each<T: Send, U: Send>(
    a: &mut [T],
    ca: usize,
    b: &mut [U],
    cb: usize,
    work: usize,
    f: impl Fn(usize, &mut [T], &mut [U]) + Sync + Send,
) {
    if ca == 0 || cb == 0 {
        return;
    }
    if parallel(work) {
        a.par_chunks_mut(ca)
            .zip(b.par_chunks_mut(cb))
            .enumerate()
            .for_each(|(i, (x, y))| f(i, x, y));
    } else {
        a.chunks_mut(ca)
            .zip(b.chunks_mut(cb))
            .enumerate()
            .for_each(|(i, (x, y))| f(i, x, y));
    }
}

/// `[f(0), .., f(n-1)]`.
pub fn map_range<R: Send>(n: usize, work: usize, f: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
    if parallel(work) {
        (0..n).into_par_iter().map(f).collect()
    } else {
        (0..n).map(f).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_agree() {
        for n in [10usize, PAR_WORK * 2] {
            let mut v = vec![0usize; n];
            chunks_each(&mut v, 7, n, |i, c| c.iter_mut().for_each(|x| *x = i));
            assert!(v.iter().enumerate().all(|(k, &x)| x == k / 7));
            let m = map_range(n, n, |i| i * 2);
            assert_eq!(m[n - 1], (n - 1) * 2);
        }
    }
}
