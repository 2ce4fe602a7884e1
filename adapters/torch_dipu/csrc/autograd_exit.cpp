// torch_dipu._C._finish_autograd_threads: what the exit hook of torch_dipu
// (torch_dipu/__init__.py) runs before the interpreter finalizes, so no
// dipu autograd thread takes the GIL while it does.
//
// Why: torch's autograd thread of a device (pt_autograd_<index>) wakes the
// thread that called backward() and only then drops its reference to the
// backward's GraphTask. When the caller has dropped its own first, the
// autograd thread runs ~GraphTask, which releases Python objects the task
// captured: the contextvars.Context that torch stashes in the thread-local
// state at every backward, callbacks queued with queue_callback. Each
// release takes the GIL inside a destructor. In an interpreter that has
// started to finalize, taking the GIL ends the thread (pthread_exit); the
// unwinding reaches the noexcept destructor and calls std::terminate:
// "terminate called without an active exception" at the end of a script
// whose last backward ran on dipu (tests/exit_race.py forces the order).
//
// The fix: a backward whose only node runs on a device's autograd thread
// queues behind whatever that thread was doing; once it is back, the
// thread has dropped every earlier GraphTask. It runs on a thread of its
// own, which holds no GIL and has no Python state to capture, so its own
// GraphTask releases nothing of Python's, whichever thread drops it last.
#include <torch/csrc/autograd/autograd.h>
#include <torch/extension.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common.h"

namespace torch_dipu {
namespace {

// Whether torch's autograd engine started its device threads, which it
// names pt_autograd_<index> (true when that cannot be read).
bool autograd_threads_started() {
  std::error_code ec;
  std::filesystem::directory_iterator task("/proc/self/task", ec);
  if (ec) return true;
  for (; task != std::filesystem::directory_iterator(); task.increment(ec)) {
    if (ec) return true;
    std::ifstream comm(task->path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name.rfind("pt_autograd_", 0) == 0) return true;
  }
  return static_cast<bool>(ec);
}

// A backward on `device` whose one node (alias's, the gradient passed
// through) runs on the device's autograd thread and launches no kernel.
void fence(int32_t device) {
  auto options = at::TensorOptions().dtype(at::kFloat).device(dipu_device(device));
  at::Tensor leaf = at::empty({}, options).requires_grad_(true);
  at::Tensor out = leaf.alias();
  torch::autograd::grad({out}, {leaf}, {at::empty({}, options)});
}

// What the fencing thread reports.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;
};

// Waits (at most `limit_s` seconds, without the GIL) until every dipu
// device's autograd thread has run a fence. "idle" when there is nothing
// to wait for (no runtime, a forked child, no autograd threads), "drained"
// once every fence ran, "timeout" (a thread still busy, e.g. with a
// backward of another Python thread), or "error: <message>".
std::string finish_autograd_threads(double limit_s) {
  // NaN or not positive: no wait; beyond a day: a day (a wait_for past
  // the clock's range would overflow).
  if (!(limit_s > 0)) return "idle";
  limit_s = std::min(limit_s, 86400.0);
  int32_t flag = 0;
  if (dipu_is_initialized(&flag) != DIPU_OK || flag == 0) return "idle";
  if (dipu_is_in_bad_fork(&flag) != DIPU_OK || flag != 0) return "idle";
  int32_t devices = 0;
  if (dipu_device_count(&devices) != DIPU_OK || devices <= 0) return "idle";
  if (!autograd_threads_started()) return "idle";

  auto outcome = std::make_shared<Outcome>();
  std::thread fencing([outcome, devices] {
    std::string error;
    try {
      for (int32_t d = 0; d < devices; ++d) fence(d);
    } catch (const c10::Error& e) {
      error = e.what_without_backtrace();
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "an unknown C++ exception";
    }
    std::lock_guard<std::mutex> lock(outcome->mu);
    outcome->error = std::move(error);
    outcome->done = true;
    outcome->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(outcome->mu);
  bool done = outcome->cv.wait_for(lock, std::chrono::duration<double>(limit_s),
                                   [&] { return outcome->done; });
  lock.unlock();
  if (!done) {
    // Still queued behind a busy thread: left to finish (or not) on its own.
    fencing.detach();
    return "timeout";
  }
  fencing.join();
  return outcome->error.empty() ? "drained" : "error: " + outcome->error;
}

}  // namespace

void init_autograd_exit(pybind11::module_& m) {
  m.def("_finish_autograd_threads", &finish_autograd_threads, pybind11::arg("limit_s"),
        pybind11::call_guard<pybind11::gil_scoped_release>());
}

}  // namespace torch_dipu
