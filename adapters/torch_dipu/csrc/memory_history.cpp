// Python frames in the runtime's memory history: a frames hook
// (dipu_memory_history_set_frames_hook) that walks the calling thread's
// Python frames under the GIL. A capture keeps each frame's code object (a
// reference) and instruction offset; names and lines are looked up only when
// a snapshot is taken. (torch's CapturedTraceback would do as well, but its
// first torch::symbolize sets up the native symbolizer: some 15 s on the
// 2-core machine, even for Python frames only.)
#include <Python.h>
#include <frameobject.h>
#include <torch/extension.h>

#include <new>
#include <utility>
#include <vector>

#include "common.h"

namespace torch_dipu {
namespace {

// One capture: each frame's code object (owned) and instruction offset,
// innermost first.
struct Captured {
  std::vector<std::pair<PyCodeObject*, int>> frames;
};

// Whether Python can run code now (not before start nor while it ends).
bool python_alive() { return Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0; }

size_t capture_frames(void* /*user*/) noexcept {
  // A thread Python does not know (a pure C++ thread) has no Python frames.
  if (!python_alive() || PyGILState_GetThisThreadState() == nullptr) return 0;
  auto* cap = new (std::nothrow) Captured;
  if (cap == nullptr) return 0;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyFrameObject* frame = PyThreadState_GetFrame(PyThreadState_Get());
  try {
    while (frame != nullptr) {
      PyCodeObject* code = PyFrame_GetCode(frame);  // a new reference, kept
      cap->frames.emplace_back(code, PyFrame_GetLasti(frame));
      PyFrameObject* back = PyFrame_GetBack(frame);
      Py_DECREF(frame);
      frame = back;
    }
  } catch (...) {
    // Out of memory: the frames gathered so far stay.
    Py_XDECREF(frame);
  }
  PyGILState_Release(gil);
  if (cap->frames.empty()) {
    delete cap;
    return 0;
  }
  return reinterpret_cast<size_t>(cap);
}

void symbolize_frames(void* /*user*/, size_t handle, dipu_memory_frame_sink sink,
                      void* sink_ctx) noexcept {
  if (handle == 0 || sink == nullptr || !python_alive()) return;
  const auto* cap = reinterpret_cast<const Captured*>(handle);
  PyGILState_STATE gil = PyGILState_Ensure();
  for (const auto& [code, lasti] : cap->frames) {
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* name = PyUnicode_AsUTF8(code->co_name);
    if (file == nullptr || name == nullptr) {
      PyErr_Clear();
      continue;
    }
    int line = PyCode_Addr2Line(code, lasti);
    sink(sink_ctx, file, line > 0 ? static_cast<uint32_t>(line) : 0, name);
  }
  PyGILState_Release(gil);
}

void release_frames(void* /*user*/, size_t handle) noexcept {
  auto* cap = reinterpret_cast<Captured*>(handle);
  // Once Python has ended its code objects are gone: leak the capture.
  if (cap == nullptr || !python_alive()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  for (auto& frame : cap->frames) Py_DECREF(frame.first);
  PyGILState_Release(gil);
  delete cap;
}

// Installs the hook once (the runtime keeps a copy of it).
void install_frames_hook() {
  static const bool installed = [] {
    dipu_memory_frames_hook hook{};
    hook.user = nullptr;
    hook.capture = &capture_frames;
    hook.symbolize = &symbolize_frames;
    hook.release = &release_frames;
    DIPU_CHECK(dipu_memory_history_set_frames_hook(&hook));
    return true;
  }();
  (void)installed;
}

}  // namespace

void init_memory_history(pybind11::module_& m) {
  // `stacks`: DIPU_MEMORY_HISTORY_NATIVE and/or DIPU_MEMORY_HISTORY_FRAMEWORK
  // (Python frames through the hook above).
  m.def("_record_memory_history_stacks",
        torch::wrap_pybind_function([](int64_t max_entries, uint32_t stacks) {
          if ((stacks & DIPU_MEMORY_HISTORY_FRAMEWORK) != 0) install_frames_hook();
          DIPU_CHECK(dipu_memory_record_history_stacks(max_entries, stacks));
        }));
  m.attr("_MEMORY_HISTORY_NATIVE") = DIPU_MEMORY_HISTORY_NATIVE;
  m.attr("_MEMORY_HISTORY_FRAMEWORK") = DIPU_MEMORY_HISTORY_FRAMEWORK;
}

}  // namespace torch_dipu
