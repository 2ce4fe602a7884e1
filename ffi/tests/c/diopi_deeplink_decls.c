/* Compiled as C11 and as C++17 by ffi/tests/diopi_headers.rs: DIOPI 1.0's
   own macros and its declarations of the runtime functions it marks
   optional, of diopiGeneratorGetSeedAndOffset and of diopiCat/diopiStack,
   after include/diopi's headers in one translation unit. A declaration
   that differs from DIOPI's (a parameter's type, a const) is a conflicting
   redeclaration, and a macro defined otherwise a redefinition: both fail
   to compile under -Werror. */
#include "diopi/functions.h"

/* DIOPI's macros, as DIOPI defines them. */
#define DIOPI_ATTR_WEAK __attribute__((weak))
#define DIOPI_API DIOPI_ATTR_WEAK
#define DIOPI_RT_API

#ifdef __cplusplus
extern "C" {
#endif

extern DIOPI_API const char *diopiGetVersion(void);

extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorDevice(diopiConstTensorHandle_t th, diopiDevice_t *device);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorElemSize(diopiConstTensorHandle_t th, int64_t *itemsize);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorStoragePtr(diopiConstTensorHandle_t th, void **pStoragePtr);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorStorageOffset(diopiConstTensorHandle_t th, int64_t *pOffset);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorStorageNbytes(diopiConstTensorHandle_t th, size_t *pNbytes);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorDeviceIndex(diopiConstTensorHandle_t th,
                                                                          diopiDeviceIndex_t *pDevIndex);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorCrowIndices(diopiConstTensorHandle_t th,
                                                                          diopiConstTensorHandle_t *crow_indices);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorColIndices(diopiConstTensorHandle_t th,
                                                                         diopiConstTensorHandle_t *col_indices);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetTensorValues(diopiConstTensorHandle_t th,
                                                                     diopiConstTensorHandle_t *values);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiIsTensorSparse(diopiConstTensorHandle_t th, bool *is_sparse);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGetCurrentDeviceIndex(diopiDeviceIndex_t *pDevIndex);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiRequireBuffer(diopiContextHandle_t ctx, diopiTensorHandle_t *tensor,
                                                                   int64_t num_bytes, diopiDevice_t device);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGeneratorGetState(diopiContextHandle_t ctx,
                                                                       diopiConstGeneratorHandle_t th,
                                                                       diopiTensorHandle_t *data);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGeneratorSetState(diopiGeneratorHandle_t th,
                                                                       diopiConstTensorHandle_t state);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGeneratorGetSeedAndOffset(diopiGeneratorHandle_t th, uint64_t *ptrSeed,
                                                                               uint64_t *ptrOffset);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiGeneratorSetSeedAndOffset(diopiGeneratorHandle_t th, uint64_t seed,
                                                                               uint64_t offset);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiRecordStart(const char *record_name, void **record);
extern DIOPI_RT_API DIOPI_ATTR_WEAK diopiError_t diopiRecordEnd(void **record);

DIOPI_API diopiError_t diopiCat(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t *tensors,
                                int64_t num_inputs, int64_t dim);
DIOPI_API diopiError_t diopiStack(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t *tensors,
                                  int64_t numTensors, int64_t dim);

#ifdef __cplusplus
}
#endif
