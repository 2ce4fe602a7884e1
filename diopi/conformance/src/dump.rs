//! Every case a run builds, as JSON (op, label, arguments, input tensors,
//! expected outputs; `dipu diopi-test --dump-cases PATH`), for checking
//! the references against another implementation
//! (cli/tests/diopi_torch_oracle.py does it with PyTorch) or replaying
//! them elsewhere.

use std::fmt::Write as _;

use super::ops::Op;
use super::report::quote;
use super::rng::Rng;
use super::tensor::HostTensor;

/// A JSON number, `null` for NaN and infinities.
fn number(v: f64) -> String {
    if v.is_finite() {
        format!("{v:e}")
    } else {
        "null".to_owned()
    }
}

/// `{"dtype":..,"shape":[..],"data":[..]}`.
fn tensor(t: &HostTensor) -> String {
    let data: Vec<String> = t.data.iter().map(|&v| number(v)).collect();
    format!(
        "{{\"dtype\":{},\"shape\":{:?},\"data\":[{}]}}",
        quote(t.dtype.name()),
        t.shape,
        data.join(",")
    )
}

/// The cases of `ops` as one JSON array.
pub(crate) fn cases_json(ops: &[Op]) -> String {
    let mut out = String::from("[");
    for op in ops {
        for c in (op.cases)(&mut Rng::for_op(op.name)) {
            if out.len() > 1 {
                out.push(',');
            }
            let tensors: Vec<String> = c.tensors.iter().map(tensor).collect();
            let expected: Vec<String> = c
                .expected
                .iter()
                .map(|(i, t)| format!("{{\"index\":{i},\"tensor\":{}}}", tensor(t)))
                .collect();
            let required: Vec<String> = c.required.iter().map(tensor).collect();
            let _ = write!(
                out,
                "{{\"op\":{},\"label\":{},\"args\":{},\"tensors\":[{}],\"expected\":[{}],\"required\":[{}],\"check\":{}}}",
                quote(op.name),
                quote(&c.label),
                quote(&format!("{:?}", c.args)),
                tensors.join(","),
                expected.join(","),
                required.join(","),
                quote(&format!("{:?}", c.check))
            );
        }
    }
    out.push(']');
    out
}
