//! Library-level checks, as diopi_test's utest: the vendor name and
//! version, error reporting after a failing call, and two contexts on two
//! streams working at once.

use super::case::{Arg, Case};
use super::dtype::Dtype;
use super::exec::{prepare, status_error, Env, Variant};
use super::ffi_call::{sig, Sig};
use super::refs::elementwise::map;
use super::report::{Failure, OpResult, Outcome};
use super::rng::Rng;
use super::tensor::HostTensor;

/// The names of these checks, for `--filter`.
pub(crate) const NAMES: [&str; 3] = [
    "diopiGetVendorName",
    "diopiGetLastErrorString",
    "two streams",
];

fn result(name: &'static str, runs: usize, errors: Vec<String>) -> OpResult {
    let outcome = if errors.is_empty() {
        Outcome::Passed
    } else {
        Outcome::Failed(
            errors
                .into_iter()
                .map(|message| Failure {
                    case: String::new(),
                    variant: "library",
                    message,
                })
                .collect(),
        )
    };
    OpResult {
        name,
        cases: 1,
        runs,
        outcome,
        seconds: 0.0,
    }
}

fn missing(name: &'static str) -> OpResult {
    OpResult {
        name,
        cases: 0,
        runs: 0,
        outcome: Outcome::Missing,
        seconds: 0.0,
    }
}

/// `diopiGetVendorName` and `diopiGetImplVersion` answer non-empty text.
fn vendor(env: &Env) -> Option<OpResult> {
    if env.lib.symbol("diopiGetVendorName").is_none() {
        return Some(missing("diopiGetVendorName"));
    }
    let mut errors = Vec::new();
    if env.lib.vendor_name().is_none_or(|n| n.is_empty()) {
        errors.push("diopiGetVendorName gave no name".to_owned());
    }
    if env.lib.impl_version().is_none_or(|v| v.is_empty()) {
        errors.push("diopiGetImplVersion is missing or empty".to_owned());
    }
    Some(result("diopiGetVendorName", 2, errors))
}

/// Calls `name` (signature `s`) with `case`, which must fail; returns the
/// library's message.
fn failing_call(env: &Env, name: &str, s: &Sig, case: &Case) -> Result<String, String> {
    let f = env
        .lib
        .symbol(name)
        .ok_or_else(|| format!("{name} not in library"))?
        .cast_const();
    let placed = prepare(env, case, Variant::Contiguous)?;
    let (rc, ctx) = placed.launch(f, s)?;
    let synced = placed.stream.synchronize();
    drop(ctx);
    synced.map_err(|e| e.to_string())?;
    if rc == 0 {
        return Err(format!("{name} accepted {}: it must fail", case.label));
    }
    let msg = env.lib.last_error().unwrap_or_default();
    if msg.is_empty() {
        return Err(format!(
            "{name} failed ({}) but diopiGetLastErrorString is empty",
            status_error(env, rc)
        ));
    }
    Ok(msg)
}

/// A failing Add and a failing Cat each leave their own message.
/// Skipped (None) when the library lacks Add or Cat.
fn last_error(env: &Env) -> Option<OpResult> {
    let name = "diopiGetLastErrorString";
    if env.lib.symbol(name).is_none() {
        return Some(missing(name));
    }
    if env.lib.symbol("diopiAdd").is_none() || env.lib.symbol("diopiCat").is_none() {
        return None;
    }
    let f = Dtype::F32;
    let mut add = Case::new("shapes [3, 4] and [5]");
    add.output(HostTensor::full(f, &[3, 4], 0.0));
    add.input(HostTensor::full(f, &[3, 4], 1.0));
    add.input(HostTensor::full(f, &[5], 1.0));
    add.arg(super::ops::sf(1.0));
    let mut cat = Case::new("[2, 3] and [3, 2] along dim 1");
    cat.output(HostTensor::full(f, &[2, 5], 0.0));
    let a = cat.tensor(HostTensor::full(f, &[2, 3], 1.0));
    let b = cat.tensor(HostTensor::full(f, &[3, 2], 1.0));
    cat.arg(Arg::Tensors(vec![a, b]))
        .arg(Arg::I(2))
        .arg(Arg::I(1));
    let mut errors = Vec::new();
    let first = failing_call(env, "diopiAdd", &sig!(T, C, C, S), &add);
    let second = failing_call(env, "diopiCat", &sig!(T, P, I, I), &cat);
    match (first, second) {
        (Ok(x), Ok(y)) if x == y => errors.push(format!(
            "the message did not change between a failing Add and a failing Cat: {x:?}"
        )),
        (Ok(_), Ok(_)) => {}
        (x, y) => errors.extend(x.err().into_iter().chain(y.err())),
    }
    Some(result(name, 2, errors))
}

/// Add on the default stream and Mul on another, both queued before
/// either stream is synchronised, each right. Skipped (None) when the
/// library lacks either.
fn two_streams(env: &Env) -> Option<OpResult> {
    let name = "two streams";
    let (Some(add), Some(mul)) = (env.lib.symbol("diopiAdd"), env.lib.symbol("diopiMul")) else {
        return None;
    };
    let mut rng = Rng::for_op(name);
    let shape = [128, 128];
    let a = super::ops::rand(&mut rng, Dtype::F32, &shape, -1.0, 1.0);
    let b = super::ops::rand(&mut rng, Dtype::F32, &shape, -1.0, 1.0);
    let mut c1 = Case::new("Add on the default stream");
    c1.output(map(Dtype::F32, &[&a, &b], |v| v[0] + v[1]));
    c1.input(a.clone());
    c1.input(b.clone());
    c1.arg(super::ops::sf(1.0));
    let mut c2 = Case::new("Mul on another stream");
    c2.output(map(Dtype::F32, &[&a, &b], |v| v[0] * v[1]));
    c2.input(a);
    c2.input(b);
    let run = || -> Result<(), String> {
        let p1 = prepare(env, &c1, Variant::Contiguous)?;
        let p2 = prepare(env, &c2, Variant::OtherStream)?;
        let (r1, ctx1) = p1.launch(add.cast_const(), &sig!(T, C, C, S))?;
        let (r2, ctx2) = p2.launch(mul.cast_const(), &sig!(T, C, C))?;
        let s1 = p1.stream.synchronize();
        let s2 = p2.stream.synchronize();
        drop((ctx1, ctx2));
        for rc in [r1, r2] {
            if rc != 0 {
                return Err(status_error(env, rc));
            }
        }
        s1.and(s2).map_err(|e| e.to_string())?;
        p1.finish().map_err(|e| format!("Add: {e}"))?;
        p2.finish().map_err(|e| format!("Mul: {e}"))?;
        Ok(())
    };
    Some(result(name, 1, run().err().into_iter().collect()))
}

/// A library check; None when the library lacks what it needs.
type Check = fn(&Env) -> Option<OpResult>;

/// The checks `keep` selects, in order.
pub(crate) fn run(env: &Env, keep: impl Fn(&str) -> bool) -> Vec<OpResult> {
    let checks: [(&str, Check); 3] = [
        (NAMES[0], vendor),
        (NAMES[1], last_error),
        (NAMES[2], two_streams),
    ];
    checks
        .iter()
        .filter(|(n, _)| keep(n))
        .filter_map(|(_, f)| {
            let start = std::time::Instant::now();
            let mut r = f(env)?;
            r.seconds = start.elapsed().as_secs_f64();
            Some(r)
        })
        .collect()
}
