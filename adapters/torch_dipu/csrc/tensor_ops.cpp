// Native dipu kernels for allocation, views, set_, resize_,
// _local_scalar_dense and record_stream.
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>

#include "allocator.h"
#include "common.h"
#include "ops.h"

namespace torch_dipu {

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  c10::Device device = storage->device();
  TORCH_CHECK(device.type() == kDipu, "resize_storage_bytes: storage of ", device,
              " is not dipu memory");
  c10::DeviceGuard guard(device);
  size_t old = storage->nbytes();
  c10::DataPtr fresh = nbytes > 0 ? device_allocator()->allocate(nbytes)
                                  : c10::DataPtr(nullptr, device);
  size_t keep = std::min(old, nbytes);
  if (keep > 0 && storage->data() != nullptr) {
    dipu_stream s = current_stream(device.index());
    DIPU_CHECK(dipu_memcpy_async(fresh.get(), storage->data(), keep,
                                 DIPU_COPY_DEVICE_TO_DEVICE, s));
    // The old block may have been allocated on another stream.
    DIPU_CHECK(dipu_record_stream(storage->data_ptr().get(), s));
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

namespace {

// Sets `self`'s sizes (and strides, contiguous when absent) and grows its
// storage when it is too small.
void resize_impl(c10::TensorImpl* self, c10::IntArrayRef size,
                 at::OptionalIntArrayRef stride) {
  if (self->sizes() == size && (!stride || self->strides() == *stride)) return;
  size_t needed = 0;
  const auto itemsize = self->dtype().itemsize();
  const auto offset = self->storage_offset();
  if (stride) {
    self->set_sizes_and_strides(size, *stride);
    needed = at::detail::computeStorageNbytes(size, *stride, itemsize, offset);
  } else {
    self->set_sizes_contiguous(size);
    needed = at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
  }
  if (self->numel() == 0) return;
  const c10::Storage& storage = self->unsafe_storage();
  TORCH_CHECK(storage, "Tensor: invalid null storage");
  if (needed > storage.nbytes()) {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), needed);
  }
}

c10::Device target(std::optional<c10::Device> device) {
  c10::Device d = device.value_or(dipu_device(current_device()));
  TORCH_CHECK(d.type() == kDipu, "expected a dipu device, got ", d);
  return d.has_index() ? d : dipu_device(current_device());
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(target(device));
  TORCH_CHECK(!pin_memory.value_or(false), "only CPU tensors can be pinned");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "dipu tensors are strided only");
  return at::detail::empty_generic(size, device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  c10::DeviceGuard guard(target(device));
  TORCH_CHECK(!pin_memory.value_or(false), "only CPU tensors can be pinned");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "dipu tensors are strided only");
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  c10::DeviceGuard guard(self.device());
  resize_impl(impl, C10_AS_INTARRAYREF_SLOW(size), std::nullopt);
  if (memory_format) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve,
                "Unsupported memory format Preserve");
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source,
                               c10::SymInt storage_offset, c10::SymIntArrayRef size,
                               c10::SymIntArrayRef stride) {
  int64_t offset = storage_offset.expect_int();
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  auto strides = C10_AS_INTARRAYREF_SLOW(stride);
  at::native::checkSetStorage(self, source, offset, sizes, strides);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  at::OptionalIntArrayRef stride_opt =
      strides.data() != nullptr ? at::OptionalIntArrayRef(strides) : std::nullopt;
  resize_impl(self.unsafeGetTensorImpl(), sizes, stride_opt);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, c10::SymIntArrayRef({c10::SymInt(n)}),
                            c10::SymIntArrayRef({c10::SymInt(1)}));
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage_offset(self, source.storage(), source.sym_storage_offset(),
                            source.sym_sizes(), source.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
  return set_storage_offset(self, storage, 0, c10::SymIntArrayRef({c10::SymInt(0)}), {});
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(self.to(at::kCPU));
}

// Whether `t` is a dense strided tensor on the CPU or on dipu: the two
// share TensorImpl's layout, so one can take the other's data in place.
bool dense_cpu_or_dipu(const at::Tensor& t) {
  c10::DispatchKeySet ks = t.key_set();
  return ks.has(c10::DispatchKey::Dense) && t.layout() == at::kStrided &&
         (t.device().is_cpu() || t.device().type() == kDipu);
}

// What Module._apply asks before `param.data = param.to("dipu")`: true
// keeps the Parameter object (and with it every tie between modules), as
// it does for CPU <-> CUDA. ATen's own answer knows only the built-in
// dense backends, so it says false for CPU <-> PrivateUse1.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense_cpu_or_dipu(self) && dense_cpu_or_dipu(from));
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  const auto& data = self.storage().data_ptr();
  if (data.get() == nullptr) return;
  DIPU_CHECK(dipu_record_stream(data.get(), from_c10(stream)));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
  m.impl("set_.source_Tensor", set_tensor);
  m.impl("set_", set_empty);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("record_stream", record_stream);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace torch_dipu
