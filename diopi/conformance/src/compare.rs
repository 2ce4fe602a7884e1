//! diopi_test's comparison rule and the random-op checks.

use super::case::Check;
use super::tensor::HostTensor;

/// Whether `got` is close to `want`: `|got-want| <= atol + rtol*|want|`,
/// NaN equal to NaN, infinities equal to themselves.
pub(crate) fn is_close(got: f64, want: f64, atol: f64, rtol: f64) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if got == want {
        return true;
    }
    (got - want).abs() <= atol + rtol * want.abs()
}

/// Row-major multi-index of flat element `k` of `shape`.
fn unflatten(mut k: usize, shape: &[i64]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        let s = shape[d].max(1) as usize;
        idx[d] = k % s;
        k /= s;
    }
    idx
}

/// Compares `got` with `want` elementwise; more than `1e-3 * numel`
/// mismatches is an error naming the count and the worst element.
pub(crate) fn compare(
    name: &str,
    got: &[f64],
    want: &HostTensor,
    atol: f64,
    rtol: f64,
) -> Result<(), String> {
    if got.len() != want.data.len() {
        return Err(format!(
            "{name}: {} elements read, {} expected",
            got.len(),
            want.data.len()
        ));
    }
    let mut bad = 0usize;
    let mut worst: Option<(f64, usize)> = None;
    for (k, (&g, &w)) in got.iter().zip(&want.data).enumerate() {
        if is_close(g, w, atol, rtol) {
            continue;
        }
        bad += 1;
        let excess = if (g - w).is_nan() {
            f64::INFINITY
        } else {
            (g - w).abs() - (atol + rtol * w.abs())
        };
        if worst.is_none_or(|(e, _)| excess > e) {
            worst = Some((excess, k));
        }
    }
    if bad as f64 <= 1e-3 * got.len() as f64 {
        return Ok(());
    }
    let (_, k) = worst.unwrap_or((0.0, 0));
    Err(format!(
        "{name} {}: {bad} of {} elements differ (atol {atol:e}, rtol {rtol:e}); worst at {:?}: got {}, expected {}",
        want.describe(),
        got.len(),
        unflatten(k, &want.shape),
        got[k],
        want.data[k]
    ))
}

/// Mean and (population) standard deviation.
fn moments(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Applies a random-op check to the values read back (`vals[i]` = tensor
/// `i`'s logical values; `initial[i]` its values before the call).
pub(crate) fn check_random(
    check: &Check,
    vals: &[Vec<f64>],
    initial: &[Vec<f64>],
) -> Result<(), String> {
    match *check {
        Check::Values => Ok(()),
        Check::Dropout {
            out,
            mask,
            input,
            p,
        } => {
            let (o, m, x) = (&vals[out], &vals[mask], &initial[input]);
            let mut kept = 0usize;
            for k in 0..o.len() {
                let want = match m[k] {
                    1.0 => {
                        kept += 1;
                        x[k] / (1.0 - p)
                    }
                    0.0 => 0.0,
                    v => return Err(format!("mask[{k}] = {v}, neither 0 nor 1")),
                };
                if !is_close(o[k], want, 1e-5, 1e-5) {
                    return Err(format!(
                        "out[{k}] = {}, expected {want} (mask {}, input {})",
                        o[k], m[k], x[k]
                    ));
                }
            }
            let ratio = kept as f64 / o.len() as f64;
            if (ratio - (1.0 - p)).abs() > 0.05 {
                return Err(format!(
                    "kept ratio {ratio:.4}, expected {:.4} within 0.05",
                    1.0 - p
                ));
            }
            Ok(())
        }
        Check::Uniform { t, from, to } => {
            let v = &vals[t];
            if let Some((k, x)) = v
                .iter()
                .enumerate()
                .find(|(_, &x)| !(from..to).contains(&x) && x != to)
            {
                return Err(format!("value[{k}] = {x} outside [{from}, {to})"));
            }
            let (mean, _) = moments(v);
            let mid = (from + to) / 2.0;
            if (mean - mid).abs() > 0.1 {
                return Err(format!("mean {mean:.4}, expected {mid} within 0.1"));
            }
            Ok(())
        }
        Check::Normal { t, mean, std } => {
            let (m, s) = moments(&vals[t]);
            if (m - mean).abs() > 0.1 * std.max(0.1) || (s - std).abs() > 0.1 * std {
                return Err(format!(
                    "mean {m:.4} std {s:.4}, expected {mean} and {std} (within 10% of std)"
                ));
            }
            Ok(())
        }
        Check::RandomInt { t, from, to } => {
            let v = &vals[t];
            if let Some((k, x)) = v
                .iter()
                .enumerate()
                .find(|(_, &x)| x.fract() != 0.0 || x < from as f64 || x >= to as f64)
            {
                return Err(format!(
                    "value[{k}] = {x}, not an integer in [{from}, {to})"
                ));
            }
            let mut distinct: Vec<i64> = v.iter().map(|&x| x as i64).collect();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() < (to - from).min(v.len() as i64) as usize {
                return Err(format!(
                    "only {} distinct values of {} possible",
                    distinct.len(),
                    to - from
                ));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::Dtype;

    #[test]
    fn rule_and_allowance() {
        assert!(is_close(1.0 + 1.5e-5, 1.0, 1e-5, 1e-5));
        assert!(!is_close(1.0 + 3e-5, 1.0, 1e-5, 1e-5));
        assert!(is_close(f64::NAN, f64::NAN, 0.0, 0.0));
        assert!(!is_close(f64::NAN, 1.0, 1.0, 1.0));
        assert!(is_close(f64::INFINITY, f64::INFINITY, 0.0, 0.0));
        let want = HostTensor::new(Dtype::F64, &[2000], vec![1.0; 2000]);
        let mut got = vec![1.0; 2000];
        got[5] = 2.0;
        got[7] = 3.0;
        assert!(
            compare("out", &got, &want, 1e-5, 1e-5).is_ok(),
            "2 of 2000 is allowed"
        );
        got[9] = f64::NAN;
        let e = compare("out", &got, &want, 1e-5, 1e-5).unwrap_err();
        assert!(
            e.contains("3 of 2000") && e.contains("worst at [9]: got NaN"),
            "{e}"
        );
    }

    /// `check_random` where the inputs did not change.
    fn check_random(check: &Check, vals: &[Vec<f64>]) -> Result<(), String> {
        super::check_random(check, vals, vals)
    }

    #[test]
    fn random_checks() {
        let x = vec![1.0; 4];
        let ok = check_random(
            &Check::Dropout {
                out: 0,
                mask: 1,
                input: 2,
                p: 0.5,
            },
            &[
                vec![2.0, 0.0, 2.0, 0.0],
                vec![1.0, 0.0, 1.0, 0.0],
                x.clone(),
            ],
        );
        assert!(ok.is_ok(), "{ok:?}");
        let bad = check_random(
            &Check::Dropout {
                out: 0,
                mask: 1,
                input: 2,
                p: 0.5,
            },
            &[vec![1.0, 0.0, 2.0, 0.0], vec![1.0, 0.0, 1.0, 0.0], x],
        );
        assert!(bad.is_err());
        assert!(check_random(
            &Check::Uniform {
                t: 0,
                from: 0.0,
                to: 1.0
            },
            &[vec![0.2, 0.8, 0.5]]
        )
        .is_ok());
        assert!(check_random(
            &Check::Uniform {
                t: 0,
                from: 0.0,
                to: 1.0
            },
            &[vec![0.2, 1.8]]
        )
        .is_err());
        assert!(check_random(
            &Check::RandomInt {
                t: 0,
                from: 0,
                to: 3
            },
            &[vec![0.0, 1.0, 2.0, 1.0]]
        )
        .is_ok());
        assert!(check_random(
            &Check::RandomInt {
                t: 0,
                from: 0,
                to: 3
            },
            &[vec![0.0, 0.0, 0.0]]
        )
        .is_err());
    }
}
