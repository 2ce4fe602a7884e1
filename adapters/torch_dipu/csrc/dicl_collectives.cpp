// dicl::Backend's collectives: each checks its arguments, maps the dtype
// and reduce op, and hands Backend::run the C call over the staged tensors.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "dicl.h"

namespace torch_dipu::dicl {
namespace {

using c10d::OpType;
using Tensors = std::vector<at::Tensor>;

// How a tensor travels: a dipu_dtype and the elements per tensor element
// (a dtype the C ABI lacks moves as bytes, when nothing reduces it).
struct Wire {
  dipu_dtype dtype;
  size_t per;
};

Wire wire(at::ScalarType st, const char* name, bool reduces) {
  switch (st) {
    case at::kHalf: return {DIPU_DTYPE_F16, 1};
    case at::kBFloat16: return {DIPU_DTYPE_BF16, 1};
    case at::kFloat: return {DIPU_DTYPE_F32, 1};
    case at::kDouble: return {DIPU_DTYPE_F64, 1};
    case at::kChar: return {DIPU_DTYPE_I8, 1};
    case at::kByte: return {DIPU_DTYPE_U8, 1};
    case at::kShort: return {DIPU_DTYPE_I16, 1};
    case at::kInt: return {DIPU_DTYPE_I32, 1};
    case at::kLong: return {DIPU_DTYPE_I64, 1};
    case at::kUInt32: return {DIPU_DTYPE_U32, 1};
    case at::kUInt64: return {DIPU_DTYPE_U64, 1};
    case at::kBool: return {DIPU_DTYPE_BOOL, 1};
    case at::kComplexFloat: return {DIPU_DTYPE_C64, 1};
    case at::kComplexDouble: return {DIPU_DTYPE_C128, 1};
    default:
      TORCH_CHECK_TYPE(!reduces, "dicl: ", name, " does not support dtype ", st);
      return {DIPU_DTYPE_U8, c10::elementSize(st)};
  }
}

const char* op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

// The C operator for `op` on `st`. PREMUL_SUM is a SUM of inputs the
// caller scaled (premul); bitwise AND/OR exist for bool only (MIN/MAX).
dipu_reduce_op reduce_op(const c10d::ReduceOp& op, at::ScalarType st, const char* name) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM: return DIPU_REDUCE_SUM;
    case c10d::ReduceOp::AVG: return DIPU_REDUCE_AVG;
    case c10d::ReduceOp::PRODUCT: return DIPU_REDUCE_PROD;
    case c10d::ReduceOp::MIN: return DIPU_REDUCE_MIN;
    case c10d::ReduceOp::MAX: return DIPU_REDUCE_MAX;
    case c10d::ReduceOp::BAND:
      if (st == at::kBool) return DIPU_REDUCE_MIN;
      break;
    case c10d::ReduceOp::BOR:
      if (st == at::kBool) return DIPU_REDUCE_MAX;
      break;
    default: break;
  }
  TORCH_CHECK_TYPE(false, "dicl: ", name, " does not support reduce op ", op_name(op.op_),
                   " on dtype ", st);
}

// `t` multiplied by PREMUL_SUM's factor (a copy: the caller's inputs stay).
at::Tensor premul(const at::Tensor& t, const c10d::ReduceOp& op) {
  auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(s != nullptr, "dicl: PREMUL_SUM without its factor");
  if (s->tensor_factor.defined()) return t * s->tensor_factor.to(t.device());
  return t * s->double_factor;
}

size_t count(const at::Tensor& t, const Wire& w) { return static_cast<size_t>(t.numel()) * w.per; }

void* ptr(const at::Tensor& t) { return t.data_ptr(); }

void check_one(const Tensors& tensors, const char* name) {
  TORCH_CHECK(tensors.size() == 1, "dicl: ", name, " takes one tensor per process, got ",
              tensors.size());
}

void check_same_dtype(const Tensors& tensors, at::ScalarType st, const char* name) {
  for (const auto& t : tensors) {
    TORCH_CHECK_TYPE(t.scalar_type() == st, "dicl: ", name, ": mixed dtypes ", st, " and ",
                     t.scalar_type());
  }
}

// `a` followed by `b`.
Tensors concat(Tensors a, const Tensors& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Which staged tensors are outputs: `first` of the kind `first_is_output`,
// then `rest` of the other kind.
std::vector<bool> marks(size_t first, bool first_is_output, size_t rest) {
  std::vector<bool> f(first, first_is_output);
  f.resize(first + rest, !first_is_output);
  return f;
}

// `inputs` inputs followed by `outputs` outputs.
std::vector<bool> flags(size_t inputs, size_t outputs) { return marks(inputs, false, outputs); }

// `outputs` outputs followed by `inputs` inputs.
std::vector<bool> outputs_first(size_t outputs, size_t inputs) {
  return marks(outputs, true, inputs);
}

// The buffers and element counts of t[first], t[first + step], ... (n of
// them), as the C calls over several buffers take them (NULL when none).
template <typename Ptr>
struct Spans {
  std::vector<Ptr> ptrs;
  std::vector<size_t> counts;
  Ptr* data() { return ptrs.empty() ? nullptr : ptrs.data(); }
  const size_t* sizes() const { return counts.empty() ? nullptr : counts.data(); }
};

template <typename Ptr>
Spans<Ptr> spans(const Tensors& t, size_t first, size_t n, const Wire& w, size_t step = 1) {
  Spans<Ptr> out;
  for (size_t i = 0; i < n; i++) {
    const at::Tensor& x = t[first + i * step];
    out.ptrs.push_back(ptr(x));
    out.counts.push_back(count(x, w));
  }
  return out;
}

// How a reducing collective sends dtype `st` with `op`.
struct Reduction {
  Wire w;
  dipu_reduce_op op;
};

Reduction reduction(at::ScalarType st, const c10d::ReduceOp& op, const char* name) {
  return {wire(st, name, true), reduce_op(op, st, name)};
}

// `t`, scaled first when `op` is PREMUL_SUM.
at::Tensor maybe_premul(const at::Tensor& t, const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::PREMUL_SUM ? premul(t, op) : t;
}

// The root's list of world-size tensors of a rooted collective (gather's
// outputs, scatter's inputs); other ranks pass none and get none.
Tensors root_list(const std::vector<Tensors>& lists, bool is_root, int size, const char* name,
                  const char* what) {
  if (is_root) {
    TORCH_CHECK(lists.size() == 1 && lists[0].size() == static_cast<size_t>(size), "dicl: ",
                name, " needs one list of ", size, " ", what, " tensors on the root");
    return lists[0];
  }
  TORCH_CHECK(lists.empty() || lists[0].empty(), "dicl: ", name, ": only the root passes ", what,
              " tensors");
  return {};
}

// NCCL's rule for all-to-all split sizes (dim 0 rows): none means equal
// parts of dim 0; else one per rank, non-negative, summing to dim 0.
void check_splits(const at::Tensor& t, const std::vector<int64_t>& rows, int size,
                  const char* side) {
  int64_t dim0 = t.dim() == 0 ? 1 : t.size(0);
  if (rows.empty()) {
    TORCH_CHECK(dim0 % size == 0, "dicl: alltoall_base: the ", side, " tensor's dim 0 (", dim0,
                ") does not divide equally across the group size (", size, ")");
    return;
  }
  TORCH_CHECK(rows.size() == static_cast<size_t>(size), "dicl: alltoall_base: ", rows.size(), " ",
              side, " split sizes for ", size, " ranks");
  int64_t sum = 0;
  for (int64_t r : rows) {
    TORCH_CHECK(r >= 0, "dicl: alltoall_base: negative ", side, " split size ", r);
    sum += r;
  }
  TORCH_CHECK(sum == dim0, "dicl: alltoall_base: the ", side, " split sizes sum to ", sum,
              ", not the tensor's dim 0 size (", dim0, ")");
}

}  // namespace

c10::intrusive_ptr<c10d::Work> Backend::broadcast(Tensors& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  check_one(tensors, "broadcast");
  Wire w = wire(tensors[0].scalar_type(), "broadcast", false);
  auto root = static_cast<int32_t>(opts.rootRank);
  return run("broadcast", OpType::BROADCAST, tensors, {true},
             {[=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
               return dipu_process_group_broadcast(g, ptr(t[0]), count(t[0], w), w.dtype, root, out);
             }});
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce(Tensors& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  check_one(tensors, "allreduce");
  c10d::AllreduceCoalescedOptions one;
  one.reduceOp = opts.reduceOp;
  one.timeout = opts.timeout;
  return allreduce_coalesced(tensors, one);
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(
    Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "dicl: allreduce of no tensors");
  std::vector<Launch> launches;
  for (size_t i = 0; i < tensors.size(); i++) {
    Reduction r = reduction(tensors[i].scalar_type(), opts.reduceOp, "allreduce");
    if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
      tensors[i].copy_(premul(tensors[i], opts.reduceOp));
    }
    launches.push_back([=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
      return dipu_process_group_all_reduce(g, ptr(t[i]), count(t[i], r.w), r.w.dtype, r.op, out);
    });
  }
  return run("allreduce", OpType::ALLREDUCE, tensors, std::vector<bool>(tensors.size(), true),
             launches);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(Tensors& tensors,
                                               const c10d::ReduceOptions& opts) {
  check_one(tensors, "reduce");
  at::ScalarType st = tensors[0].scalar_type();
  TORCH_CHECK(opts.reduceOp.op_ != c10d::ReduceOp::PREMUL_SUM,
              "dicl: reduce does not support reduce op PREMUL_SUM (allreduce and "
              "reduce_scatter do)");
  Reduction r = reduction(st, opts.reduceOp, "reduce");
  auto root = static_cast<int32_t>(opts.rootRank);
  return run("reduce", OpType::REDUCE, tensors, {true},
             {[=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
               return dipu_process_group_reduce(g, ptr(t[0]), count(t[0], r.w), r.w.dtype, root,
                                                r.op, out);
             }});
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  check_one(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_),
              "dicl: allgather needs one list of ", size_, " output tensors");
  at::ScalarType st = inputs[0].scalar_type();
  check_same_dtype(outputs[0], st, "allgather");
  Wire w = wire(st, "allgather", false);
  size_t n = outputs[0].size();
  return run("allgather", OpType::ALLGATHER, concat(inputs, outputs[0]), flags(1, n),
             {[=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
               auto o = spans<void*>(t, 1, n, w);
               return dipu_process_group_all_gather(g, o.data(), o.sizes(), n, ptr(t[0]),
                                                    count(t[0], w), w.dtype, out);
             }});
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(std::vector<Tensors>& outputs,
                                                            Tensors& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  // torch's layout: outputs[r][k] receives input k of rank r.
  TORCH_CHECK(outputs.size() == static_cast<size_t>(size_),
              "dicl: allgather_coalesced needs one output list per rank (", size_, "), got ",
              outputs.size());
  size_t m = inputs.size();
  Tensors all = inputs;
  for (size_t r = 0; r < outputs.size(); r++) {
    TORCH_CHECK(outputs[r].size() == m, "dicl: allgather_coalesced: output list ", r, " has ",
                outputs[r].size(), " tensors for ", m, " inputs");
    all.insert(all.end(), outputs[r].begin(), outputs[r].end());
  }
  std::vector<Launch> launches;
  size_t n = outputs.size();
  for (size_t k = 0; k < m; k++) {
    for (size_t r = 0; r < n; r++) {
      check_same_dtype({outputs[r][k]}, inputs[k].scalar_type(), "allgather_coalesced");
    }
    Wire w = wire(inputs[k].scalar_type(), "allgather_coalesced", false);
    launches.push_back([=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
      // Rank r's copy of input k is staged at m + r * m + k.
      auto o = spans<void*>(t, m + k, n, w, m);
      return dipu_process_group_all_gather(g, o.data(), o.sizes(), n, ptr(t[k]), count(t[k], w),
                                           w.dtype, out);
    });
  }
  return run("allgather_coalesced", OpType::ALLGATHER_COALESCED, all, flags(m, n * m),
             launches);
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  Tensors outputs{output}, inputs{input};
  return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "dicl: allgather_into_tensor needs as many outputs as inputs");
  std::vector<Launch> launches;
  size_t n = inputs.size();
  for (size_t k = 0; k < n; k++) {
    TORCH_CHECK(outputs[k].numel() == inputs[k].numel() * size_,
                "dicl: allgather_into_tensor: the output has ", outputs[k].numel(),
                " elements, not world size x input (", inputs[k].numel() * size_, ")");
    check_same_dtype({outputs[k]}, inputs[k].scalar_type(), "allgather_into_tensor");
    Wire w = wire(inputs[k].scalar_type(), "allgather_into_tensor", false);
    launches.push_back([=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
      return dipu_process_group_all_gather_into(g, ptr(t[n + k]), ptr(t[k]), count(t[k], w),
                                                w.dtype, out);
    });
  }
  return run("allgather_into_tensor", OpType::_ALLGATHER_BASE, concat(inputs, outputs),
             flags(n, n), launches);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(Tensors& outputs,
                                                       std::vector<Tensors>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  check_one(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_),
              "dicl: reduce_scatter needs one list of ", size_, " input tensors");
  at::ScalarType st = outputs[0].scalar_type();
  check_same_dtype(inputs[0], st, "reduce_scatter");
  Reduction r = reduction(st, opts.reduceOp, "reduce_scatter");
  Tensors ins = inputs[0];
  for (auto& t : ins) t = maybe_premul(t, opts.reduceOp);
  size_t n = ins.size();
  return run("reduce_scatter", OpType::REDUCE_SCATTER, concat(outputs, ins), outputs_first(1, n),
             {[=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
               auto in = spans<const void*>(t, 1, n, r.w);
               return dipu_process_group_reduce_scatter(g, ptr(t[0]), count(t[0], r.w), in.data(),
                                                        in.sizes(), n, r.w.dtype, r.op, out);
             }});
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  Tensors outputs{output}, inputs{input};
  return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size() && !inputs.empty(),
              "dicl: reduce_scatter_tensor needs as many outputs as inputs");
  size_t n = inputs.size();
  Tensors ins = inputs;
  std::vector<Launch> launches;
  for (size_t k = 0; k < n; k++) {
    at::ScalarType st = outputs[k].scalar_type();
    TORCH_CHECK(inputs[k].numel() == outputs[k].numel() * size_,
                "dicl: reduce_scatter_tensor: the input has ", inputs[k].numel(),
                " elements, not world size x output (", outputs[k].numel() * size_, ")");
    check_same_dtype({inputs[k]}, st, "reduce_scatter_tensor");
    Reduction r = reduction(st, opts.reduceOp, "reduce_scatter_tensor");
    ins[k] = maybe_premul(ins[k], opts.reduceOp);
    launches.push_back([=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
      return dipu_process_group_reduce_scatter_from(g, ptr(t[k]), count(t[k], r.w), ptr(t[n + k]),
                                                    r.w.dtype, r.op, out);
    });
  }
  return run("reduce_scatter_tensor", OpType::_REDUCE_SCATTER_BASE, concat(outputs, ins),
             outputs_first(n, n), launches);
}

c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                               const c10d::GatherOptions& opts) {
  check_one(inputs, "gather");
  auto root = static_cast<int32_t>(opts.rootRank);
  Tensors outs = root_list(outputs, rank_ == root, size_, "gather", "output");
  at::ScalarType st = inputs[0].scalar_type();
  check_same_dtype(outs, st, "gather");
  Wire w = wire(st, "gather", false);
  size_t n = outs.size();
  return run("gather", OpType::GATHER, concat(inputs, outs), flags(1, n),
             {[=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
               auto o = spans<void*>(t, 1, n, w);
               return dipu_process_group_gather(g, o.data(), o.sizes(), n, ptr(t[0]),
                                                count(t[0], w), w.dtype, root, out);
             }});
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                const c10d::ScatterOptions& opts) {
  check_one(outputs, "scatter");
  auto root = static_cast<int32_t>(opts.rootRank);
  Tensors ins = root_list(inputs, rank_ == root, size_, "scatter", "input");
  at::ScalarType st = outputs[0].scalar_type();
  check_same_dtype(ins, st, "scatter");
  Wire w = wire(st, "scatter", false);
  size_t n = ins.size();
  return run("scatter", OpType::SCATTER, concat(outputs, ins), outputs_first(1, n),
             {[=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
               auto in = spans<const void*>(t, 1, n, w);
               return dipu_process_group_scatter(g, ptr(t[0]), count(t[0], w), in.data(),
                                                 in.sizes(), n, w.dtype, root, out);
             }});
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_splits,
                                                      std::vector<int64_t>& input_splits,
                                                      const c10d::AllToAllOptions& opts) {
  check_same_dtype({output}, input.scalar_type(), "alltoall_base");
  check_splits(output, output_splits, size_, "output");
  check_splits(input, input_splits, size_, "input");
  Wire w = wire(input.scalar_type(), "alltoall_base", false);
  // Splits count rows (dim 0); the C call counts elements.
  auto elements = [&](const at::Tensor& t, const std::vector<int64_t>& rows) {
    std::vector<size_t> out;
    if (rows.empty()) return out;
    size_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : static_cast<size_t>(t.numel() / t.size(0));
    for (int64_t r : rows) out.push_back(static_cast<size_t>(r) * row * w.per);
    return out;
  };
  std::vector<size_t> os = elements(output, output_splits), is = elements(input, input_splits);
  return run("alltoall_base", OpType::ALLTOALL_BASE, {output, input}, {true, false},
             {[=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
               return dipu_process_group_all_to_all(g, ptr(t[0]), count(t[0], w), ptr(t[1]),
                                                    count(t[1], w), w.dtype,
                                                    os.empty() ? nullptr : os.data(),
                                                    is.empty() ? nullptr : is.data(), out);
             }});
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall(Tensors& outputs, Tensors& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(outputs.size() == static_cast<size_t>(size_) && inputs.size() == outputs.size(),
              "dicl: alltoall needs ", size_, " input and output tensors");
  at::ScalarType st = inputs[0].scalar_type();
  check_same_dtype(inputs, st, "alltoall");
  check_same_dtype(outputs, st, "alltoall");
  // One flat all-to-all with a block per rank, then copies into the outputs.
  std::vector<at::Tensor> flat_in;
  std::vector<int64_t> in_rows, out_rows;
  int64_t out_total = 0;
  for (size_t r = 0; r < inputs.size(); r++) {
    flat_in.push_back(inputs[r].reshape({-1}));
    in_rows.push_back(inputs[r].numel());
    out_rows.push_back(outputs[r].numel());
    out_total += outputs[r].numel();
  }
  at::Tensor in = at::cat(flat_in);
  at::Tensor out = at::empty({out_total}, inputs[0].options());
  auto work = alltoall_base(out, in, out_rows, in_rows, opts);
  // The copies out are queued on the current stream: it waits first (for
  // CPU tensors the host already did).
  work->wait();
  int64_t at = 0;
  for (auto& o : outputs) {
    o.copy_(out.narrow(0, at, o.numel()).view_as(o));
    at += o.numel();
  }
  return work;
}

std::string Backend::sent_key(int src, int dst, int tag) {
  return "dicl/sent/" + std::to_string(src) + "/" + std::to_string(dst) + "/" +
         std::to_string(tag);
}

c10::intrusive_ptr<c10d::Work> Backend::send(Tensors& tensors, int dst, int tag) {
  check_one(tensors, "send");
  Wire w = wire(tensors[0].scalar_type(), "send", false);
  // Counted before it is queued (the first send of a pair meets the
  // receiver to make their communicator), for a receiver that takes from
  // any source.
  c10d_store_->add(sent_key(rank_, dst, tag), 1);
  return run("send", OpType::SEND, tensors, {false},
             {[=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
               return dipu_process_group_send(g, ptr(t[0]), count(t[0], w), w.dtype, dst, tag,
                                              out);
             }});
}

c10::intrusive_ptr<c10d::Work> Backend::recv(Tensors& tensors, int src, int tag) {
  check_one(tensors, "recv");
  Wire w = wire(tensors[0].scalar_type(), "recv", false);
  auto work = run("recv", OpType::RECV, tensors, {true},
                  {[=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
                    return dipu_process_group_recv(g, ptr(t[0]), count(t[0], w), w.dtype, src,
                                                   tag, out);
                  }});
  std::lock_guard<std::mutex> lock(mu_);
  received_[{src, tag}]++;
  return work;
}

c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(Tensors& tensors, int tag) {
  check_one(tensors, "recvAnysource");
  Wire w = wire(tensors[0].scalar_type(), "recvAnysource", false);
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto pause = std::chrono::microseconds(50);
  int src = -1;
  while (src < 0) {
    for (int r = 0; r < size_ && src < 0; r++) {
      if (r == rank_) continue;
      int64_t sent = c10d_store_->add(sent_key(r, rank_, tag), 0);
      std::lock_guard<std::mutex> lock(mu_);
      if (sent > received_[{r, tag}]) src = r;
    }
    if (src >= 0) break;
    {
      std::lock_guard<std::mutex> lock(mu_);
      TORCH_CHECK_WITH(DistBackendError, !aborted_, "dicl: recvAnysource on rank ", rank_,
                       ": ", aborted_.value_or(""));
    }
    TORCH_CHECK_WITH(DistBackendError, timeout_.count() <= 0 ||
                                           std::chrono::steady_clock::now() < deadline,
                     "dicl: recvAnysource on rank ", rank_, " (tag ", tag, "): no rank sent within ",
                     timeout_.count(), " ms");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
  auto work = run("recvAnysource", OpType::RECVANYSOURCE, tensors, {true},
                  {[=](dipu_process_group* g, const Tensors& t, dipu_work** out) {
                    return dipu_process_group_recv(g, ptr(t[0]), count(t[0], w), w.dtype, src,
                                                   tag, out);
                  }},
                  src);
  std::lock_guard<std::mutex> lock(mu_);
  received_[{src, tag}]++;
  return work;
}

}  // namespace torch_dipu::dicl
