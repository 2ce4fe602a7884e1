/*
 * A minimal dipu-rs vendor written in C against include/dipu_vendor.h.
 *
 * One device backed by host memory with a 1 GiB budget. All work runs
 * synchronously when it is enqueued: a stream is always drained and an
 * event completes when it is recorded. That is enough for the plugin ABI
 * tests, and the conformance suite passes it except for the checks that
 * need work to be pending on a stream (tests/tests/c_vendor.rs). No
 * collectives, no virtual memory (their table entries are NULL, so the
 * loader reports them as unsupported). Built with -DNO_DEVICE, its
 * device_count reports NoDevice.
 */
#define _POSIX_C_SOURCE 200809L
#include "dipu_vendor.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUDGET (1024ull * 1024 * 1024)
#define MAX_HANDLES 4096
#define MAX_ALLOCS 65536

typedef struct {
  void *ptr;
  size_t bytes;
  int host;
} alloc_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static alloc_t allocs[MAX_ALLOCS];
static size_t used;
static int streams[MAX_HANDLES]; /* 1 = live */
static struct {
  int live, timing, recorded;
  double ms;
} events[MAX_HANDLES];
static _Thread_local int current_device;

static int fail(DipuErr err, int kind, const char *message) {
  if (err) {
    err->kind = kind;
    err->has_vendor_code = 0;
    err->vendor_code = 0;
    snprintf(err->message, sizeof err->message, "c-minimal: %s", message);
  }
  return kind;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int check_device(int device, DipuErr err) {
  return device == 0 ? 0 : fail(err, DIPU_ERROR_KIND_INVALID_DEVICE, "device index out of range: only device 0 exists");
}

static int check_stream(uint64_t stream, DipuErr err) {
  if (stream == 0 || (stream < MAX_HANDLES && streams[stream])) return 0;
  return fail(err, DIPU_ERROR_KIND_INVALID_ARGUMENT, "unknown stream handle");
}

static int check_event(uint64_t event, DipuErr err) {
  if (event > 0 && event < MAX_HANDLES && events[event].live) return 0;
  return fail(err, DIPU_ERROR_KIND_INVALID_ARGUMENT, "unknown event handle");
}

static int describe(void *pd, DipuVendorInfo *out, DipuErr err) {
  (void)pd;
  (void)err;
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "c-minimal");
  snprintf(out->version, sizeof out->version, "c-minimal 1.0 (synchronous, 1 device)");
  return 0;
}

static int device_count(void *pd, int32_t *out, DipuErr err) {
  (void)pd;
#ifdef NO_DEVICE
  /* -DNO_DEVICE: a machine whose driver loads but finds no device. */
  (void)out;
  return fail(err, DIPU_ERROR_KIND_NO_DEVICE, "no accelerator found (built with NO_DEVICE)");
#else
  (void)err;
  *out = 1;
  return 0;
#endif
}

static int current_device_fn(void *pd, int32_t *out, DipuErr err) {
  (void)pd;
  (void)err;
  *out = current_device;
  return 0;
}

static int set_device(void *pd, int32_t device, DipuErr err) {
  (void)pd;
  if (check_device(device, err)) return DIPU_ERROR_KIND_INVALID_DEVICE;
  current_device = device;
  return 0;
}

static int synchronize_device(void *pd, DipuErr err) {
  (void)pd;
  (void)err;
  return 0;
}

static int device_properties(void *pd, int32_t device, DipuVendorDeviceProperties *out, DipuErr err) {
  (void)pd;
  if (check_device(device, err)) return DIPU_ERROR_KIND_INVALID_DEVICE;
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "c-minimal device 0");
  out->total_memory = BUDGET;
  out->major = 1;
  out->minor = 0;
  out->multiprocessor_count = 1;
  return 0;
}

static int memory_info(void *pd, uint64_t *free_bytes, uint64_t *total, DipuErr err) {
  (void)pd;
  (void)err;
  pthread_mutex_lock(&lock);
  *free_bytes = BUDGET - used;
  pthread_mutex_unlock(&lock);
  *total = BUDGET;
  return 0;
}

static int allocate(size_t bytes, int host, void **out, DipuErr err) {
  *out = NULL;
  if (bytes == 0) return 0;
  pthread_mutex_lock(&lock);
  if (!host && bytes > BUDGET - used) {
    pthread_mutex_unlock(&lock);
    return fail(err, DIPU_ERROR_KIND_OUT_OF_MEMORY, "out of device memory (1 GiB budget)");
  }
  size_t slot = 0;
  while (slot < MAX_ALLOCS && allocs[slot].ptr) slot++;
  void *p = slot < MAX_ALLOCS ? malloc(bytes) : NULL;
  if (!p) {
    pthread_mutex_unlock(&lock);
    return fail(err, DIPU_ERROR_KIND_OUT_OF_MEMORY, "host malloc failed");
  }
  allocs[slot] = (alloc_t){p, bytes, host};
  if (!host) used += bytes;
  pthread_mutex_unlock(&lock);
  *out = p;
  return 0;
}

static int release_alloc(void *ptr, int host, DipuErr err) {
  if (!ptr) return 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < MAX_ALLOCS; i++) {
    if (allocs[i].ptr == ptr && allocs[i].host == host) {
      if (!host) used -= allocs[i].bytes;
      allocs[i].ptr = NULL;
      pthread_mutex_unlock(&lock);
      free(ptr);
      return 0;
    }
  }
  pthread_mutex_unlock(&lock);
  return fail(err, DIPU_ERROR_KIND_INVALID_ARGUMENT, "double free or unknown pointer");
}

static int malloc_fn(void *pd, size_t bytes, void **out, DipuErr err) {
  (void)pd;
  return allocate(bytes, 0, out, err);
}
static int free_fn(void *pd, void *ptr, DipuErr err) {
  (void)pd;
  return release_alloc(ptr, 0, err);
}
static int malloc_host(void *pd, size_t bytes, void **out, DipuErr err) {
  (void)pd;
  return allocate(bytes, 1, out, err);
}
static int free_host(void *pd, void *ptr, DipuErr err) {
  (void)pd;
  return release_alloc(ptr, 1, err);
}

static int memset_fn(void *pd, void *ptr, uint8_t value, size_t bytes, DipuErr err) {
  (void)pd;
  if (!ptr && bytes) return fail(err, DIPU_ERROR_KIND_INVALID_ARGUMENT, "null pointer");
  if (bytes) memset(ptr, value, bytes);
  return 0;
}
static int memset_async(void *pd, void *ptr, uint8_t value, size_t bytes, uint64_t stream, DipuErr err) {
  if (check_stream(stream, err)) return DIPU_ERROR_KIND_INVALID_ARGUMENT;
  return memset_fn(pd, ptr, value, bytes, err);
}
static int memcpy_fn(void *pd, void *dst, const void *src, size_t bytes, int32_t kind, DipuErr err) {
  (void)pd;
  if (kind < DIPU_COPY_KIND_HOST_TO_DEVICE || kind > DIPU_COPY_KIND_HOST_TO_HOST)
    return fail(err, DIPU_ERROR_KIND_INVALID_ARGUMENT, "unknown copy kind");
  if ((!dst || !src) && bytes) return fail(err, DIPU_ERROR_KIND_INVALID_ARGUMENT, "null pointer");
  if (bytes) memmove(dst, src, bytes);
  return 0;
}
static int memcpy_async(void *pd, void *dst, const void *src, size_t bytes, int32_t kind, uint64_t stream, DipuErr err) {
  if (check_stream(stream, err)) return DIPU_ERROR_KIND_INVALID_ARGUMENT;
  return memcpy_fn(pd, dst, src, bytes, kind, err);
}
static int memcpy_peer(void *pd, void *dst, int32_t dd, const void *src, int32_t sd, size_t bytes, DipuErr err) {
  if (check_device(dd, err) || check_device(sd, err)) return DIPU_ERROR_KIND_INVALID_DEVICE;
  return memcpy_fn(pd, dst, src, bytes, DIPU_COPY_KIND_DEVICE_TO_DEVICE, err);
}
static int memcpy_peer_async(void *pd, void *dst, int32_t dd, const void *src, int32_t sd, size_t bytes, uint64_t stream,
                             DipuErr err) {
  if (check_stream(stream, err)) return DIPU_ERROR_KIND_INVALID_ARGUMENT;
  return memcpy_peer(pd, dst, dd, src, sd, bytes, err);
}

static int priority_range(void *pd, int32_t *least, int32_t *greatest, DipuErr err) {
  (void)pd;
  (void)err;
  *least = 0;
  *greatest = 0;
  return 0;
}

/* Finds a free slot of a live-flag table (under the lock) and marks it live. */
static int take_slot(int *live, size_t stride, uint64_t *out, DipuErr err) {
  pthread_mutex_lock(&lock);
  for (uint64_t h = 1; h < MAX_HANDLES; h++) {
    int *flag = (int *)((char *)live + h * stride);
    if (!*flag) {
      *flag = 1;
      pthread_mutex_unlock(&lock);
      *out = h;
      return 0;
    }
  }
  pthread_mutex_unlock(&lock);
  return fail(err, DIPU_ERROR_KIND_OUT_OF_MEMORY, "too many handles");
}

static int stream_create(void *pd, int32_t priority, uint64_t *out, DipuErr err) {
  (void)pd;
  (void)priority;
  return take_slot(streams, sizeof streams[0], out, err);
}
static int stream_destroy(void *pd, uint64_t stream, DipuErr err) {
  (void)pd;
  if (stream == 0) return fail(err, DIPU_ERROR_KIND_INVALID_ARGUMENT, "the default stream cannot be destroyed");
  if (check_stream(stream, err)) return DIPU_ERROR_KIND_INVALID_ARGUMENT;
  streams[stream] = 0;
  return 0;
}
static int stream_synchronize(void *pd, uint64_t stream, DipuErr err) {
  (void)pd;
  return check_stream(stream, err);
}
static int stream_query(void *pd, uint64_t stream, int32_t *out, DipuErr err) {
  (void)pd;
  *out = 1;
  return check_stream(stream, err);
}
static int stream_wait_event(void *pd, uint64_t stream, uint64_t event, DipuErr err) {
  (void)pd;
  if (check_stream(stream, err)) return DIPU_ERROR_KIND_INVALID_ARGUMENT;
  return check_event(event, err);
}
static int launch_host_func(void *pd, uint64_t stream, DipuHostFn func, void *user_data, DipuErr err) {
  (void)pd;
  if (check_stream(stream, err)) return DIPU_ERROR_KIND_INVALID_ARGUMENT;
  func(user_data);
  return 0;
}

static int event_create(void *pd, int32_t timing, uint64_t *out, DipuErr err) {
  (void)pd;
  int rc = take_slot(&events[0].live, sizeof events[0], out, err);
  if (rc == 0) {
    events[*out].timing = timing;
    events[*out].recorded = 0;
  }
  return rc;
}
static int event_destroy(void *pd, uint64_t event, DipuErr err) {
  (void)pd;
  if (check_event(event, err)) return DIPU_ERROR_KIND_INVALID_ARGUMENT;
  events[event].live = 0;
  return 0;
}
static int event_record(void *pd, uint64_t event, uint64_t stream, DipuErr err) {
  (void)pd;
  if (check_event(event, err) || check_stream(stream, err)) return DIPU_ERROR_KIND_INVALID_ARGUMENT;
  pthread_mutex_lock(&lock);
  events[event].recorded = 1;
  events[event].ms = now_ms();
  pthread_mutex_unlock(&lock);
  return 0;
}
static int event_query(void *pd, uint64_t event, int32_t *out, DipuErr err) {
  (void)pd;
  *out = 1;
  return check_event(event, err);
}
static int event_synchronize(void *pd, uint64_t event, DipuErr err) {
  (void)pd;
  return check_event(event, err);
}
static int event_elapsed_ms(void *pd, uint64_t start, uint64_t end, float *out, DipuErr err) {
  (void)pd;
  if (check_event(start, err) || check_event(end, err)) return DIPU_ERROR_KIND_INVALID_ARGUMENT;
  pthread_mutex_lock(&lock);
  int timing = events[start].timing && events[end].timing;
  int recorded = events[start].recorded && events[end].recorded;
  double ms = events[end].ms - events[start].ms;
  pthread_mutex_unlock(&lock);
  if (!timing) return fail(err, DIPU_ERROR_KIND_INVALID_ARGUMENT, "elapsed time needs two timing events");
  if (!recorded) return fail(err, DIPU_ERROR_KIND_INVALID_ARGUMENT, "elapsed time needs two recorded events");
  *out = (float)ms;
  return 0;
}

static void release(void *pd) { (void)pd; }

static const DipuVendorVTable table = {
    .abi_major = DIPU_VENDOR_ABI_MAJOR,
    .struct_size = sizeof(DipuVendorVTable),
    .private_data = NULL,
    .release = release,
    .describe = describe,
    .device_count = device_count,
    .current_device = current_device_fn,
    .set_device = set_device,
    .synchronize_device = synchronize_device,
    .device_properties = device_properties,
    .memory_info = memory_info,
    .malloc = malloc_fn,
    .free = free_fn,
    .malloc_host = malloc_host,
    .free_host = free_host,
    .memset = memset_fn,
    .memset_async = memset_async,
    .memcpy = memcpy_fn,
    .memcpy_async = memcpy_async,
    .memcpy_peer = memcpy_peer,
    .memcpy_peer_async = memcpy_peer_async,
    .stream_priority_range = priority_range,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_synchronize,
    .stream_query = stream_query,
    .stream_wait_event = stream_wait_event,
    .launch_host_func = launch_host_func,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_query = event_query,
    .event_synchronize = event_synchronize,
    .event_elapsed_ms = event_elapsed_ms,
    /* collectives and virtual memory: NULL = unsupported */
};

uint32_t dipu_vendor_abi_version(void) { return DIPU_VENDOR_ABI_MAJOR; }

const DipuVendorVTable *dipu_vendor_create(DipuVendorError *err) {
  (void)err;
  return &table;
}
