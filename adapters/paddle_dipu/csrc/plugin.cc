// paddle_dipu: PaddlePaddle's CustomDevice runtime interface
// (paddle/phi/backends/device_ext.h, taken from the installed paddle wheel at
// build time) served by dipu-rs through its C API (dipu_runtime.h) only.
//
// Every entry point catches every C++ exception and reports a C_Status; a
// dipu_status other than DIPU_OK becomes C_ERROR (C_FAILED for "not ready"
// and for out of memory where Paddle expects that), with the runtime's
// message on stderr when PADDLE_DIPU_VERBOSE=1.

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dipu_runtime.h"
#include "paddle/phi/backends/device_ext.h"

// The interface layout this plugin was written for (paddlepaddle 3.3.1,
// LP64): a header of another layout fails the build here.
static_assert(sizeof(void*) == 8, "LP64 only");
static_assert(sizeof(C_DeviceInterface) == 1128, "C_DeviceInterface is not the 3.3.1 layout");
static_assert(sizeof(CustomRuntimeParams) == 96, "CustomRuntimeParams is not the 3.3.1 layout");
static_assert(offsetof(C_DeviceInterface, initialize) == 1 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, stream_wait_event) == 18 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, device_memory_allocate) == 27 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, async_memory_copy_p2p) == 41 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, get_device_count) == 50 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, device_realloc_size) == 58 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, is_dnn_supported) == 69 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, xccl_get_comm_name) == 80 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, xccl_all_to_all) == 94 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, profiler_initialize) == 103 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, profiler_collect_trace_data) == 108 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, init_blas_handle) == 117 * 8, "slot moved");
static_assert(offsetof(C_DeviceInterface, blas_axpby) == 133 * 8, "slot moved");
static_assert(offsetof(CustomRuntimeParams, version) == 16, "params moved");
static_assert(offsetof(CustomRuntimeParams, device_type) == 40, "params moved");
static_assert(offsetof(CustomRuntimeParams, pir_default_passes) == 56, "params moved");
static_assert(C_SUCCESS == 0 && C_WARNING == 1 && C_FAILED == 2 && C_ERROR == 3 &&
                  C_INTERNAL_ERROR == 4,
              "C_Status values");
static_assert(BOOL == 1 && UINT8 == 2 && UINT16 == 3 && UINT32 == 4 && UINT64 == 5 && INT8 == 6 &&
                  INT16 == 7 && INT32 == 8 && INT64 == 9 && FLOAT16 == 10 && FLOAT32 == 11 &&
                  FLOAT64 == 12 && BFLOAT16 == 13 && COMPLEX64 == 14 && COMPLEX128 == 15,
              "C_DataType values");
static_assert(SUM == 0 && AVG == 1 && MAX == 2 && MIN == 3 && PRODUCT == 4, "C_CCLReduceOp values");
static_assert(sizeof(C_DataType) == sizeof(int) && sizeof(C_CCLReduceOp) == sizeof(int), "enum size");

namespace {

const char kDeviceType[] = "dipu";
const char kSubDeviceType[] = "dipu-rs";

// Counters of live handles, read by the tests through paddle_dipu_counters.
std::atomic<int64_t> g_streams{0}, g_events{0}, g_comms{0}, g_callbacks{0};

C_Status sync_device_streams(int32_t dev, const char* what);
C_Status reap_collectives(const char* what);

bool verbose() {
  static const bool v = [] {
    const char* e = getenv("PADDLE_DIPU_VERBOSE");
    return e && *e && strcmp(e, "0") != 0;
  }();
  return v;
}

// Maps a dipu status to Paddle's, logging the runtime's message for `what`.
C_Status check(dipu_status st, const char* what) {
  if (st == DIPU_OK) return C_SUCCESS;
  // Errors Paddle turns into an exception: always say why on stderr, as
  // Paddle's own message only has the code.
  if (st != DIPU_STATUS_NOT_READY || verbose()) {
    fprintf(stderr, "paddle_dipu: %s: %s (%s)\n", what, dipu_status_str(st),
            dipu_last_error_message() ? dipu_last_error_message() : "");
  }
  return st == DIPU_STATUS_NOT_READY ? C_FAILED : C_ERROR;
}

#define GUARD_BEGIN try {
#define GUARD_END(what)                                                        \
  }                                                                            \
  catch (const std::bad_alloc&) {                                              \
    fprintf(stderr, "paddle_dipu: %s: out of host memory\n", what);           \
    return C_FAILED;                                                           \
  }                                                                            \
  catch (...) {                                                                \
    fprintf(stderr, "paddle_dipu: %s: internal error\n", what);               \
    return C_INTERNAL_ERROR;                                                   \
  }

// A Paddle stream: one dipu stream of one device.
struct Stream {
  dipu_stream s;
};

// Streams Paddle made, per device; the first one of a device is its
// CustomContext's, where device memory is allocated.
std::mutex g_mu;
std::map<int32_t, std::vector<Stream*>> g_dev_streams;

dipu_stream default_stream(int32_t dev) {
  dipu_stream s;
  memset(&s, 0, sizeof s);
  s.device = dev;
  return s;
}

dipu_stream stream_of(const C_Device d, C_Stream s) {
  if (s) return reinterpret_cast<Stream*>(s)->s;
  return default_stream(d ? d->id : 0);
}

dipu_stream alloc_stream(int32_t dev) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_dev_streams.find(dev);
  if (it != g_dev_streams.end() && !it->second.empty()) return it->second.front()->s;
  return default_stream(dev);
}

int32_t dev_id(const C_Device d) { return d ? d->id : -1; }

bool is_pinned(const void* p) {
  dipu_pointer_attributes a;
  if (dipu_pointer_get_attributes(p, &a) != DIPU_OK) return false;
  return a.memory_type == DIPU_MEMORY_PINNED;
}

// ---- devices ---------------------------------------------------------------

C_Status initialize() {
  GUARD_BEGIN
  int32_t n = 0;
  return check(dipu_device_count(&n), "initialize");
  GUARD_END("initialize")
}

C_Status finalize() { return C_SUCCESS; }

C_Status init_device(const C_Device d) {
  GUARD_BEGIN
  return check(dipu_device_set(dev_id(d)), "init_device");
  GUARD_END("init_device")
}

C_Status deinit_device(const C_Device d) {
  GUARD_BEGIN
  return check(dipu_device_synchronize(dev_id(d)), "deinit_device");
  GUARD_END("deinit_device")
}

C_Status set_device(const C_Device d) {
  GUARD_BEGIN
  return check(dipu_device_set(dev_id(d)), "set_device");
  GUARD_END("set_device")
}

C_Status get_device(const C_Device d) {
  GUARD_BEGIN
  if (!d) return C_ERROR;
  int32_t id = 0;
  C_Status st = check(dipu_device_get(&id), "get_device");
  if (st == C_SUCCESS) d->id = id;
  return st;
  GUARD_END("get_device")
}

C_Status get_device_count(size_t* count) {
  GUARD_BEGIN
  if (!count) return C_ERROR;
  int32_t n = 0;
  C_Status st = check(dipu_device_count(&n), "get_device_count");
  if (st == C_SUCCESS) *count = n < 0 ? 0 : static_cast<size_t>(n);
  return st;
  GUARD_END("get_device_count")
}

C_Status get_device_list(size_t* list) {
  GUARD_BEGIN
  if (!list) return C_ERROR;
  int32_t n = 0;
  C_Status st = check(dipu_device_count(&n), "get_device_list");
  if (st != C_SUCCESS) return st;
  for (int32_t i = 0; i < n; ++i) list[i] = static_cast<size_t>(i);
  return C_SUCCESS;
  GUARD_END("get_device_list")
}

C_Status synchronize_device(const C_Device d) {
  GUARD_BEGIN
  C_Status st = check(dipu_device_synchronize(dev_id(d)), "synchronize_device");
  return st == C_SUCCESS ? reap_collectives("synchronize_device") : st;
  GUARD_END("synchronize_device")
}

// ---- streams ---------------------------------------------------------------

C_Status create_stream(const C_Device d, C_Stream* out) {
  GUARD_BEGIN
  if (!out) return C_ERROR;
  dipu_stream s;
  C_Status st = check(dipu_stream_from_pool(dev_id(d), 0, &s), "create_stream");
  if (st != C_SUCCESS) return st;
  Stream* w = new Stream{s};
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_dev_streams[s.device].push_back(w);
  }
  ++g_streams;
  *out = reinterpret_cast<C_Stream>(w);
  return C_SUCCESS;
  GUARD_END("create_stream")
}

C_Status destroy_stream(const C_Device, C_Stream stream) {
  GUARD_BEGIN
  if (!stream) return C_SUCCESS;
  Stream* w = reinterpret_cast<Stream*>(stream);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& v = g_dev_streams[w->s.device];
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (*it == w) {
        v.erase(it);
        break;
      }
    }
  }
  // Pool streams live on in dipu-rs: only finish this one's work.
  C_Status st = check(dipu_stream_synchronize(w->s), "destroy_stream");
  delete w;
  --g_streams;
  return st;
  GUARD_END("destroy_stream")
}

C_Status query_stream(const C_Device d, C_Stream stream) {
  GUARD_BEGIN
  int32_t done = 0;
  C_Status st = check(dipu_stream_query(stream_of(d, stream), &done), "query_stream");
  if (st != C_SUCCESS) return st;
  return done ? C_SUCCESS : C_FAILED;
  GUARD_END("query_stream")
}

C_Status synchronize_stream(const C_Device d, C_Stream stream) {
  GUARD_BEGIN
  C_Status st = check(dipu_stream_synchronize(stream_of(d, stream)), "synchronize_stream");
  return st == C_SUCCESS ? reap_collectives("synchronize_stream") : st;
  GUARD_END("synchronize_stream")
}

struct CallbackCall {
  C_Device dev;
  C_Stream stream;
  C_Callback fn;
  void* user;
};

void run_callback(void* p) {
  CallbackCall* c = static_cast<CallbackCall*>(p);
  C_Status st = C_SUCCESS;
  try {
    c->fn(c->dev, c->stream, c->user, &st);
  } catch (...) {
    fprintf(stderr, "paddle_dipu: a stream callback threw; ignored\n");
  }
  delete c;
  --g_callbacks;
}

C_Status stream_add_callback(const C_Device d, C_Stream stream, C_Callback fn, void* user) {
  GUARD_BEGIN
  if (!fn) return C_ERROR;
  CallbackCall* c = new CallbackCall{d, stream, fn, user};
  ++g_callbacks;
  dipu_status st = dipu_launch_host_func(stream_of(d, stream), run_callback, c);
  if (st != DIPU_OK) {
    delete c;
    --g_callbacks;
  }
  return check(st, "stream_add_callback");
  GUARD_END("stream_add_callback")
}

// ---- events ----------------------------------------------------------------

C_Status create_event(const C_Device, C_Event* out) {
  GUARD_BEGIN
  if (!out) return C_ERROR;
  dipu_event* e = nullptr;
  C_Status st = check(dipu_event_create(0, &e), "create_event");
  if (st == C_SUCCESS) {
    *out = reinterpret_cast<C_Event>(e);
    ++g_events;
  }
  return st;
  GUARD_END("create_event")
}

C_Status destroy_event(const C_Device, C_Event e) {
  GUARD_BEGIN
  if (!e) return C_SUCCESS;
  C_Status st = check(dipu_event_destroy(reinterpret_cast<dipu_event*>(e)), "destroy_event");
  if (st == C_SUCCESS) --g_events;
  return st;
  GUARD_END("destroy_event")
}

C_Status record_event(const C_Device d, C_Stream stream, C_Event e) {
  GUARD_BEGIN
  if (!e) return C_ERROR;
  if (verbose()) fprintf(stderr, "paddle_dipu: record_event %p on stream %p\n", (void*)e, (void*)stream);
  return check(dipu_event_record(reinterpret_cast<dipu_event*>(e), stream_of(d, stream)),
               "record_event");
  GUARD_END("record_event")
}

C_Status query_event(const C_Device, C_Event e) {
  GUARD_BEGIN
  if (!e) return C_ERROR;
  int32_t done = 0;
  C_Status st = check(dipu_event_query(reinterpret_cast<dipu_event*>(e), &done), "query_event");
  if (st != C_SUCCESS) return st;
  return done ? C_SUCCESS : C_FAILED;
  GUARD_END("query_event")
}

C_Status synchronize_event(const C_Device, C_Event e) {
  GUARD_BEGIN
  if (!e) return C_ERROR;
  C_Status st = check(dipu_event_synchronize(reinterpret_cast<dipu_event*>(e)), "synchronize_event");
  return st == C_SUCCESS ? reap_collectives("synchronize_event") : st;
  GUARD_END("synchronize_event")
}

C_Status stream_wait_event(const C_Device d, C_Stream stream, C_Event e) {
  GUARD_BEGIN
  if (!e) return C_ERROR;
  if (verbose()) fprintf(stderr, "paddle_dipu: stream %p waits event %p\n", (void*)stream, (void*)e);
  return check(dipu_stream_wait_event(stream_of(d, stream), reinterpret_cast<dipu_event*>(e)),
               "stream_wait_event");
  GUARD_END("stream_wait_event")
}

// ---- memory ----------------------------------------------------------------


C_Status device_memory_allocate(const C_Device d, void** ptr, size_t size) {
  GUARD_BEGIN
  if (!ptr) return C_ERROR;
  void* p = nullptr;
  // dipu_malloc gives NULL for 0 bytes; Paddle reads NULL as out of memory.
  dipu_status st = dipu_malloc(size ? size : 1, alloc_stream(dev_id(d)), &p);
  if (st == DIPU_STATUS_OUT_OF_MEMORY) {
    // Paddle's contract: success with NULL is out of memory (it frees its
    // caches and retries, then raises its own error).
    if (verbose()) fprintf(stderr, "paddle_dipu: out of memory for %zu bytes\n", size);
    *ptr = nullptr;
    return C_SUCCESS;
  }
  C_Status s = check(st, "device_memory_allocate");
  if (s == C_SUCCESS) *ptr = p;
  return s;
  GUARD_END("device_memory_allocate")
}

C_Status device_memory_deallocate(const C_Device d, void* ptr, size_t) {
  GUARD_BEGIN
  if (!ptr) return C_SUCCESS;
  // Paddle may have used the block on any of its streams of the device:
  // the allocator reuses it only once their work queued so far is done.
  std::vector<dipu_stream> others;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_dev_streams.find(dev_id(d));
    if (it != g_dev_streams.end())
      for (size_t i = 1; i < it->second.size(); ++i) others.push_back(it->second[i]->s);
  }
  for (const dipu_stream& s : others) dipu_record_stream(ptr, s);
  return check(dipu_free(ptr), "device_memory_deallocate");
  GUARD_END("device_memory_deallocate")
}

C_Status device_memory_set(const C_Device d, void* ptr, unsigned char value, size_t size) {
  GUARD_BEGIN
  C_Status st = sync_device_streams(dev_id(d), "device_memory_set");
  if (st != C_SUCCESS) return st;
  return check(dipu_memset(ptr, value, size), "device_memory_set");
  GUARD_END("device_memory_set")
}

C_Status host_memory_allocate(const C_Device, void** ptr, size_t size) {
  GUARD_BEGIN
  if (!ptr) return C_ERROR;
  void* p = nullptr;
  dipu_status st = dipu_host_malloc(size ? size : 1, &p);
  if (st == DIPU_STATUS_OUT_OF_MEMORY) {
    *ptr = nullptr;
    return C_SUCCESS;
  }
  C_Status s = check(st, "host_memory_allocate");
  if (s == C_SUCCESS) *ptr = p;
  return s;
  GUARD_END("host_memory_allocate")
}

C_Status host_memory_deallocate(const C_Device, void* ptr, size_t) {
  GUARD_BEGIN
  return check(dipu_host_free(ptr), "host_memory_deallocate");
  GUARD_END("host_memory_deallocate")
}

// Waits for the work queued so far on every stream Paddle made on `dev`.
// Paddle's synchronous copies follow CUDA's legacy default stream, which
// waits for the device's other streams (a collective's result read right
// after it relies on that).
C_Status sync_device_streams(int32_t dev, const char* what) {
  std::vector<dipu_stream> streams;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_dev_streams.find(dev);
    if (it != g_dev_streams.end())
      for (Stream* w : it->second) streams.push_back(w->s);
  }
  for (const dipu_stream& s : streams) {
    C_Status st = check(dipu_stream_synchronize(s), what);
    if (st != C_SUCCESS) return st;
  }
  return C_SUCCESS;
}

C_Status copy_sync(const C_Device d, const C_Device peer, void* dst, const void* src, size_t size,
                   dipu_copy_kind kind, const char* what) {
  if (size == 0) return C_SUCCESS;
  C_Status st = sync_device_streams(dev_id(d), what);
  if (st == C_SUCCESS && peer && dev_id(peer) != dev_id(d)) st = sync_device_streams(dev_id(peer), what);
  if (st == C_SUCCESS) st = reap_collectives(what);
  if (st != C_SUCCESS) return st;
  return check(dipu_memcpy(dst, src, size, kind), what);
}

C_Status memory_copy_h2d(const C_Device d, void* dst, const void* src, size_t size) {
  GUARD_BEGIN
  return copy_sync(d, nullptr, dst, src, size, DIPU_COPY_HOST_TO_DEVICE, "memory_copy_h2d");
  GUARD_END("memory_copy_h2d")
}

C_Status memory_copy_d2h(const C_Device d, void* dst, const void* src, size_t size) {
  GUARD_BEGIN
  return copy_sync(d, nullptr, dst, src, size, DIPU_COPY_DEVICE_TO_HOST, "memory_copy_d2h");
  GUARD_END("memory_copy_d2h")
}

C_Status memory_copy_d2d(const C_Device d, void* dst, const void* src, size_t size) {
  GUARD_BEGIN
  return copy_sync(d, nullptr, dst, src, size, DIPU_COPY_DEVICE_TO_DEVICE, "memory_copy_d2d");
  GUARD_END("memory_copy_d2d")
}

C_Status memory_copy_p2p(const C_Device dst_dev, const C_Device src_dev, void* dst, const void* src, size_t size) {
  GUARD_BEGIN
  return copy_sync(dst_dev, src_dev, dst, src, size, DIPU_COPY_DEVICE_TO_DEVICE, "memory_copy_p2p");
  GUARD_END("memory_copy_p2p")
}

// An asynchronous copy with a host side: queued when the host memory is
// pinned (dipu_host_malloc), else done at once after the stream's earlier
// work, as CUDA does for pageable memory, since Paddle may free or read
// that host buffer right after the call.
C_Status copy_async_host(dipu_stream s, void* dst, const void* src, size_t size,
                         dipu_copy_kind kind, const void* host, const char* what) {
  if (size == 0) return C_SUCCESS;
  if (is_pinned(host)) {
    C_Status st = check(dipu_memcpy_async(dst, src, size, kind, s), what);
    if (st == C_SUCCESS) dipu_host_record_stream(const_cast<void*>(host), s);
    return st;
  }
  C_Status st = check(dipu_stream_synchronize(s), what);
  if (st != C_SUCCESS) return st;
  return check(dipu_memcpy(dst, src, size, kind), what);
}

C_Status async_memory_copy_h2d(const C_Device d, C_Stream stream, void* dst, const void* src,
                               size_t size) {
  GUARD_BEGIN
  return copy_async_host(stream_of(d, stream), dst, src, size, DIPU_COPY_HOST_TO_DEVICE, src,
                         "async_memory_copy_h2d");
  GUARD_END("async_memory_copy_h2d")
}

C_Status async_memory_copy_d2h(const C_Device d, C_Stream stream, void* dst, const void* src,
                               size_t size) {
  GUARD_BEGIN
  return copy_async_host(stream_of(d, stream), dst, src, size, DIPU_COPY_DEVICE_TO_HOST, dst,
                         "async_memory_copy_d2h");
  GUARD_END("async_memory_copy_d2h")
}

C_Status async_memory_copy_d2d(const C_Device d, C_Stream stream, void* dst, const void* src,
                               size_t size) {
  GUARD_BEGIN
  if (size == 0) return C_SUCCESS;
  return check(dipu_memcpy_async(dst, src, size, DIPU_COPY_DEVICE_TO_DEVICE, stream_of(d, stream)),
               "async_memory_copy_d2d");
  GUARD_END("async_memory_copy_d2d")
}

C_Status async_memory_copy_p2p(const C_Device dst_dev, const C_Device, C_Stream stream, void* dst,
                               const void* src, size_t size) {
  GUARD_BEGIN
  if (size == 0) return C_SUCCESS;
  return check(
      dipu_memcpy_async(dst, src, size, DIPU_COPY_DEVICE_TO_DEVICE, stream_of(dst_dev, stream)),
      "async_memory_copy_p2p");
  GUARD_END("async_memory_copy_p2p")
}

C_Status device_memory_stats(const C_Device d, size_t* total, size_t* free_bytes) {
  GUARD_BEGIN
  if (!total || !free_bytes) return C_ERROR;
  dipu_memory_info info;
  C_Status st = check(dipu_device_memory_info(dev_id(d), &info), "device_memory_stats");
  if (st == C_SUCCESS) {
    *total = static_cast<size_t>(info.total);
    *free_bytes = static_cast<size_t>(info.free);
  }
  return st;
  GUARD_END("device_memory_stats")
}

// dipu-rs's caching allocator rounds requests to 512 bytes.
C_Status device_min_chunk_size(const C_Device, size_t* size) {
  if (!size) return C_ERROR;
  *size = 512;
  return C_SUCCESS;
}

C_Status device_max_alloc_size(const C_Device d, size_t* size) {
  GUARD_BEGIN
  if (!size) return C_ERROR;
  dipu_memory_info info;
  C_Status st = check(dipu_device_memory_info(dev_id(d), &info), "device_max_alloc_size");
  if (st == C_SUCCESS) *size = static_cast<size_t>(info.total);
  return st;
  GUARD_END("device_max_alloc_size")
}

C_Status device_extra_padding_size(const C_Device, size_t* size) {
  if (!size) return C_ERROR;
  *size = 0;
  return C_SUCCESS;
}

// ---- device information ------------------------------------------------------

bool properties(const C_Device d, dipu_device_properties* p) {
  return dipu_device_get_properties(dev_id(d), p) == DIPU_OK;
}

C_Status get_compute_capability(const C_Device d, size_t* cap) {
  GUARD_BEGIN
  if (!cap) return C_ERROR;
  dipu_device_properties p;
  if (!properties(d, &p)) return check(DIPU_STATUS_INVALID_DEVICE, "get_compute_capability");
  *cap = static_cast<size_t>(p.major < 0 ? 0 : p.major) * 10 +
         static_cast<size_t>(p.minor < 0 ? 0 : p.minor);
  return C_SUCCESS;
  GUARD_END("get_compute_capability")
}

// The version of libdipu_runtime as major*1000 + minor*10 + patch.
size_t runtime_version_number() {
  unsigned a = 0, b = 0, c = 0;
  const char* v = dipu_version();
  if (v) sscanf(v, "%u.%u.%u", &a, &b, &c);
  return a * 1000 + b * 10 + c;
}

C_Status get_runtime_version(const C_Device, size_t* v) {
  GUARD_BEGIN
  if (!v) return C_ERROR;
  *v = runtime_version_number();
  return C_SUCCESS;
  GUARD_END("get_runtime_version")
}

C_Status get_multi_process(const C_Device d, size_t* n) {
  GUARD_BEGIN
  if (!n) return C_ERROR;
  dipu_device_properties p;
  if (!properties(d, &p)) return check(DIPU_STATUS_INVALID_DEVICE, "get_multi_process");
  *n = p.multiprocessor_count < 0 ? 0 : static_cast<size_t>(p.multiprocessor_count);
  return C_SUCCESS;
  GUARD_END("get_multi_process")
}

C_Status is_supported_true(const C_Device, bool* yes) {
  if (!yes) return C_ERROR;
  *yes = true;
  return C_SUCCESS;
}

C_Status is_supported_false(const C_Device, bool* yes) {
  if (!yes) return C_ERROR;
  *yes = false;
  return C_SUCCESS;
}

// ---- collectives ---------------------------------------------------------------

// The unique id: rank 0's rendezvous address and a nonce naming the group,
// as text ("dipu-xccl1 <host> <port> <nonce>"), NUL-padded.
const size_t kUniqueIdSize = 128;
const char kUniqueIdTag[] = "dipu-xccl1";

// Master stores that rank 0 started in xccl_get_unique_id, by nonce, until
// xccl_comm_init_rank takes them.
std::map<std::string, dipu_store*> g_master_stores;

struct Comm {
  dipu_process_group* pg;
  std::string name;
  int32_t rank;
  int32_t size;
  int32_t device;
};

// Collectives queued and not yet seen finished, with their names: a
// failure (a dead peer, the watchdog's timeout) is reported by the next
// synchronisation, since Paddle never waits on the operation itself.
std::mutex g_work_mu;
std::vector<std::pair<dipu_work*, const char*>> g_pending;

void keep_work(dipu_work* w, const char* what) {
  std::lock_guard<std::mutex> lock(g_work_mu);
  g_pending.emplace_back(w, what);
}

C_Status reap_collectives(const char* what) {
  C_Status result = C_SUCCESS;
  std::lock_guard<std::mutex> lock(g_work_mu);
  for (size_t i = 0; i < g_pending.size();) {
    dipu_work* w = g_pending[i].first;
    int32_t done = 0;
    dipu_status st = dipu_work_is_completed(w, &done);
    if (st == DIPU_OK && !done) {
      ++i;
      continue;
    }
    if (st == DIPU_OK) st = dipu_work_wait_host(w, 1);
    if (st != DIPU_OK && result == C_SUCCESS) {
      std::string msg = std::string(what) + ": the collective " + g_pending[i].second + " failed";
      result = check(st, msg.c_str());
    }
    dipu_work_destroy(w);
    g_pending.erase(g_pending.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return result;
}

// Comms of the calling thread's open xccl_group_start batch (a set: each
// comm's coalescing is started once) and the last stream used in it.
thread_local int g_group_depth = 0;
thread_local std::vector<Comm*>* g_group_comms = nullptr;
thread_local bool g_group_has_stream = false;
thread_local dipu_stream g_group_stream;

std::string rendezvous_host() {
  const char* ep = getenv("PADDLE_CURRENT_ENDPOINT");
  if (ep && *ep) {
    std::string s(ep);
    size_t colon = s.rfind(':');
    if (colon != std::string::npos && colon > 0) return s.substr(0, colon);
  }
  return "127.0.0.1";
}

int64_t comm_timeout_ms() {
  const char* t = getenv("PADDLE_DIPU_COMM_TIMEOUT_MS");
  if (t && *t) return strtoll(t, nullptr, 10);
  return 0;  // DIPU_COMM_TIMEOUT seconds, or dipu-rs's default
}

C_Status xccl_get_unique_id_size(size_t* size) {
  if (!size) return C_ERROR;
  *size = kUniqueIdSize;
  return C_SUCCESS;
}

C_Status xccl_get_unique_id(C_CCLRootId* id) {
  GUARD_BEGIN
  if (!id || !id->data || id->sz < kUniqueIdSize) {
    fprintf(stderr, "paddle_dipu: xccl_get_unique_id: a buffer of %zu bytes is needed\n",
            kUniqueIdSize);
    return C_ERROR;
  }
  std::string host = rendezvous_host();
  dipu_store* store = nullptr;
  C_Status st = check(dipu_store_tcp_create(host.c_str(), 0, 1, 0, comm_timeout_ms(), &store),
                      "xccl_get_unique_id (starting the rendezvous server)");
  if (st != C_SUCCESS) return st;
  uint16_t port = 0;
  st = check(dipu_store_tcp_port(store, &port), "xccl_get_unique_id");
  if (st != C_SUCCESS) {
    dipu_store_destroy(store);
    return st;
  }
  std::random_device rd;
  char nonce[33];
  snprintf(nonce, sizeof nonce, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  char text[kUniqueIdSize];
  memset(text, 0, sizeof text);
  int n = snprintf(text, sizeof text, "%s %s %u %s", kUniqueIdTag, host.c_str(), port, nonce);
  if (n < 0 || static_cast<size_t>(n) >= sizeof text) {
    dipu_store_destroy(store);
    fprintf(stderr, "paddle_dipu: xccl_get_unique_id: host name too long\n");
    return C_ERROR;
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_master_stores[nonce] = store;
  }
  memset(id->data, 0, id->sz);
  memcpy(id->data, text, sizeof text);
  return C_SUCCESS;
  GUARD_END("xccl_get_unique_id")
}

C_Status xccl_comm_init_rank(size_t nranks, C_CCLRootId* id, size_t rank, C_CCLComm* out) {
  GUARD_BEGIN
  if (!id || !id->data || id->sz < kUniqueIdSize || !out || rank >= nranks) {
    fprintf(stderr, "paddle_dipu: xccl_comm_init_rank: bad arguments (rank %zu of %zu)\n", rank,
            nranks);
    return C_ERROR;
  }
  std::string text(static_cast<const char*>(id->data), strnlen(static_cast<const char*>(id->data), id->sz));
  char tag[16] = {0}, host[100] = {0}, nonce[40] = {0};
  unsigned port = 0;
  if (sscanf(text.c_str(), "%15s %99s %u %39s", tag, host, &port, nonce) != 4 ||
      strcmp(tag, kUniqueIdTag) != 0 || port == 0 || port > 65535) {
    fprintf(stderr, "paddle_dipu: xccl_comm_init_rank: not a dipu unique id: \"%.60s\"\n",
            text.c_str());
    return C_ERROR;
  }
  dipu_store* store = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_master_stores.find(nonce);
    if (it != g_master_stores.end()) {
      store = it->second;
      g_master_stores.erase(it);
    }
  }
  if (!store) {
    C_Status st = check(dipu_store_tcp_create(host, static_cast<uint16_t>(port), 0, 0,
                                              comm_timeout_ms(), &store),
                        "xccl_comm_init_rank (joining the rendezvous)");
    if (st != C_SUCCESS) return st;
  }
  int32_t device = 0;
  dipu_device_get(&device);
  dipu_process_group* pg = nullptr;
  C_Status st = check(dipu_process_group_create(store, static_cast<int32_t>(rank),
                                                static_cast<int32_t>(nranks), device,
                                                comm_timeout_ms(), 0, &pg),
                      "xccl_comm_init_rank");
  // The group holds the store from here on.
  dipu_store_destroy(store);
  if (st != C_SUCCESS) return st;
  Comm* c = new Comm{pg, std::string("dipu-") + nonce, static_cast<int32_t>(rank),
                     static_cast<int32_t>(nranks), device};
  ++g_comms;
  *out = reinterpret_cast<C_CCLComm>(c);
  return C_SUCCESS;
  GUARD_END("xccl_comm_init_rank")
}

C_Status xccl_destroy_comm(C_CCLComm comm) {
  GUARD_BEGIN
  if (!comm) return C_SUCCESS;
  Comm* c = reinterpret_cast<Comm*>(comm);
  C_Status st = check(dipu_process_group_destroy(c->pg), "xccl_destroy_comm");
  delete c;
  --g_comms;
  return st;
  GUARD_END("xccl_destroy_comm")
}

C_Status xccl_get_comm_name(C_CCLComm comm, char* name) {
  GUARD_BEGIN
  if (!comm || !name) return C_ERROR;
  Comm* c = reinterpret_cast<Comm*>(comm);
  snprintf(name, 128, "%s", c->name.c_str());
  return C_SUCCESS;
  GUARD_END("xccl_get_comm_name")
}

bool to_dtype(C_DataType t, dipu_dtype* out) {
  switch (t) {
    case BOOL: *out = DIPU_DTYPE_BOOL; return true;
    case UINT8: *out = DIPU_DTYPE_U8; return true;
    case UINT32: *out = DIPU_DTYPE_U32; return true;
    case UINT64: *out = DIPU_DTYPE_U64; return true;
    case INT8: *out = DIPU_DTYPE_I8; return true;
    case INT16: *out = DIPU_DTYPE_I16; return true;
    case INT32: *out = DIPU_DTYPE_I32; return true;
    case INT64: *out = DIPU_DTYPE_I64; return true;
    case FLOAT16: *out = DIPU_DTYPE_F16; return true;
    case FLOAT32: *out = DIPU_DTYPE_F32; return true;
    case FLOAT64: *out = DIPU_DTYPE_F64; return true;
    case BFLOAT16: *out = DIPU_DTYPE_BF16; return true;
    case COMPLEX64: *out = DIPU_DTYPE_C64; return true;
    case COMPLEX128: *out = DIPU_DTYPE_C128; return true;
    default: return false;
  }
}

size_t dtype_bytes(C_DataType t) {
  switch (t) {
    case BOOL: case UINT8: case INT8: return 1;
    case UINT16: case INT16: case FLOAT16: case BFLOAT16: return 2;
    case UINT32: case INT32: case FLOAT32: return 4;
    case UINT64: case INT64: case FLOAT64: case COMPLEX64: return 8;
    case COMPLEX128: return 16;
    default: return 0;
  }
}

bool to_op(C_CCLReduceOp op, dipu_reduce_op* out) {
  switch (op) {
    case SUM: *out = DIPU_REDUCE_SUM; return true;
    case AVG: *out = DIPU_REDUCE_AVG; return true;
    case MAX: *out = DIPU_REDUCE_MAX; return true;
    case MIN: *out = DIPU_REDUCE_MIN; return true;
    case PRODUCT: *out = DIPU_REDUCE_PROD; return true;
    default: return false;
  }
}

// Runs one collective of `comm` ordered on `stream`: after the stream's
// earlier work, and the stream's later work after it. Inside
// xccl_group_start/end the collective joins the comm's batch instead.
template <typename F>
C_Status run_collective(Comm* c, C_Stream stream, const char* what, F issue) {
  if (!c) {
    fprintf(stderr, "paddle_dipu: %s: NULL communicator\n", what);
    return C_ERROR;
  }
  dipu_stream s = stream_of(nullptr, stream);
  if (!stream) s = default_stream(c->device);
  if (verbose())
    fprintf(stderr, "paddle_dipu: %s on stream %p (device %d id %u), group device %d\n", what,
            (void*)stream, s.device, s.id, c->device);
  dipu_stream saved;
  if (dipu_stream_current(s.device, &saved) != DIPU_OK) saved = default_stream(s.device);
  C_Status st = check(dipu_stream_set_current(s), what);
  if (st != C_SUCCESS) return st;
  if (g_group_depth > 0) {
    bool open = false;
    for (Comm* o : *g_group_comms) open = open || o == c;
    if (!open) {
      st = check(dipu_process_group_start_coalescing(c->pg), what);
      if (st == C_SUCCESS) g_group_comms->push_back(c);
    }
    if (st == C_SUCCESS) {
      dipu_work* w = nullptr;
      st = check(issue(&w), what);
      if (w) dipu_work_destroy(w);
      g_group_stream = s;
      g_group_has_stream = true;
    }
  } else {
    st = reap_collectives(what);
    dipu_work* w = nullptr;
    if (st == C_SUCCESS) st = check(issue(&w), what);
    if (st == C_SUCCESS && w) st = check(dipu_work_wait(w), what);
    if (w && st == C_SUCCESS) {
      keep_work(w, what);
    } else if (w) {
      dipu_work_destroy(w);
    }
  }
  dipu_stream_set_current(saved);
  return st;
}

#define COMM_ARGS(what)                                                                        \
  Comm* c = reinterpret_cast<Comm*>(comm);                                                     \
  dipu_dtype dt;                                                                               \
  if (!to_dtype(dtype, &dt)) {                                                                 \
    fprintf(stderr, "paddle_dipu: %s: data type %d is not supported\n", what,                 \
            static_cast<int>(dtype));                                                          \
    return C_ERROR;                                                                            \
  }

#define REDUCE_ARGS(what)                                                                      \
  dipu_reduce_op rop;                                                                          \
  if (!to_op(op, &rop)) {                                                                      \
    fprintf(stderr, "paddle_dipu: %s: reduce op %d is not supported\n", what,                 \
            static_cast<int>(op));                                                             \
    return C_ERROR;                                                                            \
  }

// Queues send -> recv on the stream when they differ (dipu-rs reduces in place).
C_Status stage_in_place(void* send, void* recv, size_t count, C_DataType dtype, C_Stream stream,
                        Comm* c, const char* what) {
  if (send == recv || count == 0) return C_SUCCESS;
  dipu_stream s = stream ? stream_of(nullptr, stream) : default_stream(c ? c->device : 0);
  return check(dipu_memcpy_async(recv, send, count * dtype_bytes(dtype), DIPU_COPY_DEVICE_TO_DEVICE, s),
               what);
}

C_Status xccl_all_reduce(void* send, void* recv, size_t count, C_DataType dtype, C_CCLReduceOp op,
                         C_CCLComm comm, C_Stream stream) {
  GUARD_BEGIN
  COMM_ARGS("xccl_all_reduce")
  REDUCE_ARGS("xccl_all_reduce")
  C_Status st = stage_in_place(send, recv, count, dtype, stream, c, "xccl_all_reduce");
  if (st != C_SUCCESS) return st;
  return run_collective(c, stream, "xccl_all_reduce", [&](dipu_work** w) {
    return dipu_process_group_all_reduce(c->pg, recv, count, dt, rop, w);
  });
  GUARD_END("xccl_all_reduce")
}

C_Status xccl_broadcast(void* buf, size_t count, C_DataType dtype, size_t root, C_CCLComm comm,
                        C_Stream stream) {
  GUARD_BEGIN
  COMM_ARGS("xccl_broadcast")
  return run_collective(c, stream, "xccl_broadcast", [&](dipu_work** w) {
    return dipu_process_group_broadcast(c->pg, buf, count, dt, static_cast<int32_t>(root), w);
  });
  GUARD_END("xccl_broadcast")
}

C_Status xccl_reduce(void* send, void* recv, size_t count, C_DataType dtype, C_CCLReduceOp op,
                     size_t root, C_CCLComm comm, C_Stream stream) {
  GUARD_BEGIN
  COMM_ARGS("xccl_reduce")
  REDUCE_ARGS("xccl_reduce")
  C_Status st = stage_in_place(send, recv, count, dtype, stream, c, "xccl_reduce");
  if (st != C_SUCCESS) return st;
  return run_collective(c, stream, "xccl_reduce", [&](dipu_work** w) {
    return dipu_process_group_reduce(c->pg, recv, count, dt, static_cast<int32_t>(root), rop, w);
  });
  GUARD_END("xccl_reduce")
}

C_Status xccl_all_gather(void* send, void* recv, size_t count, C_DataType dtype, C_CCLComm comm,
                         C_Stream stream) {
  GUARD_BEGIN
  COMM_ARGS("xccl_all_gather")
  return run_collective(c, stream, "xccl_all_gather", [&](dipu_work** w) {
    return dipu_process_group_all_gather_into(c->pg, recv, send, count, dt, w);
  });
  GUARD_END("xccl_all_gather")
}

C_Status xccl_reduce_scatter(void* send, void* recv, size_t count, C_DataType dtype,
                             C_CCLReduceOp op, C_CCLComm comm, C_Stream stream) {
  GUARD_BEGIN
  COMM_ARGS("xccl_reduce_scatter")
  REDUCE_ARGS("xccl_reduce_scatter")
  return run_collective(c, stream, "xccl_reduce_scatter", [&](dipu_work** w) {
    return dipu_process_group_reduce_scatter_from(c->pg, recv, count, send, dt, rop, w);
  });
  GUARD_END("xccl_reduce_scatter")
}

C_Status xccl_send(void* buf, size_t count, C_DataType dtype, size_t dst, C_CCLComm comm,
                   C_Stream stream) {
  GUARD_BEGIN
  COMM_ARGS("xccl_send")
  return run_collective(c, stream, "xccl_send", [&](dipu_work** w) {
    return dipu_process_group_send(c->pg, buf, count, dt, static_cast<int32_t>(dst), 0, w);
  });
  GUARD_END("xccl_send")
}

C_Status xccl_recv(void* buf, size_t count, C_DataType dtype, size_t src, C_CCLComm comm,
                   C_Stream stream) {
  GUARD_BEGIN
  COMM_ARGS("xccl_recv")
  return run_collective(c, stream, "xccl_recv", [&](dipu_work** w) {
    return dipu_process_group_recv(c->pg, buf, count, dt, static_cast<int32_t>(src), 0, w);
  });
  GUARD_END("xccl_recv")
}

C_Status xccl_group_start() {
  GUARD_BEGIN
  if (g_group_depth++ == 0) {
    if (!g_group_comms) g_group_comms = new std::vector<Comm*>();
    g_group_comms->clear();
    g_group_has_stream = false;
  }
  return C_SUCCESS;
  GUARD_END("xccl_group_start")
}

C_Status xccl_group_end() {
  GUARD_BEGIN
  if (g_group_depth == 0) {
    fprintf(stderr, "paddle_dipu: xccl_group_end without xccl_group_start\n");
    return C_ERROR;
  }
  if (--g_group_depth > 0) return C_SUCCESS;
  if (verbose()) fprintf(stderr, "paddle_dipu: xccl_group_end: %zu comm(s)\n", g_group_comms->size());
  C_Status result = C_SUCCESS;
  for (Comm* c : *g_group_comms) {
    dipu_stream s = g_group_has_stream ? g_group_stream : default_stream(c->device);
    dipu_stream saved;
    if (dipu_stream_current(s.device, &saved) != DIPU_OK) saved = default_stream(s.device);
    dipu_stream_set_current(s);
    dipu_work* w = nullptr;
    C_Status st = check(dipu_process_group_end_coalescing(c->pg, &w), "xccl_group_end");
    if (st == C_SUCCESS && w) st = check(dipu_work_wait(w), "xccl_group_end");
    if (w && st == C_SUCCESS) {
      keep_work(w, "xccl_group_end");
    } else if (w) {
      dipu_work_destroy(w);
    }
    dipu_stream_set_current(saved);
    if (st != C_SUCCESS) result = st;
  }
  g_group_comms->clear();
  return result;
  GUARD_END("xccl_group_end")
}

// ---- profiler: dipu-rs keeps its own trace (dipu_profiler_*); Paddle's
// profiler gets no device events from the plugin. -------------------------

C_Status profiler_init(C_Profiler, void** user) {
  if (user) *user = nullptr;
  return C_SUCCESS;
}
C_Status profiler_noop(C_Profiler, void*) { return C_SUCCESS; }
C_Status profiler_collect(C_Profiler, uint64_t, void*) { return C_SUCCESS; }

}  // namespace

extern "C" {

// Live handles the plugin made (streams, events, comms, pending callbacks),
// for the tests.
__attribute__((visibility("default"))) void paddle_dipu_counters(int64_t out[4]) {
  out[0] = g_streams.load();
  out[1] = g_events.load();
  out[2] = g_comms.load();
  out[3] = g_callbacks.load();
}

__attribute__((visibility("default"))) void InitPlugin(CustomRuntimeParams* params) {
  try {
    if (!params) return;
    // Paddle does not check struct sizes itself: refuse any layout but the
    // one compiled in, leaving device_type NULL so Paddle skips the plugin.
    if (params->size != sizeof(CustomRuntimeParams) || !params->interface ||
        params->interface->size != sizeof(C_DeviceInterface)) {
      fprintf(stderr,
              "paddle_dipu: refusing to load: this Paddle passes CustomRuntimeParams of %zu "
              "bytes and C_DeviceInterface of %zu bytes, the plugin was built for %zu and %zu "
              "(paddlepaddle 3.3.1); rebuild adapters/paddle_dipu against this Paddle\n",
              params->size, params->interface ? params->interface->size : 0,
              sizeof(CustomRuntimeParams), sizeof(C_DeviceInterface));
      return;
    }
    params->version.major = PADDLE_CUSTOM_RUNTIME_MAJOR_VERSION;
    params->version.minor = PADDLE_CUSTOM_RUNTIME_MINOR_VERSION;
    params->version.patch = PADDLE_CUSTOM_RUNTIME_PATCH_VERSION;
    // Test hooks for the loader's refusals (never set in use).
    const char* t = getenv("PADDLE_DIPU_TEST_LOAD");
    if (t && strcmp(t, "old-version") == 0) params->version.patch = 0;

    C_DeviceInterface* i = params->interface;
    const size_t size = i->size;
    memset(i, 0, sizeof *i);
    i->size = size;

    i->initialize = initialize;
    i->finalize = finalize;
    i->init_device = init_device;
    i->set_device = set_device;
    i->get_device = get_device;
    i->deinit_device = deinit_device;
    i->create_stream = create_stream;
    i->destroy_stream = destroy_stream;
    i->query_stream = query_stream;
    i->stream_add_callback = stream_add_callback;
    i->create_event = create_event;
    i->record_event = record_event;
    i->destroy_event = destroy_event;
    i->query_event = query_event;
    i->synchronize_device = synchronize_device;
    i->synchronize_stream = synchronize_stream;
    i->synchronize_event = synchronize_event;
    i->stream_wait_event = stream_wait_event;

    i->device_memory_allocate = device_memory_allocate;
    i->device_memory_deallocate = device_memory_deallocate;
    i->device_memory_set = device_memory_set;
    i->host_memory_allocate = host_memory_allocate;
    i->host_memory_deallocate = host_memory_deallocate;
    i->memory_copy_h2d = memory_copy_h2d;
    i->memory_copy_d2h = memory_copy_d2h;
    i->memory_copy_d2d = memory_copy_d2d;
    i->memory_copy_p2p = memory_copy_p2p;
    i->async_memory_copy_h2d = async_memory_copy_h2d;
    i->async_memory_copy_d2h = async_memory_copy_d2h;
    i->async_memory_copy_d2d = async_memory_copy_d2d;
    i->async_memory_copy_p2p = async_memory_copy_p2p;

    i->get_device_count = get_device_count;
    i->get_device_list = get_device_list;
    i->device_memory_stats = device_memory_stats;
    i->device_min_chunk_size = device_min_chunk_size;
    i->device_max_alloc_size = device_max_alloc_size;
    i->device_extra_padding_size = device_extra_padding_size;

    i->get_compute_capability = get_compute_capability;
    i->get_runtime_version = get_runtime_version;
    i->get_driver_version = get_runtime_version;
    i->get_multi_process = get_multi_process;
    i->is_float16_supported = is_supported_true;
    i->is_bfloat16_supported = is_supported_true;
    i->is_dnn_supported = is_supported_false;

    i->xccl_get_comm_name = xccl_get_comm_name;
    i->xccl_get_unique_id_size = xccl_get_unique_id_size;
    i->xccl_get_unique_id = xccl_get_unique_id;
    i->xccl_comm_init_rank = xccl_comm_init_rank;
    i->xccl_destroy_comm = xccl_destroy_comm;
    i->xccl_all_reduce = xccl_all_reduce;
    i->xccl_broadcast = xccl_broadcast;
    i->xccl_reduce = xccl_reduce;
    i->xccl_all_gather = xccl_all_gather;
    i->xccl_reduce_scatter = xccl_reduce_scatter;
    i->xccl_group_start = xccl_group_start;
    i->xccl_group_end = xccl_group_end;
    i->xccl_send = xccl_send;
    i->xccl_recv = xccl_recv;

    i->profiler_initialize = profiler_init;
    i->profiler_finalize = profiler_noop;
    i->profiler_prepare_tracing = profiler_noop;
    i->profiler_start_tracing = profiler_noop;
    i->profiler_stop_tracing = profiler_noop;
    i->profiler_collect_trace_data = profiler_collect;

    if (t && strcmp(t, "no-set-device") == 0) i->set_device = nullptr;

    params->device_type = const_cast<char*>(kDeviceType);
    params->sub_device_type = const_cast<char*>(kSubDeviceType);
  } catch (...) {
    fprintf(stderr, "paddle_dipu: InitPlugin failed\n");
  }
}

}  // extern "C"
