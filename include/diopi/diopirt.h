/*
 * diopirt.h: the types of DIOPI 1.0 and the runtime functions ("diopirt")
 * that a framework provides to a kernel library.
 *
 * dipu-rs's own declarations, written from the facts of DIOPI 1.0.0: the
 * names, types, numeric values and layouts match DIOPI's, so a kernel
 * library built against DIOPI's headers works with dipu-rs and one built
 * against these works with DIOPI's frameworks. libdipu_runtime.so (and the
 * `dipu` executable) export every function declared here with C linkage.
 *
 * A tensor, context or generator handle points at an object the framework
 * owns; its layout is not part of DIOPI (dipu-rs's tensor descriptor is in
 * dipu_diopi.h). Every runtime function returns diopiSuccess or an error
 * code; the runtime functions of dipu-rs accept NULL handles and NULL
 * out-pointers with diopiErrorOccurred instead of crashing.
 */
#ifndef DIPU_DIOPI_DIOPIRT_H
#define DIPU_DIOPI_DIOPIRT_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#define DIOPI_VER_MAJOR 1
#define DIOPI_VER_MINOR 0
#define DIOPI_VER_PATCH 0
/* major * 1000 + minor * 100 + patch */
#define DIOPI_VERSION (DIOPI_VER_MAJOR * 1000 + DIOPI_VER_MINOR * 100 + DIOPI_VER_PATCH)

/* DIOPI's attribute for a reference that may stay unresolved: the symbol
   reads as NULL when no loaded object defines it. */
#ifndef DIOPI_ATTR_WEAK
#if defined(__GNUC__) || defined(__clang__)
#define DIOPI_ATTR_WEAK __attribute__((weak))
#else
#define DIOPI_ATTR_WEAK
#endif
#endif

/* Operators (functions.h) are weak references: a framework sees NULL for an
   operator its kernel library lacks and falls back. Define DIOPI_API before
   including to change that (a kernel library defining operators may define
   it empty). */
#ifndef DIOPI_API
#define DIOPI_API DIOPI_ATTR_WEAK
#endif

/* Runtime functions are declared as DIOPI declares them. Those marked
   DIOPI_ATTR_WEAK are optional for a framework: a kernel library built
   against these headers still loads where one is missing, and must test
   the function for NULL before calling it (`if (diopiRequireBuffer)`).
   The others (tensor data, shape, strides, dtype, numel, the stream,
   diopiRequireTensor) are ordinary references: a library using one is
   refused by a framework that lacks it. dipu-rs defines all of them. */
#ifndef DIOPI_RT_API
#define DIOPI_RT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A list of int64 (a shape, strides, dims), usually passed by value.
   `data` is borrowed for the call; the empty list is {NULL, 0}. */
typedef struct diopiSize_t {
    const int64_t *data;
    int64_t len;
} diopiSize_t;

typedef enum {
    diopi_dtype_int8 = 0,
    diopi_dtype_uint8 = 1,
    diopi_dtype_int16 = 2,
    diopi_dtype_uint16 = 3,
    diopi_dtype_int32 = 4,
    diopi_dtype_uint32 = 5,
    diopi_dtype_int64 = 6,
    diopi_dtype_uint64 = 7,
    diopi_dtype_float16 = 8,
    diopi_dtype_float32 = 9,
    diopi_dtype_float64 = 10,
    diopi_dtype_bool = 11,
    diopi_dtype_bfloat16 = 12,
    diopi_dtype_tfloat32 = 13,
    diopi_dtype_complex32 = 14,
    diopi_dtype_complex64 = 15,
    diopi_dtype_complex128 = 16,
    diopi_dtype_unsupported = 255
} diopiDtype_t;

typedef enum {
    diopi_host = 0,
    diopi_device = 1
} diopiDevice_t;

typedef enum {
    diopiSuccess = 0,
    diopiErrorOccurred = 1,
    diopiNotInited = 2,
    diopiNoRegisteredStreamCreateFunction = 3,
    diopiNoRegisteredStreamDestoryFunction = 4,
    diopiNoRegisteredStreamSyncFunction = 5,
    diopiNoRegisteredDeviceMemoryMallocFunction = 6,
    diopiNoRegisteredDeviceMemoryFreeFunction = 7,
    diopiNoRegisteredDevice2DdeviceMemoryCopyFunction = 8,
    diopiNoRegisteredDevice2HostMemoryCopyFunction = 9,
    diopiNoRegisteredHost2DeviceMemoryCopyFunction = 10,
    diopiNoRegisteredGetLastErrorFunction = 11,
    diopi5DNotSupported = 12,
    diopiNoImplement = 13,
    diopiForceFallbackToCPU = 14,
    diopiDtypeNotSupported = 1000
} diopiError_t;

typedef enum {
    Contiguous = 0,
    ChannelsLast = 1,
    ChannelsLast3d = 2,
    Preserve = 3,
    ChannelsLast1d = 4
} diopiMemoryFormat_t;

typedef enum {
    ReductionNone = 0,
    ReductionMean = 1,
    ReductionSum = 2,
    ReductionEND = 3
} diopiReduction_t;

typedef enum {
    RoundModeNone = 0,
    RoundModeTrunc = 1,
    RoundModeFloor = 2,
    RoundModeEND = 3
} diopiRoundMode_t;

/* A scalar operand: `fval` when stype is a floating type, else `ival`. */
typedef struct diopiScalar_t {
    diopiDtype_t stype;
    union {
        double fval;
        int64_t ival;
    };
} diopiScalar_t;

typedef int8_t diopiDeviceIndex_t;

struct diopiTensor;
typedef struct diopiTensor *diopiTensorHandle_t;
typedef const struct diopiTensor *diopiConstTensorHandle_t;

struct diopiContext;
typedef struct diopiContext *diopiContextHandle_t;

struct diopiGenerator;
typedef struct diopiGenerator *diopiGeneratorHandle_t;
typedef const struct diopiGenerator *diopiConstGeneratorHandle_t;

/* A vendor's raw stream (cudaStream_t and the like). */
typedef void *diopiStreamHandle_t;

/* "DIOPI Version: 1.0.0" (weak, as DIOPI declares it with DIOPI_API) */
DIOPI_RT_API DIOPI_ATTR_WEAK extern const char *diopiGetVersion(void);

/* Address of element 0 (the storage offset applied). */
DIOPI_RT_API extern diopiError_t diopiGetTensorData(diopiTensorHandle_t th, void **pptr);
DIOPI_RT_API extern diopiError_t diopiGetTensorDataConst(diopiConstTensorHandle_t th, const void **pptr);
/* Shape and strides (in elements) point into the tensor's own arrays. */
DIOPI_RT_API extern diopiError_t diopiGetTensorShape(diopiConstTensorHandle_t th, diopiSize_t *size);
DIOPI_RT_API extern diopiError_t diopiGetTensorStride(diopiConstTensorHandle_t th, diopiSize_t *stride);
DIOPI_RT_API extern diopiError_t diopiGetTensorDtype(diopiConstTensorHandle_t th, diopiDtype_t *dtype);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGetTensorDevice(diopiConstTensorHandle_t th, diopiDevice_t *device);
DIOPI_RT_API extern diopiError_t diopiGetTensorNumel(diopiConstTensorHandle_t th, int64_t *numel);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGetTensorElemSize(diopiConstTensorHandle_t th, int64_t *elemsize);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGetTensorStoragePtr(diopiConstTensorHandle_t th, void **pStoragePtr);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGetTensorStorageOffset(diopiConstTensorHandle_t th, int64_t *pOffset);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGetTensorStorageNbytes(diopiConstTensorHandle_t th, size_t *pNbytes);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGetTensorDeviceIndex(diopiConstTensorHandle_t th, diopiDeviceIndex_t *pDevIndex);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGetCurrentDeviceIndex(diopiDeviceIndex_t *pDevIndex);

/* Sparse (CSR) tensors. */
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiIsTensorSparse(diopiConstTensorHandle_t th, bool *isSparse);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGetTensorCrowIndices(diopiConstTensorHandle_t th, diopiConstTensorHandle_t *crow_indices);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGetTensorColIndices(diopiConstTensorHandle_t th, diopiConstTensorHandle_t *col_indices);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGetTensorValues(diopiConstTensorHandle_t th, diopiConstTensorHandle_t *values);

/* The stream all work of this call must go to. */
DIOPI_RT_API extern diopiError_t diopiGetStream(diopiContextHandle_t ctx, diopiStreamHandle_t *stream);

/* A tensor that lives as long as ctx; NULL stride means contiguous. */
DIOPI_RT_API extern diopiError_t diopiRequireTensor(diopiContextHandle_t ctx, diopiTensorHandle_t *tensor,
                                                   const diopiSize_t *size, const diopiSize_t *stride,
                                                   const diopiDtype_t dtype, const diopiDevice_t device);
/* A 1-D int8 tensor of num_bytes bytes that lives as long as ctx. */
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiRequireBuffer(diopiContextHandle_t ctx, diopiTensorHandle_t *tensor,
                                                                   int64_t num_bytes, diopiDevice_t device);

/* Generator state as a uint8 tensor owned by ctx, and back. */
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGeneratorGetState(diopiContextHandle_t ctx,
                                                                       diopiConstGeneratorHandle_t generator,
                                                                       diopiTensorHandle_t *data);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGeneratorSetState(diopiGeneratorHandle_t generator, diopiConstTensorHandle_t new_state);
/* Philox seed and offset; a kernel writes back the advanced offset. */
/* The generator is non-const here, as in DIOPI, although only read. */
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGeneratorGetSeedAndOffset(diopiGeneratorHandle_t generator,
                                                                               uint64_t *ptrSeed, uint64_t *ptrOffset);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiGeneratorSetSeedAndOffset(diopiGeneratorHandle_t generator, uint64_t seed, uint64_t offset);

/* A profiler range; RecordEnd frees the record and sets *record to NULL. */
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiRecordStart(const char *record_name, void **record);
DIOPI_RT_API DIOPI_ATTR_WEAK extern diopiError_t diopiRecordEnd(void **record);

#ifdef __cplusplus
}
#endif

#endif /* DIPU_DIOPI_DIOPIRT_H */
