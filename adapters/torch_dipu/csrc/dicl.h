// The "dicl" c10d backend over dipu-rs's process group (torch.distributed
// on every dipu-rs vendor). Only the dicl_*.cpp units include this header:
// c10d's headers are costly to compile.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common.h"

namespace torch_dipu::dicl {

// A dipu_store whose operations call `store` (any c10d::Store: the
// PrefixStore over file, TCP or hash stores torch hands a backend). A
// failing or timed-out store call becomes the error of the collective
// that made it.
dipu_store* make_store(c10::intrusive_ptr<c10d::Store> store,
                       std::chrono::milliseconds timeout);

// The profiler's name of a dicl operation ("dicl:all_reduce", ...: the
// names ProcessGroupGloo and ProcessGroupNCCL use, with dicl's prefix).
const char* profiling_title(c10d::OpType type);

// The Work of one dicl collective. `work` may be null for an operation
// that already finished on the host (a barrier, CPU tensors staged
// through the device). Under torch's profiler it records one async event
// named profiling_title(type) with the shapes of `inputs`.
class Work final : public c10d::Work {
 public:
  Work(int rank, c10d::OpType type, dipu_work* work, std::vector<at::Tensor> outputs,
       c10::intrusive_ptr<c10::ivalue::Future> future, std::chrono::milliseconds timeout,
       const std::vector<at::Tensor>& inputs = {}, int source_rank = -1);
  ~Work() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  // Without a timeout: the current stream waits for the operation (the
  // host does not). With one: the host waits, up to it.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  void blockCurrentStream() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  float getDuration() const override;
  std::vector<at::Tensor> result() override;
  std::chrono::milliseconds getTimeout() const override;
  // The sender of a recv from any source; -1 for other operations.
  int sourceRank() const override;

 private:
  // Records and throws the failure of `call`.
  [[noreturn]] void fail(const char* call, dipu_status status) const;

  dipu_work* work_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::chrono::milliseconds timeout_;
  int source_rank_;
  mutable std::mutex mu_;
  mutable std::exception_ptr error_;
};

// One rank of a dicl group: a dipu process group per device it is used on
// (made on first use, in the same order on every rank), over the store
// torch gave it.
class Backend final : public c10d::Backend {
 public:
  Backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
          std::chrono::milliseconds timeout);
  ~Backend() override;

  const std::string getBackendName() const override { return "dicl"; }
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  // A recv from whichever rank sends first: every send counts itself on
  // the store (a counter per sender, receiver and tag), and the receiver
  // polls the counters of the other ranks for one it has not consumed,
  // then receives from that rank. Fails after the group's timeout.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  // How many operations this rank has issued (equal on every rank when
  // the ranks agree on the sequence of collectives).
  uint64_t getSequenceNumberForGroup() override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void abort() override;
  void shutdown() override;

  // One C call of a collective on `group` over `t` (the operation's
  // tensors, staged on the device).
  using Launch = std::function<dipu_status(dipu_process_group* group,
                                           const std::vector<at::Tensor>& t, dipu_work** out)>;

 private:
  // The group of `device`, created on first use.
  dipu_process_group* group(int32_t device);
  // Runs `launches` (several: as one coalesced batch) over `tensors` on
  // the group of their device, and returns the Work. CPU tensors are
  // copied to the current device, the operation is waited for on the
  // host, and the tensors `is_output` marks are copied back.
  c10::intrusive_ptr<c10d::Work> run(const char* name, c10d::OpType type,
                                     std::vector<at::Tensor> tensors,
                                     std::vector<bool> is_output,
                                     const std::vector<Launch>& launches,
                                     int source_rank = -1);
  // The store key counting the sends from `src` to `dst` with `tag`.
  static std::string sent_key(int src, int dst, int tag);

  c10::intrusive_ptr<c10d::Store> c10d_store_;
  std::atomic<uint64_t> seq_{0};
  // Per (sender, tag): the sends this rank has received so far.
  std::map<std::pair<int, int>, int64_t> received_;

  dipu_store* store_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::map<int32_t, dipu_process_group*> groups_;
  int created_ = 0;
  std::optional<std::string> aborted_;
  // An open startCoalescing batch: the group it runs on, once known.
  bool coalescing_ = false;
  dipu_process_group* batch_group_ = nullptr;
  std::vector<at::Tensor> batch_outputs_;
};

}  // namespace torch_dipu::dicl
