// Python frames in the runtime's memory history: a frames hook
// (dipu_memory_history_set_frames_hook) over torch's CapturedTraceback.
// Each recorded event gathers the Python frames as code objects and
// instruction offsets (cheap, under the GIL); names and lines are looked
// up only when a snapshot is taken. torch frees a traceback released
// without the GIL later, under the GIL.
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <memory>

#include "common.h"

namespace torch_dipu {
namespace {

using Traceback = std::shared_ptr<torch::CapturedTraceback>;

size_t capture_frames(void* /*user*/) noexcept {
  try {
    if (!Py_IsInitialized()) return 0;
    Traceback tb = torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false,
                                                    /*cpp=*/false);
    if (!tb) return 0;
    return reinterpret_cast<size_t>(new Traceback(std::move(tb)));
  } catch (...) {
    // No frames for this event rather than an exception through the runtime.
    return 0;
  }
}

void symbolize_frames(void* /*user*/, size_t handle, dipu_memory_frame_sink sink,
                      void* sink_ctx) noexcept {
  if (handle == 0 || sink == nullptr || !Py_IsInitialized()) return;
  try {
    auto* tb = reinterpret_cast<Traceback*>(handle);
    std::vector<torch::CapturedTraceback*> one{tb->get()};
    torch::SymbolizedTracebacks st = torch::symbolize(one);
    if (st.tracebacks.empty()) return;
    for (uint64_t i : st.tracebacks[0]) {
      const auto& f = st.all_frames.at(i);
      sink(sink_ctx, f.filename.c_str(), static_cast<uint32_t>(f.lineno), f.funcname.c_str());
    }
  } catch (...) {
    // The frames named so far stay; a snapshot is not worth a crash.
  }
}

void release_frames(void* /*user*/, size_t handle) noexcept {
  // After the interpreter is gone its code objects are too: leak the handle.
  if (handle == 0 || !Py_IsInitialized()) return;
  try {
    delete reinterpret_cast<Traceback*>(handle);
  } catch (...) {
  }
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
