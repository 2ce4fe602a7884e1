// The Python side of the dicl backend: torch_dipu._C._dicl_create, which
// torch_dipu.distributed registers with torch.distributed as "dicl".
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "dicl.h"

namespace torch_dipu {

void init_dicl(pybind11::module_& m) {
  m.def(
      "_dicl_create",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::duration<float> timeout) -> c10::intrusive_ptr<c10d::Backend> {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
        return c10::make_intrusive<dicl::Backend>(store, rank, size, ms);
      },
      pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("world_size"),
      pybind11::arg("timeout"), pybind11::call_guard<pybind11::gil_scoped_release>());
}

}  // namespace torch_dipu
