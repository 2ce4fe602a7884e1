//! One call of a case on the device: tensors placed in device memory (in
//! the variant's layout), the function called on a context, the stream
//! synchronised, everything copied back and checked.
//!
//! On a busy stream ([`Variant::BusyStream`]) the tensors first hold
//! other values (NaN for floats, 0 for integers); a host function that
//! waits on a gate, then a copy of each tensor's real contents, are queued
//! on the stream before the call, and the gate opens only once the call
//! has returned. A library that reads its inputs or writes its outputs on
//! the calling thread instead of in stream order reads the other values,
//! or sees its outputs overwritten.

use std::cell::Cell;
use std::ffi::{c_void, CString};
use std::sync::Arc;

use dipu_diopi::{
    self as diopi, DiopiScalar, DiopiSize, GeneratorHandle, KernelLibrary, OwnedTensor,
};
use dipu_runtime::{DeviceBuffer, Runtime, Stream};

use super::case::{Arg, Case, Check, Scalar};
use super::compare::{check_random, compare};
use super::dtype::Dtype;
use super::ffi_call::{Lowered, Sig};
use super::hold::{Hold, HOLD_LIMIT};
use super::tensor::{Layout, Placement};

/// The device side every run uses.
pub(crate) struct Env {
    /// The runtime (device memory, streams).
    pub(crate) rt: Arc<Runtime>,
    /// The kernel library under test.
    pub(crate) lib: Arc<KernelLibrary>,
    /// Device 0's default stream.
    pub(crate) default_stream: Stream,
    /// Another stream of device 0.
    pub(crate) side_stream: Stream,
    /// Device 0's generator handle.
    pub(crate) generator: GeneratorHandle,
}

/// How a case is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Variant {
    /// Contiguous tensors on the default stream.
    Contiguous,
    /// Inputs as transposed (or sliced) views.
    StridedInputs,
    /// Outputs and in-place tensors as sliced views.
    StridedOutputs,
    /// The output shares the storage of an input.
    Alias,
    /// The output shares the storage of the second operand.
    AliasOther,
    /// Contiguous, on a non-default stream.
    OtherStream,
    /// Contiguous, the tensors' contents still being copied in by work
    /// queued on the stream before the call and held until it returns.
    BusyStream,
}

impl Variant {
    /// The name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Variant::Contiguous => "contiguous",
            Variant::StridedInputs => "strided inputs",
            Variant::StridedOutputs => "strided outputs",
            Variant::Alias => "out aliases input",
            Variant::AliasOther => "out aliases other",
            Variant::OtherStream => "non-default stream",
            Variant::BusyStream => "busy stream",
        }
    }
}

/// A tensor placed in device memory.
struct DevTensor {
    /// Owns the storage (None: shares another tensor's).
    buf: Option<DeviceBuffer>,
    /// Where the elements are.
    place: Placement,
    /// The storage's initial bytes.
    image: Vec<u8>,
    /// The descriptor.
    desc: OwnedTensor,
    /// Element type.
    dtype: Dtype,
    /// Index of the tensor whose buffer holds the storage.
    storage_of: usize,
    /// On a busy stream: the storage's real contents, copied into `buf`
    /// by work queued on the stream (`buf` holds other values until then).
    staged: Option<DeviceBuffer>,
}

/// What gap elements (storage outside a strided view) hold: NaN for
/// floats (a kernel that reads them produces NaN), 0 for integers (a
/// valid index, so a wrong read cannot crash the runner).
fn gap_value(dt: Dtype) -> f64 {
    if dt.is_float() {
        f64::NAN
    } else {
        0.0
    }
}

/// Whether tensor `i` is passed mutable somewhere.
pub(crate) fn is_mutable(case: &Case, i: usize) -> bool {
    case.args.contains(&Arg::T(i))
}

/// The 1-based argument position of tensor `i` (after the context).
fn position(case: &Case, i: usize) -> String {
    let p = case.args.iter().position(|a| match a {
        Arg::T(j) | Arg::C(j) => *j == i,
        Arg::Tensors(v) => v.contains(&i),
        _ => false,
    });
    p.map_or_else(|| format!("tensor {i}"), |p| format!("argument {}", p + 1))
}

/// Places tensor `i` of `case` on `stream` in `layout`; when `staged`,
/// the storage holds gap values everywhere and its real contents wait in a
/// buffer of their own, to be copied in on the stream.
fn place(
    env: &Env,
    case: &Case,
    i: usize,
    layout: Layout,
    stream: Stream,
    staged: bool,
) -> Result<DevTensor, String> {
    let t = &case.tensors[i];
    let place = Placement::new(&t.shape, layout);
    let mut vals = vec![gap_value(t.dtype); place.storage_len];
    for (k, pos) in place.positions(&t.shape).into_iter().enumerate() {
        vals[pos] = t.data[k];
    }
    let mut image = Vec::with_capacity(vals.len() * t.dtype.size());
    for v in vals {
        t.dtype.encode(v, &mut image);
    }
    let buf = env
        .rt
        .allocate(image.len().max(8), stream)
        .map_err(|e| e.to_string())?;
    let staged = if staged {
        let real = env
            .rt
            .allocate(image.len().max(8), stream)
            .map_err(|e| e.to_string())?;
        real.copy_from_host(&image, Some(stream))
            .map_err(|e| e.to_string())?;
        let mut other = Vec::with_capacity(image.len());
        for _ in 0..place.storage_len {
            t.dtype.encode(gap_value(t.dtype), &mut other);
        }
        buf.copy_from_host(&other, Some(stream))
            .map_err(|e| e.to_string())?;
        Some(real)
    } else {
        buf.copy_from_host(&image, Some(stream))
            .map_err(|e| e.to_string())?;
        None
    };
    let desc = OwnedTensor::new(
        diopi::Dtype(t.dtype.code()),
        0,
        buf.as_ptr(),
        image.len(),
        place.offset,
        &t.shape,
        Some(&place.strides),
    )
    .map_err(|e| format!("describing {}: {e}", t.describe()))?;
    Ok(DevTensor {
        buf: Some(buf),
        place,
        image,
        desc,
        dtype: t.dtype,
        storage_of: i,
        staged,
    })
}

/// Lowered arguments and what they point at (kept alive for the call).
/// The pointees are boxed: the arguments point at them while the vectors
/// still grow.
#[allow(clippy::vec_box)]
#[derive(Default)]
struct Lowering {
    args: Vec<Lowered>,
    scalars: Vec<Box<DiopiScalar>>,
    ints: Vec<Box<i64>>,
    sizes: Vec<Box<DiopiSize>>,
    strings: Vec<CString>,
    arrays: Vec<Vec<diopi::ConstTensorHandle>>,
    /// `Arg::Required` slots, in argument order.
    slots: Vec<Box<diopi::TensorHandle>>,
}

fn lower(env: &Env, case: &Case, dev: &[DevTensor]) -> Result<Lowering, String> {
    let mut l = Lowering::default();
    for a in &case.args {
        let v = match a {
            Arg::T(i) => Lowered::Ptr(dev[*i].desc.handle().cast()),
            Arg::C(i) => Lowered::Ptr(dev[*i].desc.const_handle().cast_mut().cast()),
            Arg::Null | Arg::OptS(None) | Arg::ZPtr(None) | Arg::OptI(None) => {
                Lowered::Ptr(std::ptr::null_mut())
            }
            Arg::Tensors(ix) => {
                l.arrays
                    .push(ix.iter().map(|&i| dev[i].desc.const_handle()).collect());
                Lowered::Ptr(
                    l.arrays
                        .last()
                        .map_or(std::ptr::null_mut(), |v| v.as_ptr().cast_mut().cast()),
                )
            }
            Arg::S(s) | Arg::OptS(Some(s)) => {
                let s = match *s {
                    Scalar::Float(f) => DiopiScalar::float(f),
                    Scalar::Int(i) => DiopiScalar::int(i),
                };
                l.scalars.push(Box::new(s));
                Lowered::Ptr(l.scalars.last().map_or(std::ptr::null_mut(), |b| {
                    std::ptr::from_ref::<DiopiScalar>(b).cast_mut().cast()
                }))
            }
            Arg::Z(v) => Lowered::Size(DiopiSize::from_slice(v)),
            Arg::ZPtr(Some(v)) => {
                l.sizes.push(Box::new(DiopiSize::from_slice(v)));
                Lowered::Ptr(l.sizes.last().map_or(std::ptr::null_mut(), |b| {
                    std::ptr::from_ref::<DiopiSize>(b).cast_mut().cast()
                }))
            }
            Arg::I(v) => Lowered::I64(*v),
            Arg::OptI(Some(v)) => {
                l.ints.push(Box::new(*v));
                Lowered::Ptr(l.ints.last().map_or(std::ptr::null_mut(), |b| {
                    std::ptr::from_ref::<i64>(b).cast_mut().cast()
                }))
            }
            Arg::D(v) => Lowered::F64(*v),
            Arg::F(v) => Lowered::F32(*v),
            Arg::B(v) => Lowered::Bool(*v),
            Arg::E(v) => Lowered::Enum(*v),
            Arg::Str(s) => {
                l.strings.push(CString::new(*s).map_err(|e| e.to_string())?);
                Lowered::Ptr(
                    l.strings
                        .last()
                        .map_or(std::ptr::null_mut(), |c| c.as_ptr().cast_mut().cast()),
                )
            }
            Arg::Gen => Lowered::Ptr(env.generator.cast()),
            Arg::Required(_) => {
                l.slots.push(Box::new(std::ptr::null_mut()));
                Lowered::Ptr(l.slots.last().map_or(std::ptr::null_mut(), |b| {
                    std::ptr::from_ref::<diopi::TensorHandle>(b)
                        .cast_mut()
                        .cast()
                }))
            }
        };
        l.args.push(v);
    }
    Ok(l)
}

/// A required output read back: (shape, whether contiguous, values).
type RequiredOut = (Vec<i64>, bool, Vec<f64>);

/// A case placed on the device, ready to call.
pub(crate) struct Placed<'a> {
    case: &'a Case,
    dev: Vec<DevTensor>,
    lowered: Lowering,
    /// The stream the case runs on.
    pub(crate) stream: Stream,
    alias: Option<(usize, usize)>,
    /// On a busy stream: the hold in front of the queued copies, released
    /// once the call returns.
    gate: Cell<Option<Hold>>,
    /// Whether that hold gave way before the call returned (the call
    /// waited for its stream).
    gate_gave_way: Cell<bool>,
}

/// Places `case`'s tensors for `variant` and lowers its arguments.
pub(crate) fn prepare<'a>(
    env: &Env,
    case: &'a Case,
    variant: Variant,
) -> Result<Placed<'a>, String> {
    let stream = if variant == Variant::OtherStream {
        env.side_stream
    } else {
        env.default_stream
    };
    let busy = variant == Variant::BusyStream;
    let alias = match variant {
        Variant::Alias => case.alias,
        Variant::AliasOther => case.alias_other,
        _ => None,
    };
    let mut dev: Vec<DevTensor> = Vec::with_capacity(case.tensors.len());
    for i in 0..case.tensors.len() {
        let mutable = is_mutable(case, i);
        let layout = match variant {
            _ if case.expanded == Some(i) => Layout::Expanded,
            Variant::StridedInputs if !mutable => Layout::Transposed,
            Variant::StridedOutputs if mutable => Layout::Sliced,
            _ => Layout::Contiguous,
        };
        dev.push(place(env, case, i, layout, stream, busy)?);
    }
    if let Some((o, i)) = alias {
        // The output's descriptor over the input's storage.
        let src = &dev[i];
        let t = &case.tensors[o];
        let ptr = src
            .buf
            .as_ref()
            .map_or(std::ptr::null_mut(), DeviceBuffer::as_ptr);
        let desc = OwnedTensor::new(
            diopi::Dtype(t.dtype.code()),
            0,
            ptr,
            src.image.len(),
            src.place.offset,
            &t.shape,
            Some(&src.place.strides),
        )
        .map_err(|e| e.to_string())?;
        dev[o] = DevTensor {
            buf: None,
            place: src.place.clone(),
            image: src.image.clone(),
            desc,
            dtype: t.dtype,
            storage_of: i,
            staged: None,
        };
    }
    let gate = if busy {
        Some(queue_contents(env, &dev, stream)?)
    } else {
        None
    };
    let lowered = lower(env, case, &dev)?;
    Ok(Placed {
        case,
        dev,
        lowered,
        stream,
        alias,
        gate: Cell::new(gate),
        gate_gave_way: Cell::new(false),
    })
}

/// Queues on `stream` a hold, then the copies of the staged contents into
/// the tensors; returns the hold.
fn queue_contents(env: &Env, dev: &[DevTensor], stream: Stream) -> Result<Hold, String> {
    let hold = Hold::new(stream)?;
    for d in dev {
        let (Some(real), Some(buf)) = (&d.staged, &d.buf) else {
            continue;
        };
        if d.image.is_empty() {
            continue;
        }
        // SAFETY: both buffers are live device allocations of at least
        // `image.len()` bytes; they are freed stream-ordered (the caching
        // allocator reuses a block only for work queued after the copy on
        // this stream), and the placed case keeps them until the stream is
        // synchronised.
        unsafe {
            env.rt.memcpy_async(
                buf.as_ptr(),
                real.as_ptr(),
                d.image.len(),
                dipu_runtime::CopyKind::DeviceToDevice,
                stream,
            )
        }
        .map_err(|e| format!("queueing a tensor's contents: {e}"))?;
    }
    Ok(hold)
}

/// `returned diopiErrorOccurred (1): <the library's message>`.
pub(crate) fn status_error(env: &Env, rc: i32) -> String {
    let msg = env.lib.last_error().unwrap_or_default();
    format!("returned {} ({rc}): {msg}", diopi::DiopiError(rc).name())
}

/// Runs `case` once in `variant` and checks values, unchanged inputs and
/// untouched gaps; returns every tensor's logical values read back.
pub(crate) fn run_case(
    env: &Env,
    f: *const c_void,
    sig: &Sig,
    case: &Case,
    variant: Variant,
) -> Result<Vec<Vec<f64>>, String> {
    let placed = prepare(env, case, variant)?;
    // On another stream, the default stream is held until the results are
    // read: a kernel queued there by mistake has not run by then.
    let hold = if variant == Variant::OtherStream {
        Some(Hold::new(env.default_stream)?)
    } else {
        None
    };
    let mut result = call_and_check(env, f, sig, &placed);
    if placed.waited_for_stream() {
        result = result.map_err(|e| {
            format!(
                "{e} (the call did not return while work queued before it on its stream was held: \
                 it waited for its stream, which was let go after {} s)",
                HOLD_LIMIT.as_secs()
            )
        });
    }
    if let Some(hold) = hold {
        // Whatever was queued behind the hold runs before the memory goes.
        drop(hold);
        env.default_stream
            .synchronize()
            .map_err(|e| format!("synchronising the default stream: {e}"))?;
    }
    result
}

/// Calls the placed case, waits for its stream, reads everything back and
/// checks it.
fn call_and_check(
    env: &Env,
    f: *const c_void,
    sig: &Sig,
    placed: &Placed<'_>,
) -> Result<Vec<Vec<f64>>, String> {
    let (rc, ctx) = placed.launch(f, sig)?;
    let synced = placed.stream.synchronize();
    if rc != 0 {
        return Err(status_error(env, rc));
    }
    synced.map_err(|e| format!("synchronising the stream: {e}"))?;
    // Required outputs live as long as the context: read them first.
    let required = placed.read_required(env);
    drop(ctx);
    placed.check_required(required?)?;
    placed.finish()
}

impl Placed<'_> {
    /// Calls `f` on a new context on the case's stream without waiting;
    /// returns the status and the context, to drop once the stream is
    /// synchronised.
    pub(crate) fn launch(
        &self,
        f: *const c_void,
        sig: &Sig,
    ) -> Result<(i32, diopi::Context), String> {
        let ctx = diopi::Context::new(self.stream).map_err(|e| format!("context: {e}"))?;
        // SAFETY: the symbol is the op's DIOPI function of this signature
        // (the table declares it from the reference's functions.h); every
        // pointer in the arguments points into `self`, which the caller
        // keeps until the stream is synchronised.
        let rc = unsafe { sig.invoke(f, ctx.handle().cast(), &self.lowered.args) };
        if let Some(gate) = self.gate.take() {
            self.gate_gave_way.set(gate.release());
        }
        Ok((rc?, ctx))
    }

    /// On a busy stream: whether the work queued before the call was let
    /// go on its own because the call did not return in time.
    pub(crate) fn waited_for_stream(&self) -> bool {
        self.gate_gave_way.get()
    }

    /// The outputs the function made with diopiRequireTensor, in argument
    /// order: (shape, whether contiguous, values). The context that
    /// required them must still be alive.
    fn read_required(&self, env: &Env) -> Result<Vec<RequiredOut>, String> {
        let mut out = Vec::new();
        for (k, slot) in self.lowered.slots.iter().enumerate() {
            let h: diopi::TensorHandle = **slot;
            if h.is_null() {
                return Err(format!("required output {k}: the function did not set it"));
            }
            // SAFETY: a handle the library stored in our slot; its
            // descriptor lives as long as the context (still alive).
            let info = unsafe { diopi::TensorInfo::read(h.cast_const()) }
                .map_err(|e| format!("required output {k}: {e}"))?;
            let dt = Dtype::from_code(info.dtype.0)
                .ok_or_else(|| format!("required output {k}: dtype {}", info.dtype.0))?;
            let vals = self
                .read_on_stream(env, &info, dt)
                .map_err(|e| format!("required output {k}: {e}"))?;
            out.push((info.shape.clone(), info.is_contiguous(), vals));
        }
        Ok(out)
    }

    /// The logical values of `info` (device memory), copied on the case's
    /// stream (a synchronous copy would wait for the held default stream).
    fn read_on_stream(
        &self,
        env: &Env,
        info: &diopi::TensorInfo,
        dt: Dtype,
    ) -> Result<Vec<f64>, String> {
        let mut bytes = vec![0u8; info.span_bytes()];
        if !bytes.is_empty() {
            // SAFETY: `bytes` is ours and untouched until the stream is
            // synchronised below; the runtime checks that the device range
            // lies inside a live allocation (the context keeps it alive).
            unsafe {
                env.rt.memcpy_async(
                    bytes.as_mut_ptr().cast(),
                    info.data(),
                    bytes.len(),
                    dipu_runtime::CopyKind::DeviceToHost,
                    self.stream,
                )
            }
            .map_err(|e| e.to_string())?;
            self.stream.synchronize().map_err(|e| e.to_string())?;
        }
        let place = Placement {
            strides: info.strides.clone(),
            offset: 0,
            storage_len: 0,
        };
        let sz = dt.size();
        Ok(place
            .positions(&info.shape)
            .iter()
            .map(|&p| dt.decode(&bytes[p * sz..]))
            .collect())
    }

    /// Compares the required outputs with `Case::required`: same shape,
    /// contiguous, values within the tolerance.
    fn check_required(&self, got: Vec<RequiredOut>) -> Result<(), String> {
        for (k, ((shape, contiguous, vals), want)) in
            got.into_iter().zip(&self.case.required).enumerate()
        {
            if shape != want.shape {
                return Err(format!(
                    "required output {k}: shape {shape:?}, expected {:?}",
                    want.shape
                ));
            }
            if !contiguous {
                return Err(format!("required output {k} is not contiguous"));
            }
            let (atol, rtol) = self.case.tolerance(want.dtype);
            compare(&format!("required output {k}"), &vals, want, atol, rtol)?;
        }
        Ok(())
    }

    /// After the call and a synchronisation: reads every tensor back and
    /// checks values, unchanged inputs and untouched gaps.
    pub(crate) fn finish(&self) -> Result<Vec<Vec<f64>>, String> {
        let (case, dev, alias, stream) = (self.case, &self.dev, self.alias, self.stream);
        let mut values = Vec::with_capacity(dev.len());
        for (i, d) in dev.iter().enumerate() {
            let owner = &dev[d.storage_of];
            let buf = owner
                .buf
                .as_ref()
                .ok_or("aliased storage without a buffer")?;
            let mut bytes = vec![0u8; owner.image.len()];
            buf.copy_to_host(&mut bytes, Some(stream))
                .map_err(|e| e.to_string())?;
            let sz = d.dtype.size();
            let positions = d.place.positions(&case.tensors[i].shape);
            values.push(
                positions
                    .iter()
                    .map(|&p| d.dtype.decode(&bytes[p * sz..]))
                    .collect::<Vec<f64>>(),
            );
            let written = is_mutable(case, i) || alias.is_some_and(|(o, src)| src == i || o == i);
            if !written && bytes != d.image {
                return Err(format!(
                    "input {} {} was modified",
                    position(case, i),
                    case.tensors[i].describe()
                ));
            }
            if written && d.place.storage_len > positions.len() {
                let mut inside = vec![false; d.place.storage_len];
                for &p in &positions {
                    inside[p] = true;
                }
                if let Some(p) = (0..d.place.storage_len)
                    .find(|&p| !inside[p] && bytes[p * sz..][..sz] != d.image[p * sz..][..sz])
                {
                    return Err(format!(
                        "{} {} written outside its strided view (storage element {p})",
                        position(case, i),
                        case.tensors[i].describe()
                    ));
                }
            }
        }
        if case.check == Check::Values && case.expected.is_empty() && case.required.is_empty() {
            return Err("runner bug: the case expects nothing".into());
        }
        for (i, want) in &case.expected {
            let (atol, rtol) = case.tolerance(want.dtype);
            compare(&position(case, *i), &values[*i], want, atol, rtol)?;
        }
        let initial: Vec<Vec<f64>> = case.tensors.iter().map(|t| t.data.clone()).collect();
        check_random(&case.check, &values, &initial)?;
        Ok(values)
    }
}
