// _copy_from and _copy_from_and_resize: copies between dipu and the host
// and between dipu devices, asynchronous on the current stream of the
// dipu side (of the source side between devices, fenced both ways). Contiguous copies of one dtype are one dipu_memcpy_async;
// strided and dtype-changing ones move the span of storage they touch and
// let the CPU do the rearranging.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "common.h"

namespace torch_dipu {
namespace {

bool is_pinned(const at::Tensor& t) {
  const void* base = t.storage().data();
  if (base == nullptr) return false;
  dipu_pointer_attributes a{};
  DIPU_CHECK(dipu_pointer_get_attributes(base, &a));
  return a.memory_type == DIPU_MEMORY_PINNED;
}

// Bytes from the first to one past the last element `t` touches.
size_t span_bytes(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    TORCH_CHECK(t.stride(d) >= 0, "negative strides are not supported");
    last += (t.size(d) - 1) * t.stride(d);
  }
  return static_cast<size_t>(last + 1) * t.element_size();
}

// Ends a copy that used host memory `host` on `s`: a non-blocking copy
// from or to pinned memory records the stream on the pinned block (and
// returns at once), any other waits for the stream.
void finish(dipu_stream s, const at::Tensor& host, bool non_blocking) {
  if (non_blocking && is_pinned(host)) {
    DIPU_CHECK(dipu_host_record_stream(host.storage().data_ptr().get(), s));
  } else {
    DIPU_CHECK(dipu_stream_synchronize(s));
  }
}

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.is_contiguous() &&
         b.is_contiguous() && a.is_conj() == b.is_conj() && a.is_neg() == b.is_neg();
}

// A CPU tensor with `src`'s values (src on dipu), on the host once this returns.
at::Tensor to_host(const at::Tensor& src) {
  if (src.numel() == 0) return at::empty(src.sizes(), src.options().device(at::kCPU));
  size_t bytes = span_bytes(src);
  auto buf = at::empty({static_cast<int64_t>(bytes)},
                       at::TensorOptions().dtype(at::kByte).device(at::kCPU));
  dipu_stream s = current_stream(src.device().index());
  DIPU_CHECK(dipu_memcpy_async(buf.data_ptr(), src.data_ptr(), bytes,
                               DIPU_COPY_DEVICE_TO_HOST, s));
  DIPU_CHECK(dipu_stream_synchronize(s));
  at::Tensor out = buf.view(src.scalar_type()).as_strided(src.sizes(), src.strides(), 0);
  out._set_conj(src.is_conj());
  out._set_neg(src.is_neg());
  return out;
}

// Copies CPU `src` into dipu `dst` (any dtype, strides, broadcasting).
void host_to_device(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return;
  dipu_stream s = current_stream(dst.device().index());
  if (same_layout(src, dst)) {
    DIPU_CHECK(dipu_memcpy_async(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                 DIPU_COPY_HOST_TO_DEVICE, s));
    finish(s, src, non_blocking);
    return;
  }
  if (dst.is_contiguous()) {
    at::Tensor tmp = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    DIPU_CHECK(dipu_memcpy_async(dst.data_ptr(), tmp.data_ptr(), dst.nbytes(),
                                 DIPU_COPY_HOST_TO_DEVICE, s));
    DIPU_CHECK(dipu_stream_synchronize(s));
    return;
  }
  // A strided destination: read its span, write the elements, put it back.
  at::Tensor view = to_host(dst);
  view.copy_(src);
  DIPU_CHECK(dipu_memcpy_async(dst.data_ptr(), view.data_ptr(), span_bytes(dst),
                               DIPU_COPY_HOST_TO_DEVICE, s));
  DIPU_CHECK(dipu_stream_synchronize(s));
}

void device_to_host(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return;
  if (same_layout(src, dst)) {
    dipu_stream s = current_stream(src.device().index());
    DIPU_CHECK(dipu_memcpy_async(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                 DIPU_COPY_DEVICE_TO_HOST, s));
    finish(s, dst, non_blocking);
    return;
  }
  dst.copy_(to_host(src));
}

// Makes later work on `waiter` wait for the work queued on `on` so far
// (the host does not wait).
void stream_wait(dipu_stream waiter, dipu_stream on) {
  dipu_event* e = nullptr;
  DIPU_CHECK(dipu_event_create(0, &e));
  dipu_status st = dipu_event_record(e, on);
  if (st == DIPU_OK) st = dipu_event_block(e, waiter);
  dipu_event_destroy(e);
  if (st != DIPU_OK) throw_status("dipu_event_record/dipu_event_block", st);
}

void device_to_device(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.numel() == 0) return;
  if (same_layout(src, dst)) {
    dipu_stream ss = current_stream(src.device().index());
    if (src.device() == dst.device()) {
      DIPU_CHECK(dipu_memcpy_async(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                   DIPU_COPY_DEVICE_TO_DEVICE, ss));
      return;
    }
    // Between devices, as ATen's CUDA copy: a two-way barrier around a copy
    // on the source's current stream. That stream first waits for the
    // destination's (earlier users of dst), runs the copy, and the
    // destination's stream then waits for it. The source is read on the
    // stream it belongs to, so freeing it at once (and reusing the block
    // on that stream) cannot overwrite it mid-copy; the destination block
    // is used on its own stream only after the copy. The host never waits.
    dipu_stream ds = current_stream(dst.device().index());
    stream_wait(ss, ds);
    DIPU_CHECK(dipu_memcpy_async(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                 DIPU_COPY_DEVICE_TO_DEVICE, ss));
    stream_wait(ds, ss);
    return;
  }
  host_to_device(to_host(src), dst, false);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.layout() == at::kStrided && dst.layout() == at::kStrided,
              "dipu copies are between strided tensors only");
  bool src_dipu = self.device().type() == kDipu;
  bool dst_dipu = dst.device().type() == kDipu;
  if (src_dipu && dst_dipu) {
    c10::DeviceGuard guard(dst.device());
    device_to_device(self, dst);
  } else if (src_dipu) {
    TORCH_CHECK(dst.is_cpu(), "cannot copy from dipu to ", dst.device());
    c10::DeviceGuard guard(self.device());
    device_to_host(self, dst, non_blocking);
  } else {
    TORCH_CHECK(self.is_cpu() && dst_dipu, "cannot copy from ", self.device(), " to ",
                dst.device());
    c10::DeviceGuard guard(dst.device());
    host_to_device(self, dst, non_blocking);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
}

}  // namespace torch_dipu
