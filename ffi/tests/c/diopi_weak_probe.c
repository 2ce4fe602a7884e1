/* A kernel library built against include/diopi/ alone that holds ordinary
 * references to DIOPI's required runtime functions and weak ones to the
 * optional functions (those declared DIOPI_ATTR_WEAK), which it tests for
 * NULL before use. diopi_weak_probe_present() says which optional
 * functions the process provides: bit i for diopi_weak_probe_name(i).
 *
 * Built as is, it loads (RTLD_NOW) into a framework that lacks every
 * optional function; built with -DDIOPI_ATTR_WEAK= (ordinary references),
 * it does not. ffi/tests/diopi.rs runs both, and the probe under dipu-rs,
 * which provides them all. */
#include <stddef.h>
#include <stdint.h>

#include "diopi/functions.h"

typedef void (*any_fn)(void);

#define OPTIONAL(f) {#f, (any_fn)f}

static const struct {
  const char *name;
  any_fn fn;
} optional[] = {
    OPTIONAL(diopiGetVersion),
    OPTIONAL(diopiGetTensorDevice),
    OPTIONAL(diopiGetTensorElemSize),
    OPTIONAL(diopiGetTensorStoragePtr),
    OPTIONAL(diopiGetTensorStorageOffset),
    OPTIONAL(diopiGetTensorStorageNbytes),
    OPTIONAL(diopiGetTensorDeviceIndex),
    OPTIONAL(diopiGetCurrentDeviceIndex),
    OPTIONAL(diopiIsTensorSparse),
    OPTIONAL(diopiGetTensorCrowIndices),
    OPTIONAL(diopiGetTensorColIndices),
    OPTIONAL(diopiGetTensorValues),
    OPTIONAL(diopiRequireBuffer),
    OPTIONAL(diopiGeneratorGetState),
    OPTIONAL(diopiGeneratorSetState),
    OPTIONAL(diopiGeneratorGetSeedAndOffset),
    OPTIONAL(diopiGeneratorSetSeedAndOffset),
    OPTIONAL(diopiRecordStart),
    OPTIONAL(diopiRecordEnd),
};

int diopi_weak_probe_count(void);
const char *diopi_weak_probe_name(int i);
uint32_t diopi_weak_probe_present(void);

int diopi_weak_probe_count(void) { return (int)(sizeof optional / sizeof optional[0]); }

const char *diopi_weak_probe_name(int i) {
  return i >= 0 && i < diopi_weak_probe_count() ? optional[i].name : NULL;
}

uint32_t diopi_weak_probe_present(void) {
  uint32_t mask = 0;
  for (int i = 0; i < diopi_weak_probe_count(); ++i)
    if (optional[i].fn != NULL) mask |= UINT32_C(1) << i;
  return mask;
}

const char *diopiGetVendorName(void) { return "weak probe"; }

/* Zeroes a tensor: the required getters unguarded, the element size from
   diopiGetTensorElemSize when the framework has it, else from the dtype. */
diopiError_t diopiZeroInp(diopiContextHandle_t ctx, diopiTensorHandle_t self) {
  diopiStreamHandle_t stream;
  void *data;
  int64_t numel, elem = 0;
  diopiDtype_t dtype;
  if (diopiGetStream(ctx, &stream) != diopiSuccess || diopiGetTensorData(self, &data) != diopiSuccess ||
      diopiGetTensorNumel(self, &numel) != diopiSuccess || diopiGetTensorDtype(self, &dtype) != diopiSuccess)
    return diopiErrorOccurred;
  if (diopiGetTensorElemSize) {
    if (diopiGetTensorElemSize(self, &elem) != diopiSuccess) return diopiErrorOccurred;
  } else {
    elem = dtype == diopi_dtype_float64 || dtype == diopi_dtype_int64 ? 8 : 4;
  }
  for (int64_t k = 0; k < numel * elem; ++k) ((unsigned char *)data)[k] = 0;
  return diopiSuccess;
}
