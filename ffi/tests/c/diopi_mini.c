/* A tiny DIOPI kernel library for the tests (ffi/tests/diopi.rs): float32
 * diopiAdd and diopiFill over memory the host can address (the host
 * vendor's), queued on the context's stream with dipu_launch_host_func_raw
 * and returning without waiting, as the contract asks of every kernel.
 * diopi_mini_require exercises diopiRequireBuffer/RequireTensor, and
 * diopi_mini_kernels_run counts finished kernels. */
#define DIOPI_API
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diopi/functions.h"
#include "dipu_runtime.h"

atomic_int diopi_mini_kernels_run;

static _Thread_local char last_error[256];

static diopiError_t fail(const char *msg) {
    snprintf(last_error, sizeof last_error, "diopi_mini: %s", msg);
    return diopiErrorOccurred;
}

const char *diopiGetVendorName(void) { return "mini"; }
const char *diopiGetImplVersion(void) { return "mini 1"; }
const char *diopiGetLastErrorString(void) { return last_error; }

struct job {
    float *out;
    const float *a;
    const float *b;
    float alpha;
    int64_t n;
};

static void add_kernel(void *p) {
    struct job *j = (struct job *)p;
    for (int64_t i = 0; i < j->n; i++) j->out[i] = j->a[i] + j->alpha * j->b[i];
    atomic_fetch_add(&diopi_mini_kernels_run, 1);
    free(j);
}

static void fill_kernel(void *p) {
    struct job *j = (struct job *)p;
    for (int64_t i = 0; i < j->n; i++) j->out[i] = j->alpha;
    atomic_fetch_add(&diopi_mini_kernels_run, 1);
    free(j);
}

/* Contiguous float32 of n elements on a device; its device index. */
static int contiguous_f32(diopiConstTensorHandle_t t, int64_t *n, diopiDeviceIndex_t *dev) {
    diopiDtype_t dt;
    diopiSize_t shape, stride;
    if (diopiGetTensorDtype(t, &dt) != diopiSuccess || dt != diopi_dtype_float32) return 0;
    if (diopiGetTensorShape(t, &shape) != diopiSuccess) return 0;
    if (diopiGetTensorStride(t, &stride) != diopiSuccess) return 0;
    int64_t expect = 1;
    for (int64_t i = shape.len - 1; i >= 0; i--) {
        if (shape.data[i] > 1 && stride.data[i] != expect) return 0;
        expect *= shape.data[i];
    }
    if (diopiGetTensorNumel(t, n) != diopiSuccess) return 0;
    return diopiGetTensorDeviceIndex(t, dev) == diopiSuccess;
}

static double scalar_value(const diopiScalar_t *s) {
    if (!s) return 1.0;
    return (s->stype == diopi_dtype_float64 || s->stype == diopi_dtype_float32) ? s->fval : (double)s->ival;
}

static diopiError_t launch(diopiContextHandle_t ctx, int device, void (*fn)(void *), struct job *j) {
    diopiStreamHandle_t stream;
    if (diopiGetStream(ctx, &stream) != diopiSuccess) {
        free(j);
        return fail("diopiGetStream failed");
    }
    if (dipu_launch_host_func_raw(device, stream, fn, j) != DIPU_OK) {
        free(j);
        return fail("dipu_launch_host_func_raw failed");
    }
    return diopiSuccess;
}

diopiError_t diopiAdd(diopiContextHandle_t ctx, diopiTensorHandle_t out, diopiConstTensorHandle_t input,
                      diopiConstTensorHandle_t other, const diopiScalar_t *alpha) {
    int64_t n_out, n_a, n_b;
    diopiDeviceIndex_t d_out, d_a, d_b;
    if (!contiguous_f32(out, &n_out, &d_out) || !contiguous_f32(input, &n_a, &d_a) ||
        !contiguous_f32(other, &n_b, &d_b))
        return fail("diopiAdd takes contiguous float32 tensors");
    if (n_out != n_a || n_out != n_b) return fail("diopiAdd: the tensors differ in size");
    if (d_out != d_a || d_out != d_b || d_out < 0) return fail("diopiAdd: the tensors are not on one device");
    struct job *j = (struct job *)malloc(sizeof *j);
    void *o;
    const void *a, *b;
    diopiGetTensorData(out, &o);
    diopiGetTensorDataConst(input, &a);
    diopiGetTensorDataConst(other, &b);
    j->out = (float *)o;
    j->a = (const float *)a;
    j->b = (const float *)b;
    j->alpha = (float)scalar_value(alpha);
    j->n = n_out;
    return launch(ctx, d_out, add_kernel, j);
}

diopiError_t diopiFill(diopiContextHandle_t ctx, diopiTensorHandle_t input, const diopiScalar_t *value) {
    int64_t n;
    diopiDeviceIndex_t d;
    if (!contiguous_f32(input, &n, &d) || d < 0) return fail("diopiFill takes a contiguous float32 device tensor");
    struct job *j = (struct job *)malloc(sizeof *j);
    void *o;
    diopiGetTensorData(input, &o);
    j->out = (float *)o;
    j->a = j->b = NULL;
    j->alpha = (float)scalar_value(value);
    j->n = n;
    return launch(ctx, d, fill_kernel, j);
}

/* Requires a device buffer of `nbytes` and a host float32 tensor of 4
   elements, fills both with a kernel on the stream, and hands the device
   buffer out through *out. */
diopiError_t diopi_mini_require(diopiContextHandle_t ctx, int64_t nbytes, diopiTensorHandle_t *out);
diopiError_t diopi_mini_require(diopiContextHandle_t ctx, int64_t nbytes, diopiTensorHandle_t *out) {
    diopiTensorHandle_t buf, host;
    int64_t shape[1] = {4};
    diopiSize_t size = {shape, 1};
    if (diopiRequireBuffer(ctx, &buf, nbytes, diopi_device) != diopiSuccess) return fail("RequireBuffer");
    if (diopiRequireTensor(ctx, &host, &size, NULL, diopi_dtype_float32, diopi_host) != diopiSuccess)
        return fail("RequireTensor");
    diopiDevice_t where;
    diopiDtype_t dt;
    int64_t numel;
    if (diopiGetTensorDevice(host, &where) != diopiSuccess || where != diopi_host) return fail("host device");
    if (diopiGetTensorDevice(buf, &where) != diopiSuccess || where != diopi_device) return fail("device");
    if (diopiGetTensorDtype(buf, &dt) != diopiSuccess || dt != diopi_dtype_int8) return fail("buffer dtype");
    if (diopiGetTensorNumel(buf, &numel) != diopiSuccess || numel != nbytes) return fail("buffer numel");
    diopiDeviceIndex_t d;
    diopiGetTensorDeviceIndex(buf, &d);
    struct job *j = (struct job *)malloc(sizeof *j);
    void *o;
    diopiGetTensorData(host, &o);
    j->out = (float *)o;
    j->a = j->b = NULL;
    j->alpha = 7.0f;
    j->n = 4;
    *out = buf;
    return launch(ctx, d, fill_kernel, j);
}
