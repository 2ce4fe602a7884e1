//! What one test case is: the tensors, the call's arguments, what to
//! expect, and which variants the runner may derive from it.

use super::dtype::Dtype;
use super::tensor::HostTensor;

/// A `diopiScalar_t` value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Scalar {
    /// stype float64.
    Float(f64),
    /// stype int64.
    Int(i64),
}

/// One argument after the context, in C order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Arg {
    /// Mutable handle of tensor `i` (output or in place).
    T(usize),
    /// Const handle of tensor `i` (an input: must stay unchanged).
    C(usize),
    /// A NULL tensor handle (absent optional).
    Null,
    /// `const diopiConstTensorHandle_t*` to these tensors.
    Tensors(Vec<usize>),
    /// `const diopiScalar_t*`.
    S(Scalar),
    /// `const diopiScalar_t*` that may be NULL.
    OptS(Option<Scalar>),
    /// `diopiSize_t` by value.
    Z(Vec<i64>),
    /// `diopiSize_t*`, NULL for `None`.
    ZPtr(Option<Vec<i64>>),
    /// `int64_t`.
    I(i64),
    /// `const int64_t*`, NULL for `None`.
    OptI(Option<i64>),
    /// `double`.
    D(f64),
    /// `float`.
    F(f32),
    /// `bool`.
    B(bool),
    /// A C enum value.
    E(i32),
    /// `const char*`.
    Str(&'static str),
    /// The device's default generator.
    Gen,
    /// `diopiTensorHandle_t*`: an output the function makes with
    /// diopiRequireTensor; expected as `Case::required[k]`.
    Required(usize),
}

/// A check other than comparing outputs with a reference (random ops).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Check {
    /// Compare every tensor in [`Case::expected`] with the reference.
    Values,
    /// Dropout: where `mask` is 1, `out` is `input/(1-p)`, elsewhere 0;
    /// the kept ratio is within 0.05 of `1-p`.
    Dropout {
        /// Tensor index of the output.
        out: usize,
        /// Tensor index of the mask.
        mask: usize,
        /// Tensor index of the input.
        input: usize,
        /// Drop probability.
        p: f64,
    },
    /// Every value of tensor `t` in `[from, to)`, mean within 0.1 of the
    /// middle (diopi_test's rule).
    Uniform {
        /// Tensor index.
        t: usize,
        /// Lower bound.
        from: f64,
        /// Upper bound.
        to: f64,
    },
    /// Mean and standard deviation of tensor `t` close to these.
    Normal {
        /// Tensor index.
        t: usize,
        /// Expected mean.
        mean: f64,
        /// Expected standard deviation.
        std: f64,
    },
    /// Integers in `[from, to)` and more than one distinct value.
    RandomInt {
        /// Tensor index.
        t: usize,
        /// Lower bound.
        from: i64,
        /// Upper bound (exclusive).
        to: i64,
    },
}

/// One call of an op with its expectations.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    /// Short description: dtype, shapes, attributes.
    pub(crate) label: String,
    /// Every tensor the call uses, with its initial values.
    pub(crate) tensors: Vec<HostTensor>,
    /// The arguments after the context.
    pub(crate) args: Vec<Arg>,
    /// Expected final values of output / in-place tensors (by index).
    pub(crate) expected: Vec<(usize, HostTensor)>,
    /// Expected values of `Arg::Required` outputs (contiguous row-major).
    pub(crate) required: Vec<HostTensor>,
    /// How to check the result.
    pub(crate) check: Check,
    /// An `(output, input)` pair that may share storage in an aliasing run.
    pub(crate) alias: Option<(usize, usize)>,
    /// Another such pair (`out` aliasing the second operand).
    pub(crate) alias_other: Option<(usize, usize)>,
    /// An input whose first dimension is broadcast (stride 0) in every
    /// run: its values repeat along that dimension.
    pub(crate) expanded: Option<usize>,
}

impl Case {
    /// A case that compares outputs; `label` is completed with the
    /// shapes by the builders.
    pub(crate) fn new(label: impl Into<String>) -> Case {
        Case {
            label: label.into(),
            tensors: Vec::new(),
            args: Vec::new(),
            expected: Vec::new(),
            required: Vec::new(),
            check: Check::Values,
            alias: None,
            alias_other: None,
            expanded: None,
        }
    }

    /// Adds a tensor and returns its index.
    pub(crate) fn tensor(&mut self, t: HostTensor) -> usize {
        self.tensors.push(t);
        self.tensors.len() - 1
    }

    /// Adds an input tensor and its const argument.
    pub(crate) fn input(&mut self, t: HostTensor) -> usize {
        let i = self.tensor(t);
        self.args.push(Arg::C(i));
        i
    }

    /// Adds an optional input: the tensor, or a NULL handle.
    pub(crate) fn opt_input(&mut self, t: Option<HostTensor>) {
        match t {
            Some(t) => {
                self.input(t);
            }
            None => {
                self.args.push(Arg::Null);
            }
        }
    }

    /// Adds an output tensor (initialised to a sentinel) expected to end as
    /// `expect`, and its mutable argument.
    pub(crate) fn output(&mut self, expect: HostTensor) -> usize {
        let start = if expect.dtype == Dtype::Bool {
            // The opposite of every expected value: a missed write shows.
            let flipped = expect.data.iter().map(|&v| f64::from(v == 0.0)).collect();
            HostTensor::new(Dtype::Bool, &expect.shape, flipped)
        } else {
            HostTensor::full(expect.dtype, &expect.shape, sentinel(expect.dtype))
        };
        let i = self.tensor(start);
        self.args.push(Arg::T(i));
        self.expected.push((i, expect));
        i
    }

    /// Adds an in-place tensor starting as `start`, expected to end as
    /// `expect`, and its mutable argument.
    pub(crate) fn inplace(&mut self, start: HostTensor, expect: HostTensor) -> usize {
        let i = self.tensor(start);
        self.args.push(Arg::T(i));
        self.expected.push((i, expect));
        i
    }

    /// Appends a non-tensor argument.
    pub(crate) fn arg(&mut self, a: Arg) -> &mut Case {
        self.args.push(a);
        self
    }

    /// The tolerance for an expected tensor of dtype `dt`: diopi_test's
    /// defaults, never loosened per case.
    pub(crate) fn tolerance(&self, dt: Dtype) -> (f64, f64) {
        dt.tolerance()
    }
}

/// What an output holds before the call: a value no op produces by
/// accident (NaN for floats, a large odd number for integers; bool outputs
/// start as the opposite of the expected values instead).
pub(crate) fn sentinel(dt: Dtype) -> f64 {
    match dt {
        Dtype::Bool => 1.0,
        Dtype::U8 => 165.0,
        d if d.is_float() => f64::NAN,
        _ => -123_456_789.0,
    }
}
