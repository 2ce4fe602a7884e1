/* A DIOPI kernel library with known bugs, for `dipu diopi-test`'s own
 * test: each function breaks one rule the runner must catch. Float32
 * only, computed on the calling thread on the host vendor's memory (plain
 * host memory), which is right only while the stream is idle.
 *
 *   diopiNeg        always fails with diopiErrorOccurred and a message
 *   diopiAbs        ignores strides (reads and writes as if contiguous)
 *   diopiSqrt       right values, but also overwrites its input
 *   diopiUniformInp in range with the right mean, but never advances the
 *                   generator (so every call repeats itself)
 *   diopiExp        right values, but queued on the device's default
 *                   stream instead of the context's (contiguous only)
 *   diopiRelu       right values (strides, 0-dim and empty included), but
 *                   computed on the calling thread: wrong only when work
 *                   queued on the stream before the call has not run yet
 * diopiAdd is absent: the runner must list it as not in the library. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diopi/diopirt.h"
#include "diopi/functions.h"

/* From dipu-rs's C ABI (include/dipu_runtime.h), resolved against the
 * `dipu` executable: queue fn(user) on a raw stream (NULL: the default). */
extern int dipu_launch_host_func_raw(int32_t device, void *raw_stream, void (*fn)(void *), void *user);

static char last_error[256] = "";

const char *diopiGetLastErrorString(void) { return last_error; }

const char *diopiGetVendorName(void) { return "bad"; }

static int is_f32(diopiConstTensorHandle_t t) {
  diopiDtype_t dt;
  return diopiGetTensorDtype(t, &dt) == diopiSuccess && dt == diopi_dtype_float32;
}

/* Offset in elements of the k-th element (row-major) of a strided view. */
static int64_t offset_of(int64_t k, diopiSize_t shape, diopiSize_t stride) {
  int64_t off = 0;
  for (int64_t d = shape.len - 1; d >= 0; --d) {
    off += (k % shape.data[d]) * stride.data[d];
    k /= shape.data[d];
  }
  return off;
}

diopiError_t diopiNeg(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t input) {
  (void)ctx;
  (void)out;
  (void)input;
  strcpy(last_error, "bad kernels: Neg always fails");
  return diopiErrorOccurred;
}

diopiError_t diopiAbs(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t input) {
  (void)ctx;
  if (!is_f32(out) || !is_f32(input)) return diopiDtypeNotSupported;
  int64_t n;
  void *o;
  const void *i;
  diopiGetTensorNumel(input, &n);
  diopiGetTensorData(out, &o);
  diopiGetTensorDataConst(input, &i);
  for (int64_t k = 0; k < n; ++k) ((float *)o)[k] = fabsf(((const float *)i)[k]);
  return diopiSuccess;
}

diopiError_t diopiRelu(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t input) {
  (void)ctx;
  if (!is_f32(out) || !is_f32(input)) return diopiDtypeNotSupported;
  int64_t n;
  void *o;
  const void *i;
  diopiSize_t shape, ostride, istride;
  diopiGetTensorNumel(input, &n);
  diopiGetTensorShape(input, &shape);
  diopiGetTensorStride(out, &ostride);
  diopiGetTensorStride(input, &istride);
  diopiGetTensorData(out, &o);
  diopiGetTensorDataConst(input, &i);
  for (int64_t k = 0; k < n; ++k) {
    float v = ((const float *)i)[offset_of(k, shape, istride)];
    ((float *)o)[offset_of(k, shape, ostride)] = v > 0 ? v : 0;
  }
  return diopiSuccess;
}

diopiError_t diopiSqrt(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t input) {
  diopiError_t r = diopiRelu(ctx, out, input); /* strides handled there */
  if (r != diopiSuccess) return r;
  int64_t n;
  void *o;
  diopiSize_t shape, stride;
  diopiGetTensorNumel(out, &n);
  diopiGetTensorShape(out, &shape);
  diopiGetTensorStride(out, &stride);
  diopiGetTensorData(out, &o);
  for (int64_t k = 0; k < n; ++k) {
    float *p = (float *)o + offset_of(k, shape, stride);
    *p = sqrtf(*p);
  }
  void *in;
  /* The bug: write through the const input. */
  diopiGetTensorData((diopiTensorHandle_t)input, &in);
  if (n > 0) ((float *)in)[0] = -1.0f;
  return diopiSuccess;
}

diopiError_t diopiUniformInp(diopiContextHandle_t ctx, diopiTensorHandle_t inout, double from, double to,
                             diopiGeneratorHandle_t generator) {
  (void)ctx;
  (void)generator;
  if (!is_f32(inout)) return diopiDtypeNotSupported;
  int64_t n;
  void *p;
  diopiSize_t shape, stride;
  diopiGetTensorNumel(inout, &n);
  diopiGetTensorShape(inout, &shape);
  diopiGetTensorStride(inout, &stride);
  diopiGetTensorData(inout, &p);
  for (int64_t k = 0; k < n; ++k)
    ((float *)p)[offset_of(k, shape, stride)] = (float)(from + (to - from) * ((double)(k % 100) + 0.5) / 100.0);
  return diopiSuccess;
}

typedef struct {
  float *out;
  const float *in;
  int64_t n;
} exp_job;

static void run_exp(void *user) {
  exp_job *j = user;
  for (int64_t k = 0; k < j->n; ++k) j->out[k] = expf(j->in[k]);
  free(j);
}

diopiError_t diopiExp(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t input) {
  (void)ctx;
  if (!is_f32(out) || !is_f32(input)) return diopiDtypeNotSupported;
  exp_job *j = malloc(sizeof *j);
  if (!j) return diopiErrorOccurred;
  void *o;
  const void *i;
  diopiGetTensorNumel(input, &j->n);
  diopiGetTensorData(out, &o);
  diopiGetTensorDataConst(input, &i);
  j->out = o;
  j->in = i;
  /* The bug: the default stream, not diopiGetStream(ctx). */
  if (dipu_launch_host_func_raw(0, NULL, run_exp, j) != 0) {
    free(j);
    strcpy(last_error, "bad kernels: launch failed");
    return diopiErrorOccurred;
  }
  return diopiSuccess;
}
