"""torch.compile's default backend (Inductor) on dipu.

Inductor has no code generator of its own for a PrivateUse1 device; a
backend registers one (`register_backend_for_device`), plus the snippets
its Python wrapper writes for device calls (`register_device_op_overrides`)
and a runtime interface (`register_interface_for_device`).

What dipu registers depends on the vendor's memory:

* Host-accessible memory (a vendor that reports the
  "host-accessible-memory" capability, as the `host` vendor does, whose
  device memory is ordinary process memory): Inductor's C++/OpenMP code generator runs on
  dipu tensors. Generated kernels are plain host functions called on the
  Python thread, while dipu's own kernels run asynchronously on streams;
  the wrapper therefore synchronizes the current stream before each run
  of generated kernels (once, until stream work is queued again: see
  `DipuWrapperCodegen`). A generated kernel returns only when its outputs
  are written, so stream work queued after it sees them.
* Any other vendor: host code cannot read its memory, so the first
  kernel Inductor would generate for dipu raises DipuInductorUnsupported,
  whose message names `aot_eager`; `backend="aot_eager"` generates no
  code and works on every vendor. A compiled module loaded from
  Inductor's cache checks the vendor too, so C++ code compiled under the
  host vendor never runs on another one. Graphs whose dipu work is all
  extern kernels (ATen calls) compile and run on every vendor.

The registration runs lazily: Inductor calls `torch.dipu._inductor_backend_init`
on its first compile (see `install`); it starts no dipu runtime, so a
CPU-only compile in a process that imported torch_dipu leaves dipu alone.
"""

from __future__ import annotations

from typing import Any

import torch

# Whether the vendor's device memory is host-accessible (asked once).
_host_accessible: bool | None = None


def vendor_memory_is_host_accessible() -> bool:
    """Whether the dipu vendor reports its device memory as host-accessible
    (the "host-accessible-memory" capability), which Inductor's C++ kernels
    can run on."""
    global _host_accessible
    if _host_accessible is None:
        _host_accessible = "host-accessible-memory" in torch.dipu.vendor_capabilities()
    return _host_accessible


class DipuInductorUnsupported(RuntimeError):
    """The default torch.compile backend cannot generate code for this vendor."""


def require_host_memory() -> None:
    """Raises DipuInductorUnsupported unless the vendor's device memory is
    host memory (Inductor's generated C++ kernels need it)."""
    if not vendor_memory_is_host_accessible():
        raise DipuInductorUnsupported(
            f"torch.compile's default backend (inductor) has no code generator for "
            f"dipu vendor {torch.dipu.vendor_name()!r}: its device memory is not host "
            f"memory (the vendor does not report the host-accessible-memory capability), "
            f"and Inductor's C++ kernels can only run on such memory. Use "
            f"torch.compile(model, backend='aot_eager') (or a backend the vendor "
            f"provides) on this vendor."
        )


def sync_before_host_kernel(device_index: int) -> None:
    """Waits until the work queued on `device_index`'s current stream is
    done, so that a generated host kernel sees its inputs and does not
    overwrite memory queued work still reads. Raises DipuInductorUnsupported
    first if the vendor's memory is not host memory (a module from
    Inductor's cache compiled under the host vendor)."""
    require_host_memory()
    torch.accelerator.current_stream(device_index).synchronize()


def _device_interface() -> type:
    from torch._dynamo.device_interface import DeviceInterface

    dipu = torch.dipu

    class DipuInterface(DeviceInterface):
        """torch.dipu as Inductor and Dynamo see it."""

        device = dipu.device  # type: ignore[assignment]
        Event = dipu.Event  # type: ignore[assignment]
        Stream = dipu.Stream  # type: ignore[assignment]

        class Worker:
            """Device queries that compile workers may make."""

            @staticmethod
            def set_device(device: int) -> None:
                dipu.set_device(device)

            @staticmethod
            def current_device() -> int:
                return dipu.current_device()

            @staticmethod
            def get_device_properties(device: Any = None) -> Any:
                return dipu.get_device_properties(device)

        @staticmethod
        def current_device() -> int:
            return dipu.current_device()

        @staticmethod
        def set_device(device: Any) -> None:
            dipu.set_device(device)

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            prev = dipu.current_device()
            if device >= 0 and device != prev:
                dipu.set_device(device)
            return prev

        @staticmethod
        def exchange_device(device: int) -> int:
            prev = dipu.current_device()
            if device != prev:
                dipu.set_device(device)
            return prev

        @staticmethod
        def device_count() -> int:
            return dipu.device_count()

        @staticmethod
        def is_available() -> bool:
            return dipu.is_available()

        @staticmethod
        def stream(stream: torch.Stream) -> Any:
            return dipu.stream(stream)

        @staticmethod
        def current_stream() -> torch.Stream:
            return dipu.current_stream()

        @staticmethod
        def set_stream(stream: torch.Stream) -> None:
            dipu.set_stream(stream)

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            dipu.set_stream(dipu.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return dipu.current_stream(device_idx).dipu_stream

        @staticmethod
        def synchronize(device: Any = None) -> None:
            dipu.synchronize(device)

        @staticmethod
        def get_compute_capability(device: Any = None) -> Any:
            major, minor = dipu.get_device_capability(device)
            return major * 10 + minor

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return dipu.is_bf16_supported()

        @staticmethod
        def memory_allocated(device: Any = None) -> int:
            return dipu.memory_allocated(device)

    return DipuInterface


def _register_codegen() -> None:
    from textwrap import dedent

    from torch._inductor.codegen.common import (
        DeviceOpOverrides,
        register_backend_for_device,
        register_device_op_overrides,
    )
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
    from torch._inductor.virtualized import V

    class DipuDeviceOpOverrides(DeviceOpOverrides):
        """The Python snippets Inductor's wrapper writes for dipu."""

        def import_get_raw_stream_as(self, name: str) -> str:
            return f"from torch_dipu._inductor import get_raw_stream as {name}"

        def set_device(self, device_idx: Any) -> str:
            return f"torch.dipu.set_device({device_idx})"

        def synchronize(self) -> str:
            return "torch.dipu.synchronize()"

        def device_guard(self, device_idx: Any) -> str:
            return f"torch.dipu.device({device_idx})"

        def current_stream(self) -> str:
            return "torch.dipu.current_stream()"

        def aten_device_type(self) -> str:
            return "at::kPrivateUse1"

        def cpp_kernel_type(self) -> str:
            return "void*"

    from torch._inductor.codegen import wrapper as _w

    # Wrapper lines that queue no stream work: after them, a stream
    # synchronized before the previous host kernel is still idle.
    quiet_lines = tuple(
        getattr(_w, name)
        for name in (
            "MemoryPlanningLine",
            "FreeLine",
            "CommentLine",
            "AssertSizeStrideLine",
            "GroupedAssertSizeStrideLine",
            "AssertAlignmentLine",
            "KernelDefinitionLine",
        )
        if hasattr(_w, name)
    )

    class _DipuKernelCalls:
        """Kernel calls of a wrapper: a generated kernel on dipu runs as a
        host (C++) kernel, after the current stream is synchronized.

        One synchronization covers a run of host kernels: `_dipu_idle` is
        set after a host kernel call and cleared by any later line that may
        queue stream work (an extern kernel, a fallback op, a copy: every
        line except allocations, frees, asserts and comments)."""

        _dipu_idle = False

        def writeline(self, line):
            if not isinstance(line, quiet_lines):
                self._dipu_idle = False
            super().writeline(line)

        def generate_kernel_call(self, kernel_name, call_args, *, device=None, **kwargs):
            device = device or V.graph.get_current_device_or_throw()
            kwargs["device"] = device
            if device.type != "dipu":
                super().generate_kernel_call(kernel_name, call_args, **kwargs)
                return
            if not self._dipu_idle:
                index = 0 if device.index is None else device.index
                self.writeline(f"torch_dipu._inductor.sync_before_host_kernel({index})")
            super().generate_kernel_call(kernel_name, call_args, **kwargs)
            self._dipu_idle = True

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, **kwargs):
            device = device or V.graph.get_current_device_or_throw()
            if device.type == "dipu":
                device = torch.device("cpu")
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)

    class DipuSubgraphWrapperCodegen(_DipuKernelCalls, SubgraphPythonWrapperCodegen):
        """A subgraph's wrapper on dipu."""

    class DipuWrapperCodegen(_DipuKernelCalls, PythonWrapperCodegen):
        """The Python wrapper of a graph on dipu."""

        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return DipuSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
            return DipuWrapperCodegen()

        def write_header(self) -> None:
            super().write_header()
            self.header.splice("import torch_dipu._inductor")

    class DipuCppScheduling(CppScheduling):
        """Inductor's C++ code generator, for dipu tensors in host memory:
        generating a kernel on another vendor raises (a graph of extern
        kernels only, which the scheduler also hands here, is fine)."""

        def codegen_node(self, node):
            require_host_memory()
            super().codegen_node(node)

        def codegen_template(self, *args, **kwargs):
            require_host_memory()
            return super().codegen_template(*args, **kwargs)

        def define_kernel(self, *args, **kwargs):
            require_host_memory()
            return super().define_kernel(*args, **kwargs)

    register_device_op_overrides("dipu", DipuDeviceOpOverrides())
    register_backend_for_device("dipu", DipuCppScheduling, DipuWrapperCodegen)
    _schedule_dipu_as_cpu()


def _schedule_dipu_as_cpu() -> None:
    """Makes Inductor's scheduler treat dipu nodes as the C++ kernels they
    become. Its CPU-only limits (no loop reordering, index inversion or
    reindexing, which assume Triton's loop groups) are keyed on
    `BaseSchedulerNode.is_cpu()`, i.e. on the device type "cpu"; without
    this, fusing a reduction with a pointwise node on dipu fails inside
    the scheduler."""
    from torch._inductor.scheduler import BaseSchedulerNode

    if getattr(BaseSchedulerNode.is_cpu, "_dipu", False):
        return

    def is_cpu(self) -> bool:
        device = self.get_device()
        return device is not None and device.type in ("cpu", "dipu")

    is_cpu._dipu = True  # type: ignore[attr-defined]
    BaseSchedulerNode.is_cpu = is_cpu


def get_raw_stream(device_index: int) -> int:
    """The vendor handle of `device_index`'s current stream."""
    return torch.dipu.current_stream(device_index).dipu_stream


def _inductor_backend_init() -> None:
    """Inductor's hook for the PrivateUse1 device, called on its first
    compile: registers the device interface and the code generator (which
    checks the vendor when it is first used for dipu)."""
    register_device_interface()
    _register_codegen()


_interface_registered = False


def register_device_interface() -> None:
    """Registers torch.dipu as Dynamo's and Inductor's device interface for
    "dipu" (once)."""
    global _interface_registered
    if _interface_registered:
        return
    from torch._dynamo.device_interface import register_interface_for_device

    register_interface_for_device("dipu", _device_interface())
    _interface_registered = True


def install(device_module: Any) -> None:
    """Makes torch.compile find dipu: sets Inductor's backend hook on
    `device_module` (torch.dipu). Nothing is imported until the first
    compile, so `import torch_dipu` stays as fast as before."""
    device_module._inductor_backend_init = _inductor_backend_init
