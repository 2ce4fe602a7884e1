//! The DIOPI conformance suite: a vendor's kernel library
//! (`libdiopi_impl*.so`) checked operator by operator without any
//! framework, as DeepLink's diopi_test does.
//!
//! The same checks run in two places: `dipu diopi-test` (the library the
//! current vendor ships, or `--library`) and a vendor's own tests, which
//! open their library and call [`run`]:
//!
//! ```no_run
//! # fn main() -> Result<(), dipu_runtime::Error> {
//! let lib = dipu_diopi::open("target/debug/libdiopi_impl_myvendor.so".as_ref())?;
//! let report = dipu_diopi_conformance::run(&lib, &dipu_diopi_conformance::Selection::all())?;
//! print!("{}", report.table());
//! println!("{}", report.summary());
//! assert!(report.success());
//! # Ok(())
//! # }
//! ```
//!
//! A test executable that opens a kernel library must export the runtime's
//! diopirt functions for the library's undefined references to resolve:
//! link it with `-rdynamic` (a build script printing
//! `cargo:rustc-link-arg-tests=-rdynamic`, as `vendors/host/diopi/build.rs`
//! does).
//!
//! For every op of include/diopi/functions.h and functions_ext.h (`ops`:
//! the contract's list first, then the others), seeded inputs are built and a naive CPU
//! reference in `f64` (`refs`) gives the expected outputs. The library's
//! function is called through dipu-diopi on device memory of the runtime
//! (`exec`); the result is compared with diopi_test's rule (`compare`):
//! `|dev-ref| <= atol + rtol*|ref|`, NaN equal to NaN, at most `1e-3*numel`
//! mismatches, atol = rtol = 1e-5 for float32 and 1e-2 / 5e-2 for
//! float16/bfloat16. Inputs must come back unchanged and storage outside a
//! strided output untouched. Each case also runs with strided inputs,
//! strided outputs, `out` aliasing an operand (where the op allows it), on
//! a non-default stream, and on a busy stream: the tensors' contents still
//! being copied in by work queued before the call and held until it
//! returns, which fails a library that reads its inputs or writes its
//! outputs on the calling thread (`runner`); random ops are checked
//! statistically and for reproducibility from a seed and offset. Ops the
//! library lacks are listed as "not in library". Library-level checks come
//! first (`utest`): vendor name and version, the last-error message after
//! failing calls, two contexts on two streams at once.
//!
//! Adding an op: one entry in the op table (`ops::op(name, sig!(..),
//! cases)`), its C signature from functions.h and a case builder that
//! computes the expected values with a reference.

mod case;
mod compare;
mod dtype;
mod dump;
mod exec;
mod ffi_call;
mod hold;
mod ops;
mod refs;
mod report;
mod rng;
mod runner;
mod tensor;
mod utest;

use std::sync::Arc;
use std::time::Instant;

use dipu_diopi::{self as diopi, KernelLibrary};
use dipu_runtime::{Error, ErrorKind, Result};

pub use report::{Failure, OpResult, Outcome, Report};

/// Which operators (and library-level checks) a run covers.
#[derive(Debug, Default)]
pub struct Selection {
    filter: Option<regex_automata::meta::Regex>,
    text: Option<String>,
}

impl Selection {
    /// Every operator and check.
    pub fn all() -> Selection {
        Selection::default()
    }

    /// The operators and checks whose name (`diopiAdd`, or `Add` without
    /// the prefix) matches the regular expression `filter` (unanchored:
    /// `^Add$` for one op). An invalid expression, or one that selects
    /// nothing, is an `InvalidArgument` error.
    pub fn matching(filter: &str) -> Result<Selection> {
        let re = regex_automata::meta::Regex::new(filter).map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("filter {filter:?}: {e}"),
            )
        })?;
        let selection = Selection {
            filter: Some(re),
            text: Some(filter.to_owned()),
        };
        if selection.ops().is_empty() && !utest::NAMES.iter().any(|n| selection.selects(n)) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("filter {filter:?} selects no op; names look like diopiAdd"),
            ));
        }
        Ok(selection)
    }

    /// The filter it was made from (`None`: everything).
    pub fn filter(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// Whether the operator or check `name` is selected.
    pub fn selects(&self, name: &str) -> bool {
        self.filter
            .as_ref()
            .is_none_or(|re| re.is_match(name) || re.is_match(name.trim_start_matches("diopi")))
    }

    /// The selected operators, in table order.
    fn ops(&self) -> Vec<ops::Op> {
        ops::all()
            .into_iter()
            .filter(|op| self.selects(op.name))
            .collect()
    }
}

/// Runs the selected checks and operators against `lib` on device 0 of
/// the process's runtime (started if it is not) and reports each. Fails
/// only when the runtime cannot give what the run needs (streams, the
/// generator); a failing operator is a line of the report.
pub fn run(lib: &Arc<KernelLibrary>, selection: &Selection) -> Result<Report> {
    let rt = dipu_runtime::get()?;
    let env = exec::Env {
        default_stream: rt.context().default_stream(0)?,
        side_stream: rt.context().stream_from_pool(0, false)?,
        generator: diopi::generator(0)?,
        lib: Arc::clone(lib),
        rt,
    };
    let start = Instant::now();
    let mut report = Report {
        library: env.lib.path().display().to_string(),
        ..Report::default()
    };
    report
        .ops
        .extend(utest::run(&env, |name| selection.selects(name)));
    for op in &selection.ops() {
        report.ops.push(runner::run_op(&env, op));
    }
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

/// Every case of the selected operators (arguments, input tensors,
/// expected outputs) as one JSON array, for checking the references
/// against another implementation or replaying them elsewhere.
pub fn cases_json(selection: &Selection) -> String {
    dump::cases_json(&selection.ops())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections() {
        assert!(Selection::all().selects("diopiAdd"));
        let add = Selection::matching("^Add$").unwrap();
        assert!(add.selects("diopiAdd") && !add.selects("diopiAddInp"));
        assert_eq!(add.filter(), Some("^Add$"));
        assert_eq!(add.ops().len(), 1);
        let err = Selection::matching("NoSuchOp").unwrap_err();
        assert!(err.to_string().contains("selects no op"), "{err}");
        assert_eq!(
            Selection::matching("(").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert!(Selection::matching("^two streams$").is_ok());
    }
}
