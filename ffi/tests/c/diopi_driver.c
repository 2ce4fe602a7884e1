/* Drives a DIOPI kernel library through the C ABI of libdipu_runtime.so
 * (ffi/tests/diopi.rs builds and runs it): `diopi_driver SCENARIO [ARG]`
 * exits 0 when every check of the scenario holds. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "diopi/dipu_diopi.h"
#include "diopi/functions.h"

typedef diopiError_t (*add_fn)(diopiContextHandle_t, diopiTensorHandle_t, diopiConstTensorHandle_t,
                               diopiConstTensorHandle_t, const diopiScalar_t *);
typedef diopiError_t (*fill_fn)(diopiContextHandle_t, diopiTensorHandle_t, const diopiScalar_t *);
typedef diopiError_t (*require_fn)(diopiContextHandle_t, int64_t, diopiTensorHandle_t *);

/* EXPECT_STATUS(call, status, text): the call fails with `status` and a
   last error message containing `text`. */
#define EXPECT_STATUS(call, status, text)                                               \
  do {                                                                                  \
    dipu_status s_ = (call);                                                            \
    if (s_ != (status) || !strstr(dipu_last_error_message(), (text))) {                 \
      fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d with \"%s\"\n", __FILE__, \
              __LINE__, #call, (int)s_, dipu_last_error_message(), (int)(status), text);  \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A host function that holds its stream until the gate is opened. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_opened = PTHREAD_COND_INITIALIZER;
static int gate_open;
static void set_gate(int open) {
  pthread_mutex_lock(&gate_lock);
  gate_open = open;
  pthread_cond_broadcast(&gate_opened);
  pthread_mutex_unlock(&gate_lock);
}
static void wait_for_gate(void *unused) {
  (void)unused;
  pthread_mutex_lock(&gate_lock);
  while (!gate_open) pthread_cond_wait(&gate_opened, &gate_lock);
  pthread_mutex_unlock(&gate_lock);
}

static struct diopiTensor desc_1d(void *storage, size_t nbytes, int32_t device, const int64_t *shape,
                                  const int64_t *stride) {
  struct diopiTensor t;
  memset(&t, 0, sizeof t);
  t.magic = DIPU_DIOPI_TENSOR_MAGIC;
  t.dtype = diopi_dtype_float32;
  t.device = device;
  t.ndim = 1;
  t.storage = storage;
  t.storage_offset = 0;
  t.storage_nbytes = nbytes;
  t.shape = shape;
  t.strides = stride;
  return t;
}

static uint64_t allocated_now(int32_t device) {
  dipu_memory_stats st;
  CHECK(dipu_memory_get_stats(device, &st));
  return st.allocated_bytes.current;
}

static void ops(const char *lib) {
  CHECK(dipu_diopi_open(lib));
  CHECK(dipu_diopi_open(lib)); /* the same library again is fine */
  char path[4096];
  size_t needed = 0;
  CHECK(dipu_diopi_library_path(path, sizeof path, &needed));
  EXPECT(strstr(path, "diopi_mini") != NULL);

  void *f = NULL;
  CHECK(dipu_diopi_lookup("diopiAdd", &f));
  EXPECT(f != NULL);
  add_fn add = (add_fn)f;
  CHECK(dipu_diopi_lookup("diopiFill", &f));
  fill_fn fill = (fill_fn)f;
  EXPECT(fill != NULL);
  f = (void *)1;
  CHECK(dipu_diopi_lookup("diopiMul", &f)); /* missing: NULL, not an error */
  EXPECT(f == NULL);
  CHECK(dipu_diopi_lookup("diopi_mini_kernels_run", &f));
  atomic_int *kernels_run = (atomic_int *)f;
  EXPECT(kernels_run != NULL);

  dipu_stream stream;
  CHECK(dipu_stream_create(0, 0, &stream));
  diopiContextHandle_t ctx;
  CHECK(dipu_diopi_context_create(stream, &ctx));
  diopiStreamHandle_t raw = NULL;
  EXPECT(diopiGetStream(ctx, &raw) == diopiSuccess);
  EXPECT((uint64_t)(uintptr_t)raw == stream.raw);

  enum { N = 1000 };
  size_t bytes = N * sizeof(float);
  float *a, *b, *out;
  CHECK(dipu_malloc(bytes, stream, (void **)&a));
  CHECK(dipu_malloc(bytes, stream, (void **)&b));
  CHECK(dipu_malloc(bytes, stream, (void **)&out));
  static float ha[N], hb[N], hout[N];
  for (int i = 0; i < N; i++) {
    ha[i] = (float)i;
    hb[i] = 0.5f * (float)i;
  }
  CHECK(dipu_memcpy(a, ha, bytes, DIPU_COPY_HOST_TO_DEVICE));
  CHECK(dipu_memcpy(b, hb, bytes, DIPU_COPY_HOST_TO_DEVICE));
  int64_t shape[1] = {N}, stride[1] = {1};
  struct diopiTensor ta = desc_1d(a, bytes, 0, shape, stride);
  struct diopiTensor tb = desc_1d(b, bytes, 0, shape, stride);
  struct diopiTensor tout = desc_1d(out, bytes, 0, shape, stride);
  diopiScalar_t alpha;
  alpha.stype = diopi_dtype_float64;
  alpha.fval = 2.0;

  /* Asynchronous: held behind a gate, the kernel has not run when
     diopiAdd returns; it has after a synchronize. */
  set_gate(0);
  CHECK(dipu_launch_host_func(stream, wait_for_gate, NULL));
  int before = atomic_load(kernels_run);
  EXPECT(add(ctx, &tout, &ta, &tb, &alpha) == diopiSuccess);
  /* Gives a kernel run out of stream order the time to show (one in
     order cannot run, however long this lasts). */
  sleep_ms(20);
  EXPECT(atomic_load(kernels_run) == before);
  set_gate(1);
  CHECK(dipu_stream_synchronize(stream));
  EXPECT(atomic_load(kernels_run) == before + 1);
  CHECK(dipu_memcpy(hout, out, bytes, DIPU_COPY_DEVICE_TO_HOST));
  for (int i = 0; i < N; i++) EXPECT(hout[i] == ha[i] + 2.0f * hb[i]);

  /* A descriptor from dipu_diopi_tensor_create works as well. */
  diopiTensorHandle_t hfill;
  CHECK(dipu_diopi_tensor_create(&tout, &hfill));
  diopiScalar_t three;
  three.stype = diopi_dtype_int64;
  three.ival = 3;
  EXPECT(fill(ctx, hfill, &three) == diopiSuccess);
  CHECK(dipu_stream_synchronize(stream));
  CHECK(dipu_memcpy(hout, out, bytes, DIPU_COPY_DEVICE_TO_HOST));
  EXPECT(hout[0] == 3.0f && hout[N - 1] == 3.0f);
  CHECK(dipu_diopi_tensor_destroy(hfill));
  EXPECT_STATUS(dipu_diopi_tensor_destroy(hfill), DIPU_STATUS_INVALID_ARGUMENT, "not a live handle");

  /* A kernel's failure: diopiErrorOccurred and its message. */
  int64_t short_shape[1] = {N - 1};
  struct diopiTensor tshort = desc_1d(b, bytes, 0, short_shape, stride);
  EXPECT(add(ctx, &tout, &ta, &tshort, &alpha) == diopiErrorOccurred);
  char msg[256];
  CHECK(dipu_diopi_last_error(msg, sizeof msg, NULL));
  EXPECT(strstr(msg, "differ in size") != NULL);

  /* diopirt getters of a descriptor, NULL-safe. */
  int64_t numel = -1;
  EXPECT(diopiGetTensorNumel(NULL, &numel) == diopiSuccess && numel == 0);
  diopiSize_t sz;
  EXPECT(diopiGetTensorShape(NULL, &sz) == diopiErrorOccurred);
  EXPECT(strstr(dipu_last_error_message(), "NULL") != NULL);
  EXPECT(diopiGetTensorShape(&ta, NULL) == diopiErrorOccurred);
  size_t nbytes = 0;
  EXPECT(diopiGetTensorStorageNbytes(&ta, &nbytes) == diopiSuccess && nbytes == bytes);
  struct diopiTensor bad = ta;
  bad.magic = 0x12345678u;
  EXPECT(diopiGetTensorShape(&bad, &sz) == diopiErrorOccurred);
  EXPECT(strstr(dipu_last_error_message(), "magic") != NULL);
  EXPECT(strcmp(diopiGetVersion(), "DIOPI Version: 1.0.0") == 0);

  /* Required memory: from the caching allocator on the stream, freed at
     context destroy (stream-ordered), host requires after the stream. */
  CHECK(dipu_diopi_lookup("diopi_mini_require", &f));
  require_fn require = (require_fn)f;
  diopiContextHandle_t ctx2;
  CHECK(dipu_diopi_context_create(stream, &ctx2));
  uint64_t base = allocated_now(0);
  diopiTensorHandle_t req = NULL;
  EXPECT(require(ctx2, 1 << 20, &req) == diopiSuccess);
  EXPECT(allocated_now(0) >= base + (1 << 20));
  void *req_data = NULL;
  EXPECT(diopiGetTensorData(req, &req_data) == diopiSuccess && req_data != NULL);
  CHECK(dipu_diopi_context_destroy(ctx2));
  EXPECT(allocated_now(0) == base);
  CHECK(dipu_stream_synchronize(stream));
  EXPECT_STATUS(dipu_diopi_context_destroy(ctx2), DIPU_STATUS_INVALID_ARGUMENT, "not a live DIOPI context");
  EXPECT(diopiGetStream(ctx2, &raw) == diopiErrorOccurred);
  EXPECT(strstr(dipu_last_error_message(), "not a live DIOPI context") != NULL);
  diopiTensorHandle_t t2;
  int64_t one[1] = {1};
  diopiSize_t s1 = {one, 1};
  EXPECT(diopiRequireTensor(ctx2, &t2, &s1, NULL, diopi_dtype_float32, diopi_device) == diopiErrorOccurred);

  /* Generators: seed and offset round trip, seen by the runtime. */
  diopiGeneratorHandle_t g, g_again;
  CHECK(dipu_diopi_generator(0, &g));
  CHECK(dipu_diopi_generator(0, &g_again));
  EXPECT(g == g_again);
  EXPECT(diopiGeneratorSetSeedAndOffset(g, 1234, 8) == diopiSuccess);
  uint64_t seed = 0, offset = 0;
  EXPECT(diopiGeneratorGetSeedAndOffset(g, &seed, &offset) == diopiSuccess);
  EXPECT(seed == 1234 && offset == 8);
  uint64_t rt_seed = 0;
  CHECK(dipu_generator_initial_seed(0, &rt_seed));
  EXPECT(rt_seed == 1234);
  uint64_t s, o;
  CHECK(dipu_generator_philox_inputs(0, 4, &s, &o));
  EXPECT(s == 1234 && o == 8);
  EXPECT(diopiGeneratorGetSeedAndOffset(g, &seed, &offset) == diopiSuccess && offset == 12);
  diopiTensorHandle_t state;
  EXPECT(diopiGeneratorGetState(ctx, g, &state) == diopiSuccess);
  EXPECT(diopiGeneratorSetSeedAndOffset(g, 99, 0) == diopiSuccess);
  EXPECT(diopiGeneratorSetState(g, state) == diopiSuccess);
  EXPECT(diopiGeneratorGetSeedAndOffset(g, &seed, &offset) == diopiSuccess);
  EXPECT(seed == 1234 && offset == 12);
  EXPECT(diopiGeneratorGetSeedAndOffset((diopiGeneratorHandle_t)&ta, &seed, &offset) == diopiErrorOccurred);
  EXPECT_STATUS(dipu_diopi_generator(99, &g), DIPU_STATUS_INVALID_DEVICE, "99");

  /* Bad input to the C functions. */
  EXPECT_STATUS(dipu_diopi_context_create(stream, NULL), DIPU_STATUS_INVALID_ARGUMENT, "out is NULL");
  EXPECT_STATUS(dipu_diopi_lookup(NULL, &f), DIPU_STATUS_INVALID_ARGUMENT, "name is NULL");
  EXPECT_STATUS(dipu_diopi_tensor_create(&bad, &hfill), DIPU_STATUS_INVALID_ARGUMENT, "magic");
  EXPECT_STATUS(dipu_diopi_tensor_create(NULL, &hfill), DIPU_STATUS_INVALID_ARGUMENT, "NULL");
  struct diopiTensor past = ta;
  past.storage_offset = 1;
  EXPECT_STATUS(dipu_diopi_tensor_create(&past, &hfill), DIPU_STATUS_INVALID_ARGUMENT, "past its storage");
  struct diopiTensor as_host = ta;
  as_host.device = DIPU_DIOPI_HOST_DEVICE;
  EXPECT_STATUS(dipu_diopi_tensor_create(&as_host, &hfill), DIPU_STATUS_INVALID_ARGUMENT, "device memory");
  EXPECT_STATUS(dipu_launch_host_func(stream, NULL, NULL), DIPU_STATUS_INVALID_ARGUMENT, "func is NULL");
  EXPECT_STATUS(dipu_launch_host_func_raw(0, NULL, NULL, NULL), DIPU_STATUS_INVALID_ARGUMENT, "func is NULL");
  EXPECT_STATUS(dipu_launch_host_func_raw(7, NULL, wait_for_gate, NULL), DIPU_STATUS_INVALID_DEVICE, "7");
  EXPECT_STATUS(dipu_diopi_open("/nonexistent/libdiopi_other.so"), DIPU_STATUS_VENDOR_LIBRARY_NOT_FOUND,
                "/nonexistent/libdiopi_other.so");

  CHECK(dipu_diopi_context_destroy(ctx));
  CHECK(dipu_free(a));
  CHECK(dipu_free(b));
  CHECK(dipu_free(out));
  CHECK(dipu_diopi_close());
  EXPECT_STATUS(dipu_diopi_lookup("diopiAdd", &f), DIPU_STATUS_INVALID_ARGUMENT, "no DIOPI kernel library is open");
}

/* Another library while one is open is refused; descriptors of another
   device's memory are refused (DIPU_HOST_DEVICES=2). */
static void two(const char *lib, const char *other) {
  CHECK(dipu_diopi_open(lib));
  EXPECT_STATUS(dipu_diopi_open(other), DIPU_STATUS_INVALID_ARGUMENT, "close it before opening");
  dipu_stream s1 = {1, 0, 0};
  void *p;
  CHECK(dipu_malloc(64, s1, &p));
  int64_t shape[1] = {16}, stride[1] = {1};
  struct diopiTensor t = desc_1d(p, 64, 0, shape, stride);
  diopiTensorHandle_t h;
  EXPECT_STATUS(dipu_diopi_tensor_create(&t, &h), DIPU_STATUS_INVALID_ARGUMENT, "memory of device 1");
  t.device = 1;
  CHECK(dipu_diopi_tensor_create(&t, &h));
  CHECK(dipu_diopi_tensor_destroy(h));
  CHECK(dipu_free(p));
}

/* The probe library of diopi_weak_probe.c under dipu-rs: every optional
   (weak) runtime function is there, and its guarded use works. */
static void weak(const char *lib) {
  CHECK(dipu_diopi_open(lib));
  void *f;
  CHECK(dipu_diopi_lookup("diopi_weak_probe_present", &f));
  EXPECT(f != NULL);
  uint32_t mask = ((uint32_t (*)(void))f)();
  CHECK(dipu_diopi_lookup("diopi_weak_probe_count", &f));
  int count = ((int (*)(void))f)();
  CHECK(dipu_diopi_lookup("diopi_weak_probe_name", &f));
  const char *(*name)(int) = (const char *(*)(int))f;
  EXPECT(count == 19);
  for (int i = 0; i < count; ++i)
    if (!(mask & (UINT32_C(1) << i))) fprintf(stderr, "%s is NULL under dipu-rs\n", name(i));
  EXPECT(mask == (UINT32_C(1) << count) - 1);

  typedef diopiError_t (*zero_fn)(diopiContextHandle_t, diopiTensorHandle_t);
  CHECK(dipu_diopi_lookup("diopiZeroInp", &f));
  EXPECT(f != NULL);
  dipu_stream stream;
  CHECK(dipu_stream_create(0, 0, &stream));
  diopiContextHandle_t ctx;
  CHECK(dipu_diopi_context_create(stream, &ctx));
  float host[4] = {1, 2, 3, 4};
  float *dev;
  CHECK(dipu_malloc(sizeof host, stream, (void **)&dev));
  CHECK(dipu_memcpy(dev, host, sizeof host, DIPU_COPY_HOST_TO_DEVICE));
  int64_t shape[1] = {4}, stride[1] = {1};
  struct diopiTensor t = desc_1d(dev, sizeof host, 0, shape, stride);
  EXPECT(((zero_fn)f)(ctx, &t) == diopiSuccess);
  CHECK(dipu_memcpy(host, dev, sizeof host, DIPU_COPY_DEVICE_TO_HOST));
  for (int i = 0; i < 4; ++i) EXPECT(host[i] == 0.0f);
  CHECK(dipu_diopi_context_destroy(ctx));
  CHECK(dipu_free(dev));
}

int main(int argc, char **argv) {
  const char *scenario = argc > 1 ? argv[1] : "";
  const char *arg = argc > 2 ? argv[2] : NULL;
  if (strcmp(scenario, "ops") == 0) {
    ops(arg);
  } else if (strcmp(scenario, "two") == 0) {
    two(arg, argv[3]);
  } else if (strcmp(scenario, "weak") == 0) {
    weak(arg);
  } else if (strcmp(scenario, "no-library") == 0) {
    void *f;
    EXPECT_STATUS(dipu_diopi_lookup("diopiAdd", &f), DIPU_STATUS_INVALID_ARGUMENT,
                  "no DIOPI kernel library is open");
    char buf[16];
    EXPECT_STATUS(dipu_diopi_last_error(buf, sizeof buf, NULL), DIPU_STATUS_INVALID_ARGUMENT, "no DIOPI");
    EXPECT_STATUS(dipu_diopi_library_path(buf, sizeof buf, NULL), DIPU_STATUS_INVALID_ARGUMENT, "no DIOPI");
  } else if (strcmp(scenario, "missing") == 0) {
    EXPECT_STATUS(dipu_diopi_open(arg), DIPU_STATUS_ABI_MISMATCH, "`diopiNoSuchRuntimeFunction`");
    EXPECT(strstr(dipu_last_error_message(), arg) != NULL);
  } else if (strcmp(scenario, "open-default") == 0) {
    /* arg: the expected path suffix, or "fail:TEXT" for the expected message */
    if (strncmp(arg, "fail:", 5) == 0) {
      EXPECT_STATUS(dipu_diopi_open(NULL), DIPU_STATUS_VENDOR_LIBRARY_NOT_FOUND, arg + 5);
      fprintf(stderr, "%s\n", dipu_last_error_message());
    } else {
      CHECK(dipu_diopi_open(NULL));
      char path[4096];
      CHECK(dipu_diopi_library_path(path, sizeof path, NULL));
      size_t n = strlen(path), m = strlen(arg);
      EXPECT(n >= m && strcmp(path + n - m, arg) == 0);
      void *f;
      CHECK(dipu_diopi_lookup("diopiAdd", &f));
      EXPECT(f != NULL);
    }
  } else {
    fprintf(stderr, "unknown scenario `%s`\n", scenario);
    return 2;
  }
  printf("ok\n");
  return 0;
}
