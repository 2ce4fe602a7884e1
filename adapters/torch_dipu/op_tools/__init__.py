"""op_tools: per-op debugging tools at the level a model author reads
(`torch.Tensor.add`, `torch.nn.functional.linear`), each a
TorchFunctionMode usable as `with OpX(): ...` or `t = OpX(); t.start();
...; t.stop()`. Shipped with torch_dipu, importable as `op_tools` and as
`torch_dipu.op_tools`; docs/op-tools.md describes the tools, their
environment variables and their files."""

import torch_dipu  # noqa: F401  (the "dipu" device, as `import ditorch` gives one)

from .apply import apply_feature
from .autocompare import OpAutoCompare
from .capture import OpCapture
from .fallback import OpFallback
from .layers import LayerReport, compare_layers
from .measure import OpTimeMeasure
from .others import OpDtypeCast, OpObserve, OpOverflowCheck
from ._common import is_opname_match

__all__ = ["OpAutoCompare", "OpCapture", "OpFallback", "OpTimeMeasure", "OpDtypeCast",
           "OpObserve", "OpOverflowCheck", "apply_feature", "is_opname_match", "compare_layers", "LayerReport"]
