"""Generates csrc/gen/diopi_ops_*.cpp from diopi_functions.yaml.

Run by setup.py before the build (with torch's python: the C++ signature of
every ATen op comes from torchgen's copy of native_functions.yaml, so the
wrappers match the dispatcher exactly). The wrappers are cut into a few
files that compile in parallel; each is rewritten only when it changes, so
ninja rebuilds it only then. `--list` prints the ATen ops and
their DIOPI functions instead (the tests use it).

    python gen_diopi.py [--yaml diopi_functions.yaml] [--out csrc/gen] [--list]
"""

import argparse
import glob
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
# The translation units the wrappers are cut into (they compile in parallel).
SHARDS = 4


def load_schemas():
    """name.overload -> schema text, from torchgen's native_functions.yaml."""
    import torchgen

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native",
                        "native_functions.yaml")
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("- func: "):
                func = line[len("- func: "):].strip()
                out[func.split("(", 1)[0]] = func
    return out


def parse_yaml(text):
    """The subset of YAML diopi_functions.yaml uses (PyYAML is not in the
    torch environment): top-level keys holding either a mapping of
    `name: scalar` / `name: {k: v, ...}`, or a list of `- key: value` items
    whose values are scalars, `[a, b]` lists or `|` blocks."""

    def scalar(v):
        v = v.strip()
        if v.startswith("[") and v.endswith("]"):
            return [x.strip() for x in v[1:-1].split(",") if x.strip()]
        if v.startswith("{") and v.endswith("}"):
            return {k.strip(): scalar(x) for k, x in
                    (kv.split(":", 1) for kv in v[1:-1].split(",") if kv.strip())}
        return v

    lines = text.splitlines()
    spec, key, item, block, block_indent = {}, None, None, None, 0
    for raw in lines:
        if block is not None:
            if raw.strip() == "" or len(raw) - len(raw.lstrip()) >= block_indent:
                block[1].append(raw[block_indent:] if raw.strip() else "")
                continue
            item[block[0]] = "\n".join(block[1]).rstrip("\n") + "\n"
            block = None
        stripped = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not stripped.strip():
            continue
        ind = len(stripped) - len(stripped.lstrip())
        body = stripped.strip()
        if ind == 0:
            key = body.rstrip(":")
            spec[key] = None
            continue
        if body.startswith("- "):
            item = {}
            spec[key] = (spec[key] or []) + [item]
            body = body[2:]
        k, _, v = body.partition(":")
        k, v = k.strip(), v.strip()
        if isinstance(spec[key], list):
            if v == "|":
                dash = stripped.strip().startswith("- ")
                block, block_indent = (k, []), ind + (4 if dash else 2)
                continue
            item[k] = scalar(v)
        else:
            spec[key] = spec[key] or {}
            spec[key][k] = scalar(v)
    if block is not None:
        item[block[0]] = "\n".join(block[1]).rstrip("\n") + "\n"
    return spec


def family_ops(spec):
    """The ATen ops of the families, as plain entries (aten, diopi, code)."""
    ops = []
    for name, f in (spec.get("binary") or {}).items():
        fn, sfn, extra = f["diopi"], f.get("scalar"), f.get("extra")
        tail = {None: "", "alpha": ", S(alpha)", "RoundModeNone": ", RoundModeNone"}[extra]
        scalar = "nullptr"
        if sfn:
            scalar = (
                "[&](const at::Tensor& o, const at::Tensor& a, const at::Scalar& b) {\n"
                f"        if (fn_{sfn} == nullptr) return false;\n"
                f"        DIOPI_CALL(scope, {sfn}, T(o), T(a), S(b){tail});\n"
                "        return true;\n      }"
            )
        code = (
            "binary_out(scope, self, other, out, false,\n"
            "    [&](const at::Tensor& o, const at::Tensor& a, const at::Tensor& b) {\n"
            f"      DIOPI_CALL(scope, {fn}, T(o), T(a), T(b){tail});\n"
            f"    }},\n    {scalar});\nreturn out;\n"
        )
        ops.append({"aten": f"{name}.out", "diopi": [fn], "optional": [sfn] if sfn else [],
                    "code": code})
    for name, f in (spec.get("compare") or {}).items():
        fn, sfn = f["diopi"], f["scalar"]
        code = (
            "binary_out(scope, self, other, out, true,\n"
            "    [&](const at::Tensor& o, const at::Tensor& a, const at::Tensor& b) {\n"
            f"      DIOPI_CALL(scope, {fn}, T(o), T(a), T(b));\n"
            "    },\n"
            "    [&](const at::Tensor& o, const at::Tensor& a, const at::Scalar& b) {\n"
            f"      if (fn_{sfn} == nullptr) return false;\n"
            f"      DIOPI_CALL(scope, {sfn}, T(o), T(a), S(b));\n"
            "      return true;\n    });\nreturn out;\n"
        )
        ops.append({"aten": f"{name}.Tensor_out", "diopi": [fn], "optional": [sfn],
                    "code": code})
        code = (
            "scalar_out(scope, self, other, out, true,\n"
            "    [&](const at::Tensor& o, const at::Tensor& a, const at::Scalar& b) {\n"
            f"      DIOPI_CALL(scope, {sfn}, T(o), T(a), S(b));\n"
            "    });\nreturn out;\n"
        )
        ops.append({"aten": f"{name}.Scalar_out", "diopi": [sfn], "code": code})
    for name, fn in (spec.get("unary") or {}).items():
        code = (
            "unary_out(scope, self, out, [&](const at::Tensor& o, const at::Tensor& a) {\n"
            f"  DIOPI_CALL(scope, {fn}, T(o), T(a));\n}});\nreturn out;\n"
        )
        ops.append({"aten": f"{name}.out", "diopi": [fn], "code": code})
    return ops


def all_ops(spec):
    ops = family_ops(spec)
    for e in spec.get("ops") or []:
        ops.append(dict(e))
    seen = set()
    for e in ops:
        if e["aten"] in seen:
            sys.exit(f"gen_diopi: {e['aten']} is listed twice")
        seen.add(e["aten"])
    return ops


def indent(code, n):
    pad = " " * n
    return "".join(pad + line if line.strip() else line for line in code.splitlines(True))


def generate(spec, schemas):
    from torchgen import local
    from torchgen.api.types import DispatcherSignature
    from torchgen.model import FunctionSchema

    ops = all_ops(spec)
    fns = sorted({f for e in ops for f in e["diopi"] + e.get("optional", [])})
    heads = set()
    wrappers = []
    regs = []
    for e in ops:
        aten = e["aten"]
        if aten not in schemas:
            sys.exit(f"gen_diopi: {aten} is not an ATen op of this torch")
        schema = FunctionSchema.parse(schemas[aten])
        uname = schema.name.unambiguous_name()
        wname = "w_" + uname
        with local.parametrize(use_const_ref_for_mutable_tensors=False,
                               use_ilistref_for_tensor_lists=e.get("ilistref") == "true"):
            sig = DispatcherSignature.from_schema(schema)
            decl = sig.decl(name=wname)
            args = sig.arguments()
        base = str(schema.name.name.base)
        heads.add(base)
        names = [a.name for a in args]
        # The device: an entry's `device` argument, else the first Tensor ones.
        if "device" in e:
            dev_arg = e["device"]
            typ = next(a.type for a in args if a.name == dev_arg)
            if "ITensorListRef" in typ:
                device = f"device_of({{{dev_arg}.size() == 0 ? nullptr : &{dev_arg}.front()}})"
            elif "TensorList" in typ or "ArrayRef<at::Tensor>" in typ:
                device = f"device_of({{{dev_arg}.empty() ? nullptr : &{dev_arg}[0]}})"
            else:
                device = f"device_of({{&{dev_arg}}})"
        else:
            tens = [a.name for a in args if a.type.strip() in (
                "const at::Tensor &", "at::Tensor &")]
            device = "device_of({" + ", ".join("&" + t for t in tens) + "})"
        dumps = "".join(f'    dump("{n}", {n});\n' for n in names)
        # Empty tensors go to the fallback (nothing to compute or copy, and
        # kernels need not handle them).
        # An `out` argument is not checked: the code resizes it (a
        # functional op that is not structured passes an empty one).
        outs = {a.name for a in schema.arguments.out}
        plain = [a.name for a in args if a.type.strip() in ("const at::Tensor &", "at::Tensor &")
                 and a.name not in outs]
        empty = ""
        if plain and e.get("empty") != "ok":
            empty = "  if (" + " || ".join(f"{n}.numel() == 0" for n in plain) + ") FALLBACK();\n"
        body = (
            f"#define FALLBACK() return ::at::native::call_fallback_fn_symint<"
            f"&::torch_dipu::dipu_fallback_boxed, ::at::_ops::{uname}>::call({', '.join(names)})\n"
            f"{decl} {{\n"
            f'  Scope scope("{aten}", {device});\n'
            f"  if (dump_level() >= 2) {{\n{dumps}  }}\n{empty}"
            f"  try {{\n{indent(e['code'], 4)}"
            f"  }} catch (const NeedsFallback&) {{\n    FALLBACK();\n  }}\n"
            f"}}\n#undef FALLBACK\n"
        )
        wrappers.append(body)
        req = e["diopi"]
        regs.append(
            f'  reg(lib, "{aten}", {{{", ".join(json.dumps(f) for f in req)}}}, '
            f'{{{", ".join(f"fn_{f} != nullptr" for f in req)}}}, TORCH_FN({wname}));\n'
        )
    header = [
        "// Generated by gen_diopi.py from diopi_functions.yaml: do not edit.\n",
        "#include <ATen/OpMathType.h>\n#include <ATen/native/CPUFallback.h>\n",
        "#include <ATen/ops/_copy_from.h>\n#include <ATen/ops/empty_like.h>\n",
        "#include <ATen/ops/ones_like.h>\n#include <torch/library.h>\n\n",
        "#include <algorithm>\n\n",
    ]
    header += [f"#include <ATen/ops/{h}_ops.h>\n" for h in sorted(heads)]
    header += [
        '\n#include "diopi.h"\n\n',
        "namespace torch_dipu {\n",
        "void dipu_fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack);\n",
        "namespace diopi {\n",
    ]
    # The wrappers are cut into SHARDS translation units that compile in
    # parallel (one file took most of the extension's build time); each
    # looks up every function pointer it may use.
    files = []
    for k in range(SHARDS):
        out = list(header)
        out.append("namespace {\n\n")
        out += [f"decltype(&::{f}) fn_{f} = nullptr;\n" for f in fns]
        out.append("\n")
        out += wrappers[k::SHARDS]
        out.append("\n}  // namespace\n\n")
        out.append(f"// Looks the DIOPI functions up and registers shard {k}'s ops.\n")
        out.append(f"void register_generated_{k}(torch::Library& lib) {{\n")
        out += [f'  fn_{f} = reinterpret_cast<decltype(fn_{f})>(lookup("{f}"));\n' for f in fns]
        out += regs[k::SHARDS]
        out.append("}\n\n}  // namespace diopi\n}  // namespace torch_dipu\n")
        files.append("".join(out))
    main = [
        "// Generated by gen_diopi.py from diopi_functions.yaml: do not edit.\n",
        "#include <torch/library.h>\n\n",
        "namespace torch_dipu {\nnamespace diopi {\n\n",
    ]
    main += [f"void register_generated_{k}(torch::Library& lib);\n" for k in range(SHARDS)]
    main.append("\n// Registers every generated op whose DIOPI functions the library has (at import).\n")
    main.append("void register_generated(torch::Library& lib) {\n")
    main += [f"  register_generated_{k}(lib);\n" for k in range(SHARDS)]
    main.append("}\n\n}  // namespace diopi\n}  // namespace torch_dipu\n")
    files.append("".join(main))
    return files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--yaml", default=os.path.join(here, "diopi_functions.yaml"))
    ap.add_argument("--out", default=os.path.join(here, "csrc", "gen"),
                    help="the folder of the generated diopi_ops_*.cpp")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    with open(a.yaml) as f:
        spec = parse_yaml(f.read())
    if a.list:
        for e in all_ops(spec):
            print(e["aten"], " ".join(e["diopi"]))
        return
    from torchgen import local

    with local.parametrize(use_const_ref_for_mutable_tensors=False,
                           use_ilistref_for_tensor_lists=False):
        texts = generate(spec, load_schemas())
    os.makedirs(a.out, exist_ok=True)
    names = [f"diopi_ops_{k}.cpp" for k in range(SHARDS)] + ["diopi_ops_register.cpp"]
    # A file of an earlier layout would be compiled too: remove it.
    for stale in glob.glob(os.path.join(a.out, "diopi_ops*.cpp")):
        if os.path.basename(stale) not in names:
            os.remove(stale)
    for name, text in zip(names, texts):
        path = os.path.join(a.out, name)
        old = None
        if os.path.exists(path):
            with open(path) as f:
                old = f.read()
        if old != text:  # rewritten only when it changes, so ninja skips it
            with open(path, "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
