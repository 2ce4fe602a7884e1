//! The DIOPI headers (`include/diopi/`) compile on their own as C11 and
//! C++17 with every warning an error, hold DIOPI 1.0's numeric values and
//! layouts (`tests/c/diopi_layout.c` checks them with static asserts), and
//! declare every operator of the contract's op list.

use std::path::{Path, PathBuf};
use std::process::Command;

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../include")
}

fn syntax_check(compiler: &str, lang: &str, std: &str, file: &Path) {
    let output = Command::new(compiler)
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"])
        .arg(format!("-std={std}"))
        .arg("-I")
        .arg(include_dir())
        .args(["-x", lang])
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{compiler}`: {e}"));
    assert!(
        output.status.success(),
        "{} does not compile as {std}:\n{}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

const HEADERS: [&str; 3] = ["diopirt.h", "functions.h", "dipu_diopi.h"];

#[test]
fn headers_compile_alone_as_c11() {
    for h in HEADERS {
        syntax_check("cc", "c", "c11", &include_dir().join("diopi").join(h));
    }
}

#[test]
fn headers_compile_alone_as_cxx17() {
    for h in HEADERS {
        syntax_check("c++", "c++", "c++17", &include_dir().join("diopi").join(h));
    }
}

fn layout_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/diopi_layout.c")
}

#[test]
fn values_and_layouts_as_c11() {
    syntax_check("cc", "c", "c11", &layout_file());
}

#[test]
fn values_and_layouts_as_cxx17() {
    syntax_check("c++", "c++", "c++17", &layout_file());
}

/// The op list of the DIOPI contract (docs/diopi.md), DIOPI names without
/// the `diopi` prefix.
const CONTRACT_OPS: &str = "Fill ZeroInp CopyInp CastDtype \
    Add AddInp AddScalar AddInpScalar Sub SubInp SubScalar SubInpScalar \
    Mul MulInp MulScalar MulInpScalar Div DivInp DivScalar DivInpScalar \
    Pow PowInp PowTensor Maximum Minimum Addcmul Addcdiv \
    Sqrt Rsqrt Exp Log Neg Abs Sign Reciprocal Erf Sigmoid Tanh Silu Relu ReluInp Gelu \
    ThresholdBackward GeluBackward SiluBackward SigmoidBackward TanhBackward \
    Softmax LogSoftmax SoftmaxBackward LogSoftmaxBackward \
    Sum Mean Max Min MaxAll MinAll Argmax \
    Mm Bmm Addmm Baddbmm Matmul Linear LinearBackward \
    Convolution2d Convolution2dBackward \
    BatchNorm BatchNormBackward LayerNorm LayerNormBackward \
    MaxPool2dWithIndices MaxPool2dBackward AvgPool2d AvgPool2dBackward \
    AdaptiveAvgPool2d AdaptiveAvgPool2dBackward \
    NLLLoss NLLLossBackward CrossEntropyLoss CrossEntropyLossBackward \
    Embedding EmbeddingBackward IndexSelect IndexSelectBackward Cat \
    Where MaskedFillScalar MaskedFill Tril Triu \
    ClampScalar ClampInpScalar Clamp \
    Eq Ne Lt Le Gt Ge EqScalar NeScalar LtScalar LeScalar GtScalar GeScalar \
    Dropout UniformInp NormalInp RandomInp Sgd Adam AdamW";

#[test]
fn functions_h_declares_every_contract_op() {
    let header = std::fs::read_to_string(include_dir().join("diopi/functions.h")).unwrap();
    for op in CONTRACT_OPS.split_whitespace() {
        let decl = format!("DIOPI_API diopiError_t diopi{op}(diopiContextHandle_t ctx");
        assert!(header.contains(&decl), "functions.h lacks diopi{op}");
    }
}
