/* A DIOPI kernel library that is wrong for one function, for the op tools'
 * tests (tests/test_op_tools.py): diopiAdd computes input + other and
 * ignores alpha. Float32 only (anything else is refused, so the op falls
 * back). It has no other function: every other op falls back to the CPU.
 * The sum runs on a host thread queued on the context's stream
 * (dipu_launch_host_func_raw), after the work queued before it, as the
 * host vendor's memory is plain host memory. */
#include <stdlib.h>
#include <string.h>

#include "diopi/diopirt.h"
#include "diopi/functions.h"

/* From dipu-rs's C ABI (include/dipu_runtime.h), resolved against
 * libdipu_runtime.so, which torch_dipu has loaded. */
extern int dipu_launch_host_func_raw(int32_t device, void *raw_stream, void (*fn)(void *), void *user);

static char last_error[128] = "";

const char *diopiGetLastErrorString(void) { return last_error; }

const char *diopiGetVendorName(void) { return "add-ignores-alpha"; }

#define MAX_DIMS 8

typedef struct {
  float *out;
  const float *a, *b;
  int64_t numel, ndim;
  int64_t shape[MAX_DIMS], so[MAX_DIMS], sa[MAX_DIMS], sb[MAX_DIMS];
} add_job;

static int64_t offset_of(int64_t k, const add_job *j, const int64_t *stride) {
  int64_t off = 0;
  for (int64_t d = j->ndim - 1; d >= 0; --d) {
    off += (k % j->shape[d]) * stride[d];
    k /= j->shape[d];
  }
  return off;
}

static void run_add(void *user) {
  add_job *j = (add_job *)user;
  for (int64_t k = 0; k < j->numel; ++k)
    j->out[offset_of(k, j, j->so)] = j->a[offset_of(k, j, j->sa)] + j->b[offset_of(k, j, j->sb)];
  free(j);
}

static int same_shape_f32(diopiConstTensorHandle_t t, diopiSize_t shape, int64_t *stride) {
  diopiDtype_t dt;
  diopiSize_t s, st;
  if (diopiGetTensorDtype(t, &dt) != diopiSuccess || dt != diopi_dtype_float32) return 0;
  if (diopiGetTensorShape(t, &s) != diopiSuccess || s.len != shape.len) return 0;
  if (diopiGetTensorStride(t, &st) != diopiSuccess) return 0;
  for (int64_t d = 0; d < s.len; ++d) {
    if (s.data[d] != shape.data[d]) return 0;
    stride[d] = st.data[d];
  }
  return 1;
}

diopiError_t diopiAdd(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t input,
                      diopiConstTensorHandle_t other, const diopiScalar_t *alpha) {
  (void)alpha; /* the deliberate bug */
  diopiSize_t shape;
  add_job *j = calloc(1, sizeof *j);
  if (j == NULL) return diopiErrorOccurred;
  if (diopiGetTensorShape(out, &shape) != diopiSuccess || shape.len > MAX_DIMS) goto refuse;
  j->ndim = shape.len;
  j->numel = 1;
  for (int64_t d = 0; d < shape.len; ++d) {
    j->shape[d] = shape.data[d];
    j->numel *= shape.data[d];
  }
  if (!same_shape_f32(out, shape, j->so) || !same_shape_f32(input, shape, j->sa) ||
      !same_shape_f32(other, shape, j->sb))
    goto refuse;
  void *o = NULL;
  const void *a = NULL, *b = NULL;
  diopiStreamHandle_t stream = NULL;
  if (diopiGetTensorData(out, &o) != diopiSuccess || diopiGetTensorDataConst(input, &a) != diopiSuccess ||
      diopiGetTensorDataConst(other, &b) != diopiSuccess || diopiGetStream(ctx, &stream) != diopiSuccess)
    goto refuse;
  j->out = (float *)o;
  j->a = (const float *)a;
  j->b = (const float *)b;
  diopiDeviceIndex_t device = 0;
  if (diopiGetTensorDeviceIndex != NULL) diopiGetTensorDeviceIndex(out, &device);
  if (dipu_launch_host_func_raw(device, stream, run_add, j) != 0) {
    strcpy(last_error, "add-ignores-alpha: cannot queue the sum on the stream");
    free(j);
    return diopiErrorOccurred;
  }
  return diopiSuccess;
refuse:
  free(j);
  strcpy(last_error, "add-ignores-alpha: float32 tensors of one shape only");
  return diopiDtypeNotSupported;
}
