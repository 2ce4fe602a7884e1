// torch_dipu._C: the Python side's view of the runtime (the one unit with
// pybind11). Everything else registers itself when the library loads.
#include <ATen/core/CachingHostAllocator.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include <atomic>
#include <string>
#include <tuple>
#include <vector>

#include "common.h"
#include "diopi.h"
#include "generator.h"

namespace torch_dipu {
namespace {

// Whether this is a child forked after the parent created the runtime
// (the runtime detects it, for every framework and vendor).
bool is_in_bad_fork() {
  int32_t bad = 0;
  return dipu_is_in_bad_fork(&bad) == DIPU_OK && bad != 0;
}

int32_t device_count() {
  int32_t n = 0;
  DIPU_CHECK(dipu_device_count(&n));
  return n;
}

std::string vendor_name() {
  size_t needed = 0;
  DIPU_CHECK(dipu_vendor_name(nullptr, 0, &needed));
  std::string buf(needed, '\0');
  DIPU_CHECK(dipu_vendor_name(buf.data(), buf.size(), &needed));
  buf.resize(needed > 0 ? needed - 1 : 0);
  return buf;
}

uint32_t vendor_capabilities() {
  uint32_t caps = 0;
  DIPU_CHECK(dipu_vendor_capabilities(&caps));
  return caps;
}

py::tuple device_properties(int32_t device) {
  dipu_device_properties p{};
  DIPU_CHECK(dipu_device_get_properties(device, &p));
  return py::make_tuple(std::string(p.name), p.total_memory, p.major, p.minor,
                        p.multiprocessor_count);
}

std::string memory_snapshot(int32_t device) {
  size_t needed = 0;
  DIPU_CHECK(dipu_memory_snapshot_json(device, nullptr, 0, &needed));
  for (;;) {
    std::string buf(needed, '\0');
    dipu_status st = dipu_memory_snapshot_json(device, buf.data(), buf.size(), &needed);
    if (st == DIPU_OK) {
      buf.resize(needed > 0 ? needed - 1 : 0);
      return buf;
    }
    // The snapshot grew in between: ask again with the new size.
    if (st != DIPU_STATUS_INVALID_ARGUMENT || needed <= buf.size()) {
      throw_status("dipu_memory_snapshot_json", st);
    }
  }
}

py::dict stat_dict(const at::Stat& s) {
  py::dict d;
  d["current"] = s.current;
  d["peak"] = s.peak;
  d["allocated"] = s.allocated;
  d["freed"] = s.freed;
  return d;
}

// The pinned allocator's statistics, through the at::HostAllocator
// registered for dipu (what torch's own host-memory functions reach).
py::dict host_memory_stats() {
  at::HostStats s = at::getHostAllocator(kDipu)->get_stats();
  py::dict d;
  d["active_requests"] = stat_dict(s.active_requests);
  d["active_bytes"] = stat_dict(s.active_bytes);
  d["allocations"] = stat_dict(s.allocations);
  d["allocated_bytes"] = stat_dict(s.allocated_bytes);
  d["num_host_alloc"] = s.num_host_alloc;
  d["num_host_free"] = s.num_host_free;
  return d;
}

int32_t stream_priority(int32_t device, int64_t id) {
  TORCH_CHECK(id >= 0 && id <= static_cast<int64_t>(UINT32_MAX), "bad dipu stream id ", id);
  dipu_stream s{};
  DIPU_CHECK(dipu_stream_from_id(device, static_cast<uint32_t>(id), &s));
  int32_t p = 0;
  DIPU_CHECK(dipu_stream_priority(s, &p));
  return p;
}

// The c10::Event inside a torch.Event (or a subclass: torch.dipu.Event).
const c10::Event& event_of(py::handle obj, const char* what) {
  TORCH_CHECK_TYPE(THPEvent_Check(obj.ptr()), what, " must be a torch.Event, got ",
                   py::str(py::type::of(obj)).cast<std::string>());
  return reinterpret_cast<THPEvent*>(obj.ptr())->event;
}

}  // namespace
}  // namespace torch_dipu

namespace torch_dipu {
// torch_dipu._C._dicl_create (dicl_python.cpp).
void init_dicl(pybind11::module_& m);
// torch_dipu._C._profiler_* (kineto.cpp).
void init_profiler(pybind11::module_& m);
void init_memory_history(pybind11::module_& m);
// torch_dipu._C._finish_autograd_threads (autograd_exit.cpp).
void init_autograd_exit(pybind11::module_& m);
}  // namespace torch_dipu

PYBIND11_MODULE(_C, m) {
  using namespace torch_dipu;
  m.doc() = "torch_dipu's bindings to the dipu-rs runtime";
  init_dicl(m);
  init_profiler(m);
  init_memory_history(m);
  init_autograd_exit(m);
  m.def("_device_count", torch::wrap_pybind_function([] { return device_count(); }));
  m.def("_vendor_name", torch::wrap_pybind_function(vendor_name));
  m.def("_vendor_capabilities", torch::wrap_pybind_function(vendor_capabilities));
  m.def("_version", [] { return std::string(dipu_version()); });
  m.def("_is_initialized", [] {
    int32_t init = 0;
    return dipu_is_initialized(&init) == DIPU_OK && init != 0;
  });
  m.def("_is_in_bad_fork", [] { return is_in_bad_fork(); });
  m.def("_device_count_without_init", torch::wrap_pybind_function([] {
          int32_t n = 0;
          DIPU_CHECK(dipu_device_count_without_init(&n));
          return n;
        }));
  m.def("_manual_seed_all", torch::wrap_pybind_function([](uint64_t seed) {
          DIPU_CHECK(dipu_generator_manual_seed_all(seed));
        }));
  m.def("_device_properties", torch::wrap_pybind_function(device_properties));
  m.def("_get_default_generator", torch::wrap_pybind_function([](int32_t device) {
          const at::Generator& gen = default_generator(static_cast<c10::DeviceIndex>(device));
          return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
        }));
  m.def("_set_memory_fraction", torch::wrap_pybind_function([](double fraction, int32_t d) {
          DIPU_CHECK(dipu_memory_set_fraction(d, fraction));
        }));
  m.def("_memory_snapshot", torch::wrap_pybind_function(memory_snapshot));
  m.def("_dump_memory_snapshot", torch::wrap_pybind_function([](const std::string& path) {
          DIPU_CHECK(dipu_memory_dump_snapshot(path.c_str()));
        }));
  m.def("_host_memory_stats", torch::wrap_pybind_function(host_memory_stats));
  m.def("_host_empty_cache", torch::wrap_pybind_function(
                                  [] { at::getHostAllocator(kDipu)->empty_cache(); }));
  m.def("_host_reset_peak_stats", torch::wrap_pybind_function(
                                      [] { at::getHostAllocator(kDipu)->reset_peak_stats(); }));
  m.def("_host_reset_accumulated_stats", torch::wrap_pybind_function([] {
          at::getHostAllocator(kDipu)->reset_accumulated_stats();
        }));
  m.def("_stream_priority", torch::wrap_pybind_function(stream_priority));
  m.def("_stream_priority_range", torch::wrap_pybind_function([](int32_t device) {
          int32_t least = 0, greatest = 0;
          DIPU_CHECK(dipu_stream_priority_range(device, &least, &greatest));
          return py::make_tuple(least, greatest);
        }));
  m.def("_stream_from_raw", torch::wrap_pybind_function([](int32_t device, uint64_t raw) {
          dipu_stream s{};
          DIPU_CHECK(dipu_stream_from_raw(device, raw, &s));
          return py::make_tuple(static_cast<int64_t>(s.id), s.device);
        }));
  m.def("_stream_raw", torch::wrap_pybind_function([](int32_t device, int64_t id) {
          TORCH_CHECK(id >= 0 && id <= static_cast<int64_t>(UINT32_MAX), "bad dipu stream id ", id);
          dipu_stream s{};
          DIPU_CHECK(dipu_stream_from_id(device, static_cast<uint32_t>(id), &s));
          return s.raw;
        }));
  m.def("_event_elapsed_time", torch::wrap_pybind_function([](py::handle start, py::handle end) {
          return static_cast<double>(
              event_of(start, "start").elapsedTime(event_of(end, "end")));
        }));
  m.def("_pool_stream", torch::wrap_pybind_function([](int32_t device, bool high) {
          dipu_stream s{};
          DIPU_CHECK(dipu_stream_from_pool(device, high ? 1 : 0, &s));
          return py::make_tuple(static_cast<int64_t>(s.id), s.device);
        }));
  m.def("_diopi_init", torch::wrap_pybind_function([] { diopi::init(); }));
  m.def("_diopi_library", [] {
    return py::make_tuple(diopi::library_path(), diopi::open_error());
  });
  m.def("_diopi_ops", [] {
    py::list out;
    for (const auto& r : diopi::records()) out.append(py::make_tuple(r.aten, r.diopi, r.path));
    return out;
  });
  m.def("_synchronize", torch::wrap_pybind_function([](int32_t d) {
          DIPU_CHECK(dipu_device_synchronize(d));
        }));
}
