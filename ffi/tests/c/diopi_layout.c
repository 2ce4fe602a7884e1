/* Compiled as C11 and as C++17 by ffi/tests/diopi_headers.rs: every
   layout and numeric value of the headers in include/diopi that DIOPI 1.0 and the
   dipu-rs tensor descriptor fix. A wrong value fails to compile. */
#include "diopi/functions.h"
#include "diopi/dipu_diopi.h"

#include <stddef.h>

#ifdef __cplusplus
#define CHECK(e) static_assert(e, #e)
#else
#define CHECK(e) _Static_assert(e, #e)
#endif

/* Enums are C ints. */
CHECK(sizeof(diopiDtype_t) == 4);
CHECK(sizeof(diopiDevice_t) == 4);
CHECK(sizeof(diopiError_t) == 4);
CHECK(sizeof(diopiMemoryFormat_t) == 4);
CHECK(sizeof(diopiReduction_t) == 4);
CHECK(sizeof(diopiRoundMode_t) == 4);

CHECK(diopi_dtype_int8 == 0);
CHECK(diopi_dtype_uint8 == 1);
CHECK(diopi_dtype_int16 == 2);
CHECK(diopi_dtype_uint16 == 3);
CHECK(diopi_dtype_int32 == 4);
CHECK(diopi_dtype_uint32 == 5);
CHECK(diopi_dtype_int64 == 6);
CHECK(diopi_dtype_uint64 == 7);
CHECK(diopi_dtype_float16 == 8);
CHECK(diopi_dtype_float32 == 9);
CHECK(diopi_dtype_float64 == 10);
CHECK(diopi_dtype_bool == 11);
CHECK(diopi_dtype_bfloat16 == 12);
CHECK(diopi_dtype_tfloat32 == 13);
CHECK(diopi_dtype_complex32 == 14);
CHECK(diopi_dtype_complex64 == 15);
CHECK(diopi_dtype_complex128 == 16);
CHECK(diopi_dtype_unsupported == 255);
CHECK(diopi_host == 0); CHECK(diopi_device == 1);
CHECK(diopiSuccess == 0);
CHECK(diopiErrorOccurred == 1);
CHECK(diopiNotInited == 2);
CHECK(diopiNoRegisteredStreamCreateFunction == 3);
CHECK(diopiNoRegisteredStreamDestoryFunction == 4);
CHECK(diopiNoRegisteredStreamSyncFunction == 5);
CHECK(diopiNoRegisteredDeviceMemoryMallocFunction == 6);
CHECK(diopiNoRegisteredDeviceMemoryFreeFunction == 7);
CHECK(diopiNoRegisteredDevice2DdeviceMemoryCopyFunction == 8);
CHECK(diopiNoRegisteredDevice2HostMemoryCopyFunction == 9);
CHECK(diopiNoRegisteredHost2DeviceMemoryCopyFunction == 10);
CHECK(diopiNoRegisteredGetLastErrorFunction == 11);
CHECK(diopi5DNotSupported == 12);
CHECK(diopiNoImplement == 13);
CHECK(diopiForceFallbackToCPU == 14);
CHECK(diopiDtypeNotSupported == 1000);
CHECK(Contiguous == 0);
CHECK(ChannelsLast == 1);
CHECK(ChannelsLast3d == 2);
CHECK(Preserve == 3);
CHECK(ChannelsLast1d == 4);
CHECK(ReductionNone == 0);
CHECK(ReductionMean == 1);
CHECK(ReductionSum == 2);
CHECK(ReductionEND == 3);
CHECK(RoundModeNone == 0);
CHECK(RoundModeTrunc == 1);
CHECK(RoundModeFloor == 2);
CHECK(RoundModeEND == 3);

CHECK(DIOPI_VERSION == 1000);
CHECK(sizeof(diopiDeviceIndex_t) == 1);
CHECK(sizeof(diopiStreamHandle_t) == sizeof(void *));

/* diopiSize_t: {const int64_t *data; int64_t len}, 16 bytes. */
CHECK(sizeof(diopiSize_t) == 16);
CHECK(offsetof(diopiSize_t, data) == 0);
CHECK(offsetof(diopiSize_t, len) == 8);

/* diopiScalar_t: {int32 stype; 4 bytes of padding; union of double/int64}. */
CHECK(sizeof(diopiScalar_t) == 16);
CHECK(offsetof(diopiScalar_t, stype) == 0);
CHECK(offsetof(diopiScalar_t, fval) == 8);
CHECK(offsetof(diopiScalar_t, ival) == 8);

/* The dipu-rs tensor descriptor (64-bit targets). */
CHECK(DIPU_DIOPI_TENSOR_MAGIC == 0x54504944u);
CHECK(DIPU_DIOPI_HOST_DEVICE == -1);
CHECK(sizeof(struct diopiTensor) == 56);
CHECK(offsetof(struct diopiTensor, magic) == 0);
CHECK(offsetof(struct diopiTensor, dtype) == 4);
CHECK(offsetof(struct diopiTensor, device) == 8);
CHECK(offsetof(struct diopiTensor, ndim) == 12);
CHECK(offsetof(struct diopiTensor, storage) == 16);
CHECK(offsetof(struct diopiTensor, storage_offset) == 24);
CHECK(offsetof(struct diopiTensor, storage_nbytes) == 32);
CHECK(offsetof(struct diopiTensor, shape) == 40);
CHECK(offsetof(struct diopiTensor, strides) == 48);

/* A kernel library's definition matches the declaration (C++ would reject
   a different signature; C a conflicting type). */
DIOPI_API diopiError_t diopiFill(diopiContextHandle_t ctx, diopiTensorHandle_t input, const diopiScalar_t *value);
DIOPI_API diopiError_t diopiConvolution2dBackward(diopiContextHandle_t ctx, diopiTensorHandle_t grad_input,
    diopiTensorHandle_t grad_weight, diopiTensorHandle_t grad_bias, diopiConstTensorHandle_t grad_output,
    diopiConstTensorHandle_t input, diopiConstTensorHandle_t weight, diopiSize_t *bias_sizes, diopiSize_t stride,
    diopiSize_t padding, diopiSize_t dilation, int64_t groups);

int diopi_layout_checked(void);
int diopi_layout_checked(void) { return 1; }
