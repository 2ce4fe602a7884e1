// dicl::Backend's machinery (groups per device, staging, coalescing,
// abort) and dicl::Work over a dipu_work. The collectives are in
// dicl_collectives.cpp.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "dicl.h"

namespace torch_dipu::dicl {


const char* profiling_title(c10d::OpType type) {
  using c10d::OpType;
  switch (type) {
    case OpType::BROADCAST: return "dicl:broadcast";
    case OpType::ALLREDUCE: return "dicl:all_reduce";
    case OpType::ALLREDUCE_COALESCED: return "dicl:all_reduce_coalesced";
    case OpType::REDUCE: return "dicl:reduce";
    case OpType::ALLGATHER: return "dicl:all_gather";
    case OpType::_ALLGATHER_BASE: return "dicl:all_gather_into_tensor";
    case OpType::ALLGATHER_COALESCED: return "dicl:all_gather_coalesced";
    case OpType::GATHER: return "dicl:gather";
    case OpType::SCATTER: return "dicl:scatter";
    case OpType::REDUCE_SCATTER: return "dicl:reduce_scatter";
    case OpType::_REDUCE_SCATTER_BASE: return "dicl:reduce_scatter_tensor";
    case OpType::ALLTOALL_BASE:
    case OpType::ALLTOALL: return "dicl:all_to_all";
    case OpType::SEND: return "dicl:send";
    case OpType::RECV: return "dicl:recv";
    case OpType::RECVANYSOURCE: return "dicl:recvAnySource";
    case OpType::BARRIER: return "dicl:barrier";
    case OpType::COALESCED: return "dicl:coalesced";
    default: return "dicl:unknown";
  }
}

Work::Work(int rank, c10d::OpType type, dipu_work* work, std::vector<at::Tensor> outputs,
           c10::intrusive_ptr<c10::ivalue::Future> future, std::chrono::milliseconds timeout,
           const std::vector<at::Tensor>& inputs, int source_rank)
    : c10d::Work(rank, type, profiling_title(type),
                 std::optional<std::vector<at::Tensor>>(inputs)),
      work_(work),
      outputs_(std::move(outputs)),
      future_(std::move(future)),
      timeout_(timeout),
      source_rank_(source_rank) {
  // The profiler's event spans the host side of the operation (queued on
  // the device, or done for one the host waited for); _get_duration()
  // gives the device time.
  if (recordFunctionEndCallback_) {
    recordFunctionEndCallback_();
    recordFunctionEndCallback_ = nullptr;
  }
}

Work::~Work() {
  if (work_ != nullptr) dipu_work_destroy(work_);
}

void Work::fail(const char* call, dipu_status status) const {
  std::string msg = error_message(call, status);
  std::exception_ptr e;
  try {
    C10_THROW_ERROR(DistBackendError, msg);
  } catch (...) {
    e = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = e;
  }
  std::rethrow_exception(e);
}

bool Work::isCompleted() {
  if (work_ == nullptr) return true;
  int32_t done = 0;
  dipu_status st = dipu_work_is_completed(work_, &done);
  if (st != DIPU_OK) return true;
  if (done != 0) {
    // Settled: a failure is now this work's exception.
    st = dipu_work_wait_host(work_, 1);
    if (st != DIPU_OK) {
      try {
        fail("dicl work", st);
      } catch (...) {
      }
    }
  }
  return done != 0;
}

bool Work::isSuccess() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !error_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

bool Work::wait(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }
  if (work_ == nullptr) return true;
  if (timeout == kNoTimeout) {
    synchronize();
    return true;
  }
  dipu_status st = dipu_work_wait_host(work_, std::max<int64_t>(timeout.count(), 1));
  if (st != DIPU_OK) fail("dicl work wait", st);
  return true;
}

void Work::synchronize() {
  if (work_ == nullptr) return;
  dipu_status st = dipu_work_wait(work_);
  if (st != DIPU_OK) fail("dicl work wait", st);
}

void Work::blockCurrentStream() { synchronize(); }

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() { return future_; }

float Work::getDuration() const {
  if (work_ == nullptr) return 0.0f;
  float ms = 0.0f;
  DIPU_CHECK(dipu_work_duration_ms(work_, &ms));
  return ms;
}

std::vector<at::Tensor> Work::result() { return outputs_; }

std::chrono::milliseconds Work::getTimeout() const { return timeout_; }

int Work::sourceRank() const {
  TORCH_CHECK(source_rank_ >= 0, "dicl: sourceRank() is only defined for a recv from any source");
  return source_rank_;
}


namespace {

// A Future completed with `outputs`, for CPU outputs (the host already
// waited) or an empty operation.
c10::intrusive_ptr<c10::ivalue::Future> completed(const std::vector<at::Tensor>& outputs,
                                                  std::optional<int32_t> device) {
  std::vector<c10::Device> devices;
  if (device) devices.push_back(dipu_device(*device));
  auto f = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()), devices);
  f->markCompleted(c10::IValue(outputs));
  return f;
}

// A Future completed with `outputs` once the queued operation `w` on
// dipu `device` is: its events are recorded on a pool stream that waits
// for the operation (as ProcessGroupNCCL completes its Future with the
// communication stream current), so a consumer (DDP's comm hook) waits
// for the collective while the current stream -- backward -- does not.
// The current stream waits only in Work::wait().
//
// DIPU_DICL_OVERLAP=0 restores the blocking order instead (the current
// stream waits at once), for measuring what the overlap gains.
c10::intrusive_ptr<c10::ivalue::Future> completed_after(const std::vector<at::Tensor>& outputs,
                                                        dipu_work* w, int32_t device,
                                                        const char* name) {
  static const bool overlap = [] {
    const char* v = std::getenv("DIPU_DICL_OVERLAP");
    return v == nullptr || std::string(v) != "0";
  }();
  std::optional<c10::StreamGuard> guard;
  if (overlap) {
    dipu_stream side{};
    DIPU_CHECK(dipu_stream_from_pool(device, 0, &side));
    guard.emplace(to_c10(side));
  }
  dipu_status st = dipu_work_wait(w);
  if (st != DIPU_OK) {
    std::string message = error_message(name, st);
    dipu_work_destroy(w);
    C10_THROW_ERROR(DistBackendError, message);
  }
  return completed(outputs, device);
}

// The device index of `tensors` (all on one dipu device), or nullopt for
// CPU tensors; anything else is an error naming `name`.
std::optional<int32_t> device_of(const std::vector<at::Tensor>& tensors, const char* name) {
  std::optional<c10::Device> seen;
  for (const auto& t : tensors) {
    TORCH_CHECK(t.defined(), "dicl: ", name, ": undefined tensor");
    c10::Device d = t.device();
    TORCH_CHECK(d.is_cpu() || d.type() == kDipu, "dicl: ", name,
                ": tensors must be on dipu or cpu, got one on ", d);
    TORCH_CHECK(!seen || *seen == d, "dicl: ", name, ": tensors on ", *seen, " and ", d,
                " (one device per operation)");
    TORCH_CHECK(t.is_contiguous() || t.numel() == 0, "dicl: ", name,
                ": tensors must be contiguous");
    TORCH_CHECK(!t.is_sparse(), "dicl: ", name, ": sparse tensors are not supported");
    seen = d;
  }
  if (!seen || seen->is_cpu()) return std::nullopt;
  return static_cast<int32_t>(seen->index());
}

}  // namespace

Backend::Backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                 std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      c10d_store_(store),
      store_(make_store(store, timeout)),
      timeout_(timeout) {}

Backend::~Backend() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [device, g] : groups_) dipu_process_group_destroy(g);
  groups_.clear();
  dipu_store_destroy(store_);
}

dipu_process_group* Backend::group(int32_t device) {
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK_WITH(DistBackendError, !aborted_, "dicl: process group rank ", rank_, " of ",
                   size_, ": ", aborted_.value_or(""));
  auto it = groups_.find(device);
  if (it != groups_.end()) return it->second;
  // Every rank makes its groups in the same order: the n-th group of each
  // rank meets under the same prefix.
  std::string prefix = "dicl/" + std::to_string(created_++);
  dipu_store* scoped = nullptr;
  DIPU_CHECK(dipu_store_prefix_create(prefix.c_str(), store_, &scoped));
  dipu_process_group* g = nullptr;
  dipu_status st = dipu_process_group_create(scoped, rank_, size_, device,
                                             timeout_.count() > 0 ? timeout_.count() : 0, -1, &g);
  dipu_store_destroy(scoped);
  if (st != DIPU_OK) throw_status("dipu_process_group_create", st);
  groups_[device] = g;
  return g;
}

c10::intrusive_ptr<c10d::Work> Backend::run(const char* name, c10d::OpType type,
                                            std::vector<at::Tensor> tensors,
                                            std::vector<bool> is_output,
                                            const std::vector<Launch>& launches,
                                            int source_rank) {
  std::optional<int32_t> device = device_of(tensors, name);
  seq_++;
  // The profiler records the operation's inputs (all tensors when every
  // one is also an output, as in all_reduce).
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < tensors.size(); i++) {
    if (!is_output[i]) inputs.push_back(tensors[i]);
  }
  if (inputs.empty()) inputs = tensors;
  bool cpu = !device;
  int32_t dev = device.value_or(current_device());
  std::vector<at::Tensor> outputs;
  for (size_t i = 0; i < tensors.size(); i++) {
    if (is_output[i]) outputs.push_back(tensors[i]);
  }
  std::vector<at::Tensor> staged = tensors;
  if (cpu) {
    for (auto& t : staged) t = t.to(dipu_device(dev));
  }
  dipu_process_group* g = group(dev);

  // Inside startCoalescing/endCoalescing: queue into the open batch.
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (coalescing_) {
      TORCH_CHECK(!cpu, "dicl: ", name,
                  ": CPU tensors inside startCoalescing/endCoalescing are not supported");
      TORCH_CHECK(batch_group_ == nullptr || batch_group_ == g, "dicl: ", name,
                  ": one coalesced batch must stay on one device");
      if (batch_group_ == nullptr) {
        DIPU_CHECK(dipu_process_group_start_coalescing(g));
        batch_group_ = g;
      }
      lock.unlock();
      dipu_work* w = nullptr;
      for (const auto& launch : launches) {
        if (w != nullptr) dipu_work_destroy(w);
        dipu_status st = launch(g, staged, &w);
        if (st != DIPU_OK) throw_status(name, st);
      }
      std::lock_guard<std::mutex> relock(mu_);
      batch_outputs_.insert(batch_outputs_.end(), outputs.begin(), outputs.end());
      return c10::make_intrusive<Work>(rank_, type, w, outputs, completed(outputs, dev),
                                       timeout_, inputs, source_rank);
    }
  }

  dipu_work* w = nullptr;
  if (launches.size() == 1) {
    dipu_status st = launches[0](g, staged, &w);
    if (st != DIPU_OK) throw_status(name, st);
  } else {
    DIPU_CHECK(dipu_process_group_start_coalescing(g));
    dipu_status failed = DIPU_OK;
    std::string message;
    for (const auto& launch : launches) {
      dipu_work* one = nullptr;
      failed = launch(g, staged, &one);
      if (failed != DIPU_OK) {
        message = error_message(name, failed);
        break;
      }
      dipu_work_destroy(one);
    }
    // The batch is always closed, even after a failed launch.
    dipu_status ended = dipu_process_group_end_coalescing(g, &w);
    TORCH_CHECK(failed == DIPU_OK, message);
    if (ended != DIPU_OK) throw_status(name, ended);
  }
  if (cpu) {
    dipu_status st = dipu_work_wait_host(w, 0);
    if (st != DIPU_OK) {
      std::string message = error_message(name, st);
      dipu_work_destroy(w);
      C10_THROW_ERROR(DistBackendError, message);
    }
    // The current stream waits too: the copies back are queued on it.
    st = dipu_work_wait(w);
    if (st != DIPU_OK) {
      std::string message = error_message(name, st);
      dipu_work_destroy(w);
      C10_THROW_ERROR(DistBackendError, message);
    }
    for (size_t i = 0; i < tensors.size(); i++) {
      if (is_output[i]) tensors[i].copy_(staged[i]);
    }
    return c10::make_intrusive<Work>(rank_, type, w, outputs, completed(outputs, std::nullopt),
                                     timeout_, inputs, source_rank);
  }
  // The communication stream waited for the current stream (the C call
  // does); the current stream does not wait here, so backward kernels
  // queued next overlap the collective (Work::wait() orders them).
  auto future = completed_after(outputs, w, dev, name);
  return c10::make_intrusive<Work>(rank_, type, w, outputs, std::move(future), timeout_, inputs,
                                   source_rank);
}

void Backend::startCoalescing() {
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(!coalescing_, "dicl: startCoalescing while a batch is already open");
  coalescing_ = true;
  batch_group_ = nullptr;
  batch_outputs_.clear();
}

c10::intrusive_ptr<c10d::Work> Backend::endCoalescing() {
  dipu_process_group* g = nullptr;
  std::vector<at::Tensor> outputs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TORCH_CHECK(coalescing_, "dicl: endCoalescing without startCoalescing");
    coalescing_ = false;
    g = batch_group_;
    batch_group_ = nullptr;
    outputs.swap(batch_outputs_);
  }
  if (g == nullptr) {
    return c10::make_intrusive<Work>(rank_, c10d::OpType::COALESCED, nullptr, outputs,
                                     completed(outputs, std::nullopt), timeout_);
  }
  dipu_work* w = nullptr;
  DIPU_CHECK(dipu_process_group_end_coalescing(g, &w));
  int32_t dev = 0;
  DIPU_CHECK(dipu_process_group_device(g, &dev));
  auto future = completed_after(outputs, w, dev, "endCoalescing");
  return c10::make_intrusive<Work>(rank_, c10d::OpType::COALESCED, w, outputs, std::move(future),
                                   timeout_);
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  int32_t dev = -1;
  if (opts.device && opts.device->type() == kDipu) {
    dev = device_index(*opts.device);
  } else if (!opts.device_ids.empty()) {
    dev = static_cast<int32_t>(opts.device_ids.front());
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    if (!groups_.empty()) dev = groups_.begin()->first;
  }
  if (dev < 0) dev = current_device();
  dipu_process_group* g = group(dev);
  seq_++;
  dipu_status st = dipu_process_group_barrier(g);
  if (st != DIPU_OK) C10_THROW_ERROR(DistBackendError, error_message("barrier", st));
  return c10::make_intrusive<Work>(rank_, c10d::OpType::BARRIER, nullptr,
                                   std::vector<at::Tensor>{}, completed({}, std::nullopt),
                                   timeout_);
}

uint64_t Backend::getSequenceNumberForGroup() { return seq_.load(); }

void Backend::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) aborted_ = "aborted (ProcessGroup.abort)";
  for (auto& [device, g] : groups_) dipu_process_group_abort(g, "ProcessGroup.abort");
}

void Backend::shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) aborted_ = "shut down (destroy_process_group)";
  for (auto& [device, g] : groups_) dipu_process_group_destroy(g);
  groups_.clear();
}

}  // namespace torch_dipu::dicl
