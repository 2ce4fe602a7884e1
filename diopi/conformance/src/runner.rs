//! Running an op: its cases built, each run in every variant that makes
//! sense for it, random ops also checked for reproducibility, the outcome
//! collected for the report.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use dipu_diopi as diopi;

use super::case::{Arg, Case, Check};
use super::exec::{is_mutable, run_case, Env, Variant};
use super::ffi_call::Sig;
use super::ops::Op;
use super::report::{Failure, OpResult, Outcome};
use super::rng::Rng;

/// The variants that make sense for `case`.
fn variants(case: &Case) -> Vec<Variant> {
    let nonscalar = |i: usize| case.tensors[i].ndim() > 0 && case.tensors[i].numel() > 0;
    let any = |want_mutable: bool| {
        (0..case.tensors.len()).any(|i| is_mutable(case, i) == want_mutable && nonscalar(i))
    };
    let mut v = vec![Variant::Contiguous];
    if case.check == Check::Values && any(false) {
        v.push(Variant::StridedInputs);
    }
    if any(true) {
        v.push(Variant::StridedOutputs);
    }
    if case.alias.is_some() {
        v.push(Variant::Alias);
    }
    if case.alias_other.is_some() {
        v.push(Variant::AliasOther);
    }
    v.push(Variant::OtherStream);
    if case.tensors.iter().any(|t| t.numel() > 0) {
        v.push(Variant::BusyStream);
    }
    v
}

/// Said of a case that is right on an idle stream but wrong on a busy one.
const EARLY: &str = "wrong only behind work queued on its stream before the call (copies into \
    its tensors): the library reads its inputs or writes its outputs on the calling thread \
    instead of queuing its work on diopiGetStream(ctx)'s stream";

/// Bit patterns of every mutable tensor's values (random-op runs).
fn mutable_bits(case: &Case, vals: &[Vec<f64>]) -> Vec<Vec<u64>> {
    (0..vals.len())
        .filter(|&i| is_mutable(case, i))
        .map(|i| vals[i].iter().map(|v| v.to_bits()).collect())
        .collect()
}

/// Same seed and offset give the same values; the offset advances; the
/// next call gives other values.
fn check_reproducible(env: &Env, f: *const c_void, sig: &Sig, case: &Case) -> Result<(), String> {
    let seed = 20_261_126;
    let set = |off| diopi::set_seed_and_offset(env.generator, seed, off).map_err(|e| e.to_string());
    set(0)?;
    let first = mutable_bits(case, &run_case(env, f, sig, case, Variant::Contiguous)?);
    let (_, after) = diopi::seed_and_offset(env.generator).map_err(|e| e.to_string())?;
    if after == 0 {
        return Err("the generator's offset did not advance".into());
    }
    set(0)?;
    let again = mutable_bits(case, &run_case(env, f, sig, case, Variant::Contiguous)?);
    if first != again {
        return Err("the same seed and offset gave different values".into());
    }
    let next = mutable_bits(case, &run_case(env, f, sig, case, Variant::Contiguous)?);
    if first == next {
        return Err("a second call (advanced offset) repeated the first call's values".into());
    }
    Ok(())
}

/// A panic's message.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// Builds and runs every case of `op`.
pub(crate) fn run_op(env: &Env, op: &Op) -> OpResult {
    let start = std::time::Instant::now();
    let mut result = OpResult {
        name: op.name,
        cases: 0,
        runs: 0,
        outcome: Outcome::Missing,
        seconds: 0.0,
    };
    let Some(f) = env.lib.symbol(op.name) else {
        return result;
    };
    let f = f.cast_const();
    let mut fails = Vec::new();
    let cases = match catch_unwind(AssertUnwindSafe(|| (op.cases)(&mut Rng::for_op(op.name)))) {
        Ok(c) => c,
        Err(p) => {
            fails.push(Failure {
                case: "(building cases)".into(),
                variant: "-",
                message: format!("runner panic: {}", panic_text(&*p)),
            });
            Vec::new()
        }
    };
    result.cases = cases.len();
    for case in &cases {
        let label = describe(case);
        let mut plan: Vec<(Variant, bool)> =
            variants(case).into_iter().map(|v| (v, false)).collect();
        if case.check != Check::Values {
            plan.push((Variant::Contiguous, true));
        }
        let mut idle_ok = false;
        for (v, repro) in plan {
            result.runs += 1;
            let r = catch_unwind(AssertUnwindSafe(|| {
                if repro {
                    check_reproducible(env, f, &op.sig, case)
                } else {
                    run_case(env, f, &op.sig, case, v).map(|_| ())
                }
            }))
            .unwrap_or_else(|p| Err(format!("runner panic: {}", panic_text(&*p))));
            if v == Variant::Contiguous && !repro {
                idle_ok = r.is_ok();
            }
            if let Err(mut message) = r {
                if v == Variant::BusyStream && idle_ok {
                    message = format!("{EARLY}: {message}");
                }
                let variant = if repro { "same seed twice" } else { v.name() };
                fails.push(Failure {
                    case: label.clone(),
                    variant,
                    message,
                });
            }
        }
    }
    result.seconds = start.elapsed().as_secs_f64();
    result.outcome = if fails.is_empty() {
        Outcome::Passed
    } else {
        Outcome::Failed(fails)
    };
    result
}

/// The case's tensors and attributes:
/// `float32[3, 4], float32[4] -> float32[3, 4] alpha=1.5`.
fn describe(case: &Case) -> String {
    let (mut ins, mut outs) = (Vec::new(), Vec::new());
    for a in &case.args {
        match a {
            Arg::C(i) => ins.push(case.tensors[*i].describe()),
            Arg::Tensors(v) => ins.extend(v.iter().map(|&i| case.tensors[i].describe())),
            Arg::T(i) => outs.push(case.tensors[*i].describe()),
            Arg::Required(k) => outs.push(format!("required {}", case.required[*k].describe())),
            _ => {}
        }
    }
    let mut s = format!("{} -> {}", ins.join(", "), outs.join(", "));
    if !case.label.is_empty() {
        s = format!("{s} {}", case.label);
    }
    s
}
