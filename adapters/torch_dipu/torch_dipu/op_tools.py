"""torch_dipu.op_tools: the op_tools package shipped with torch_dipu
(docs/op-tools.md)."""

import sys

import op_tools as _op_tools

sys.modules[__name__] = _op_tools
