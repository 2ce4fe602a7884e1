//! The DIOPI headers (`include/diopi/`) compile on their own as C11 and
//! C++17 with every warning an error, hold DIOPI 1.0's numeric values and
//! layouts (`tests/c/diopi_layout.c` checks them with static asserts),
//! declare every operator of the contract's op list, meet DIOPI's own
//! declarations and macros in one translation unit
//! (`tests/c/diopi_deeplink_decls.c`), and reference weakly exactly the
//! runtime functions DIOPI declares `DIOPI_ATTR_WEAK`.

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

const HEADERS: [&str; 4] = [
    "diopirt.h",
    "functions.h",
    "functions_ext.h",
    "dipu_diopi.h",
];

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

#[test]
fn deeplink_s_declarations_meet_ours_as_c11() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/diopi_deeplink_decls.c");
    syntax_check("cc", "c", "c11", &file);
}

#[test]
fn deeplink_s_declarations_meet_ours_as_cxx17() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/diopi_deeplink_decls.c");
    syntax_check("c++", "c++", "c++17", &file);
}

/// The runtime functions DIOPI 1.0 declares weak (`DIOPI_ATTR_WEAK`, and
/// `diopiGetVersion` through `DIOPI_API`): a framework may lack them.
const DIOPI_WEAK: [&str; 19] = [
    "diopiGetVersion",
    "diopiGetTensorDevice",
    "diopiGetTensorElemSize",
    "diopiGetTensorStoragePtr",
    "diopiGetTensorStorageOffset",
    "diopiGetTensorStorageNbytes",
    "diopiGetTensorDeviceIndex",
    "diopiGetCurrentDeviceIndex",
    "diopiIsTensorSparse",
    "diopiGetTensorCrowIndices",
    "diopiGetTensorColIndices",
    "diopiGetTensorValues",
    "diopiRequireBuffer",
    "diopiGeneratorGetState",
    "diopiGeneratorSetState",
    "diopiGeneratorGetSeedAndOffset",
    "diopiGeneratorSetSeedAndOffset",
    "diopiRecordStart",
    "diopiRecordEnd",
];

/// The functions `diopirt.h` declares (`DIOPI_RT_API` lines).
fn diopirt_functions() -> Vec<String> {
    let header = std::fs::read_to_string(include_dir().join("diopi/diopirt.h")).unwrap();
    header
        .lines()
        .filter(|l| l.starts_with("DIOPI_RT_API"))
        .filter_map(|l| {
            let open = l.find('(')?;
            let start = l[..open].rfind([' ', '*'])? + 1;
            Some(l[start..open].to_owned())
        })
        .collect()
}

#[test]
fn an_object_built_against_diopirt_h_references_diopi_s_optional_functions_weakly() {
    let names = diopirt_functions();
    assert_eq!(names.len(), 27, "diopirt.h declares {names:?}");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("diopi-weak-refs");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("refs.c");
    let mut text = String::from(
        "#include \"diopi/diopirt.h\"\ntypedef void (*any_fn)(void);\nany_fn refs[] = {\n",
    );
    for n in &names {
        text.push_str(&format!("    (any_fn){n},\n"));
    }
    text.push_str("};\n");
    std::fs::write(&src, text).unwrap();
    let obj = dir.join("refs.o");
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-c"])
        .arg("-I")
        .arg(include_dir())
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nm = Command::new("nm").arg(&obj).output().expect("run nm");
    assert!(nm.status.success());
    let (mut weak, mut strong) = (Vec::new(), Vec::new());
    for line in String::from_utf8_lossy(&nm.stdout).lines() {
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["w", name] => weak.push(name.to_owned()),
            ["U", name] => strong.push(name.to_owned()),
            _ => {}
        }
    }
    let mut want_weak: Vec<String> = DIOPI_WEAK.iter().map(|s| (*s).to_owned()).collect();
    let mut want_strong: Vec<String> = names
        .iter()
        .filter(|n| !DIOPI_WEAK.contains(&n.as_str()))
        .cloned()
        .collect();
    for v in [&mut weak, &mut strong, &mut want_weak, &mut want_strong] {
        v.sort();
    }
    assert_eq!(weak, want_weak, "weak references");
    assert_eq!(strong, want_strong, "ordinary references");
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
