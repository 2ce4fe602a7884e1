// The runtime trace in torch: torch_dipu._C._profiler_* (torch.dipu.profiler)
// and a kineto child profiler registered for PrivateUse1, so that
// torch.profiler.profile(activities=[ProfilerActivity.PrivateUse1]) puts
// the runtime's events (vendor calls, device times per stream, allocator
// events, flows from event records to waits) into torch's own trace.
#ifndef USE_KINETO
#define USE_KINETO 1
#endif

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/utils/pybind.h>

#include <unistd.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>
#include <time_since_epoch.h>

#include "common.h"

namespace torch_dipu {
namespace {

// The pid of device N's process in the runtime's own trace files.
constexpr int64_t kDevicePidBase = int64_t{1} << 24;

uint64_t dipu_now() {
  uint64_t ns = 0;
  DIPU_CHECK(dipu_profiler_now_ns(&ns));
  return ns;
}

// Unix nanoseconds of a trace-clock time, through the offset of now.
struct ClockOffset {
  int64_t offset;
  ClockOffset() {
    int64_t unix_now = libkineto::timeSinceEpoch(std::chrono::system_clock::now());
    offset = unix_now - static_cast<int64_t>(dipu_now());
  }
  int64_t unix_ns(uint64_t ns) const { return static_cast<int64_t>(ns) + offset; }
};

std::vector<dipu_trace_event> read_all() {
  std::vector<dipu_trace_event> out;
  std::vector<dipu_trace_event> buf(4096);
  for (;;) {
    size_t got = 0;
    DIPU_CHECK(dipu_profiler_read(out.size(), buf.data(), buf.size(), &got));
    if (got == 0) break;
    out.insert(out.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(got));
  }
  return out;
}

class DipuSession : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    started_here_ = !recording_;
    DIPU_CHECK(dipu_profiler_start());
    recording_ = true;
    start_ns_ = dipu_now();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    stop_ns_ = dipu_now();
    if (started_here_) {
      DIPU_CHECK(dipu_profiler_stop());
      recording_ = false;
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    try {
      ClockOffset clock;
      span_ = std::make_unique<libkineto::TraceSpan>(clock.unix_ns(start_ns_),
                                                     clock.unix_ns(stop_ns_), "dipu");
      const int64_t host_pid = getpid();
      for (const dipu_trace_event& e : read_all()) {
        if (e.ts_ns < start_ns_ || e.ts_ns > stop_ns_) continue;
        const bool host = e.device < 0;
        auto type = host ? libkineto::ActivityType::PRIVATEUSE1_RUNTIME
                         : libkineto::ActivityType::CONCURRENT_KERNEL;
        auto a = std::make_unique<libkineto::GenericTraceActivity>(*span_, type, e.name);
        a->startTime = clock.unix_ns(e.ts_ns);
        a->endTime = a->startTime + static_cast<int64_t>(e.dur_ns);
        a->device = static_cast<int32_t>(host ? host_pid : kDevicePidBase + e.device);
        a->resource = static_cast<int64_t>(e.track);
        a->threadId = static_cast<int32_t>(e.track);
        a->addMetadataQuoted("dipu_category", e.category);
        if (e.kind == 2 || e.kind == 3) {
          a->flow.id = static_cast<uint32_t>(e.flow_id);
          a->flow.type = libkineto::kLinkAsyncCpuGpu;
          a->flow.start = e.kind == 2;
        }
        if (!host) streams_.insert({e.device, e.track});
        logger.handleGenericActivity(*a);
        activities_.push_back(std::move(a));
      }
    } catch (const std::exception& ex) {
      errors_.push_back(ex.what());
      status_ = libkineto::TraceStatus::ERROR;
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{kDevicePidBase, kDevicePidBase, "dipu device 0", "dipu"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const auto& [device, stream] : streams_) {
      std::string name = stream == 0 ? "dipu default stream" : "dipu stream " + std::to_string(stream);
      out.push_back(libkineto::ResourceInfo{static_cast<int64_t>(stream), static_cast<int64_t>(stream),
                                            kDevicePidBase + device, name});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

 private:
  static inline bool recording_ = false;
  bool started_here_ = false;
  uint64_t start_ns_ = 0;
  uint64_t stop_ns_ = 0;
  std::vector<std::string> errors_;
  std::unique_ptr<libkineto::TraceSpan> span_;
  std::vector<std::unique_ptr<libkineto::GenericTraceActivity>> activities_;
  std::set<std::pair<int32_t, uint64_t>> streams_;
};

class DipuKinetoProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    for (auto t : activity_types) {
      if (activities_.count(t) != 0) return std::make_unique<DipuSession>();
    }
    return nullptr;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t ts_ms, int64_t duration_ms, const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"dipu"};
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
                                                libkineto::ActivityType::PRIVATEUSE1_DRIVER};
};

}  // namespace

REGISTER_PRIVATEUSE1_PROFILER(DipuKinetoProfiler);

// torch_dipu._C._profiler_* (torch.dipu.profiler).
void init_profiler(pybind11::module_& m) {
  m.def("_profiler_start", torch::wrap_pybind_function([] { DIPU_CHECK(dipu_profiler_start()); }));
  m.def("_profiler_stop", torch::wrap_pybind_function([] { DIPU_CHECK(dipu_profiler_stop()); }));
  m.def("_profiler_clear", torch::wrap_pybind_function([] { DIPU_CHECK(dipu_profiler_clear()); }));
  m.def("_profiler_set_capacity", torch::wrap_pybind_function([](size_t n) {
          DIPU_CHECK(dipu_profiler_set_capacity(n));
        }));
  m.def("_profiler_dump", torch::wrap_pybind_function([](const std::string& path) {
          DIPU_CHECK(dipu_profiler_dump(path.c_str()));
        }));
  m.def("_profiler_events", torch::wrap_pybind_function([] {
          size_t n = 0;
          DIPU_CHECK(dipu_profiler_events(&n));
          return n;
        }));
}

}  // namespace torch_dipu
