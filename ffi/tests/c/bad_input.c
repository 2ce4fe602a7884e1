/* Every bad input returns its documented status and leaves a message. */
#include <stdint.h>
#include <string.h>

#include "check.h"

static int failures = 0;

/* Expects `call` to return `want` with a message naming `fn`. */
#define BAD(call, want, fn)                                                    \
  do {                                                                         \
    dipu_status got_ = (call);                                                 \
    const char *msg_ = dipu_last_error_message();                              \
    if (got_ != (want) || msg_ == NULL || strstr(msg_, fn) != msg_) {          \
      fprintf(stderr, "%s:%d: %s returned %d (want %d), message \"%s\"\n",     \
              __FILE__, __LINE__, #call, (int)got_, (int)(want),               \
              msg_ ? msg_ : "(null)");                                         \
      failures++;                                                              \
    } else {                                                                   \
      printf("ok: %-70s -> %s: %s\n", #call, dipu_status_str((int32_t)got_),   \
             msg_);                                                            \
    }                                                                          \
  } while (0)

int main(void) {
  dipu_options opts;
  dipu_stream s, bogus, bad_device, old_stream;
  dipu_event *e = NULL, *untimed = NULL;
  dipu_memory_stats stats;
  dipu_shutdown_report report;
  void *p = NULL, *q = (void *)0x1234, *old_ptr = NULL, *old_hit = NULL;
  void *hit = NULL, *other = NULL;
  dipu_stream s1;
  unsigned char host[64];
  char small[2];
  size_t needed = 0;
  uint8_t junk[24];
  int32_t count;
  float ms;
  int done;

  EXPECT(strcmp(dipu_last_error_message(), "") == 0);
  EXPECT(strcmp(dipu_status_str(DIPU_STATUS_INVALID_ARGUMENT), "invalid argument") == 0);
  EXPECT(strcmp(dipu_status_str(9999), "unknown status") == 0);

  /* Bad options: nothing is created. */
  memset(&opts, 0, sizeof opts);
  opts.device_algorithm = "NOPE";
  BAD(dipu_init(&opts), DIPU_STATUS_INVALID_CONFIG, "dipu_init");
  opts.device_algorithm = NULL;
  opts.vendor = "/nonexistent/libdipu_vendor_nothing.so";
  EXPECT(dipu_init(&opts) != DIPU_OK && dipu_last_error_message()[0] != '\0');
  CHECK(dipu_is_initialized(&done));
  EXPECT(done == 0);
  CHECK(dipu_init(NULL));
  BAD(dipu_init(NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_init");

  /* NULL out-pointers. */
  BAD(dipu_device_count(NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_device_count");
  BAD(dipu_device_get(NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_device_get");
  BAD(dipu_stream_from_pool(0, 0, NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_stream_from_pool");
  BAD(dipu_event_create(0, NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_event_create");
  BAD(dipu_memory_get_stats(0, NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memory_get_stats");
  BAD(dipu_generator_seed(0, NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_generator_seed");
  BAD(dipu_generator_set_state(0, NULL, 24), DIPU_STATUS_INVALID_ARGUMENT, "dipu_generator_set_state");
  CHECK(dipu_stream_from_pool(0, 0, &s));
  BAD(dipu_malloc(16, s, NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_malloc");

  /* Invalid devices. */
  CHECK(dipu_device_count(&count));
  BAD(dipu_device_set(count), DIPU_STATUS_INVALID_DEVICE, "dipu_device_set");
  BAD(dipu_device_set(-1), DIPU_STATUS_INVALID_DEVICE, "dipu_device_set");
  BAD(dipu_stream_from_pool(count, 0, &s), DIPU_STATUS_INVALID_DEVICE, "dipu_stream_from_pool");
  BAD(dipu_empty_cache(1000), DIPU_STATUS_INVALID_DEVICE, "dipu_empty_cache");
  BAD(dipu_memory_get_stats(-5, &stats), DIPU_STATUS_INVALID_DEVICE, "dipu_memory_get_stats");
  {
    dipu_memory_pool_stats pool;
    BAD(dipu_memory_get_pool_stats(0, 7, &pool), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memory_get_pool_stats");
    BAD(dipu_memory_get_pool_stats(0, DIPU_MEMORY_POOL_SMALL, NULL), DIPU_STATUS_INVALID_ARGUMENT,
        "dipu_memory_get_pool_stats");
    BAD(dipu_memory_get_pool_stats(-5, DIPU_MEMORY_POOL_LARGE, &pool), DIPU_STATUS_INVALID_DEVICE,
        "dipu_memory_get_pool_stats");
  }
  BAD(dipu_device_synchronize(1000), DIPU_STATUS_INVALID_DEVICE, "dipu_device_synchronize");
  BAD(dipu_generator_manual_seed(1000, 1), DIPU_STATUS_INVALID_DEVICE, "dipu_generator_manual_seed");
  CHECK(dipu_stream_from_pool(0, 0, &s));

  /* Size overflow. */
  p = (void *)0x1;
  BAD(dipu_malloc(SIZE_MAX, s, &p), DIPU_STATUS_OUT_OF_MEMORY, "dipu_malloc");
  EXPECT(p == (void *)0x1);
  BAD(dipu_host_malloc(SIZE_MAX, &p), DIPU_STATUS_OUT_OF_MEMORY, "dipu_host_malloc");

  /* Unknown pointers, double frees, ranges outside an allocation. */
  BAD(dipu_free(q), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  BAD(dipu_free(host), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  BAD(dipu_host_free(host), DIPU_STATUS_INVALID_ARGUMENT, "dipu_host_free");
  CHECK(dipu_malloc(64, s, &p));
  BAD(dipu_free((char *)p + 8), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  BAD(dipu_memcpy(p, host, 65, DIPU_COPY_HOST_TO_DEVICE), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memcpy");
  BAD(dipu_memcpy(p, NULL, 8, DIPU_COPY_HOST_TO_DEVICE), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memcpy");
  BAD(dipu_memcpy(host, p, 8, 42), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memcpy");
  BAD(dipu_memcpy(host, host + 32, 8, DIPU_COPY_DEVICE_TO_HOST), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memcpy");
  BAD(dipu_memset((char *)p + 60, 0, 8), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memset");
  BAD(dipu_memset_async(q, 0, 8, s), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memset_async");
  BAD(dipu_record_stream(q, s), DIPU_STATUS_INVALID_ARGUMENT, "dipu_record_stream");
  CHECK(dipu_free(p));
  BAD(dipu_free(p), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  BAD(dipu_memcpy(host, p, 8, DIPU_COPY_DEVICE_TO_HOST), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memcpy");
  CHECK(dipu_host_malloc(32, &p));
  CHECK(dipu_host_free(p));
  BAD(dipu_host_free(p), DIPU_STATUS_INVALID_ARGUMENT, "dipu_host_free");
  CHECK(dipu_free(NULL));
  CHECK(dipu_host_free(NULL));

  /* The same checks on blocks this thread's allocator cache hands out and
   * takes back (the hit paths of dipu_malloc and dipu_free). */
  CHECK(dipu_malloc(256, s, &p));
  CHECK(dipu_free(p));
  BAD(dipu_free(p), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  CHECK(dipu_malloc(256, s, &hit));
  EXPECT(hit == p);
  BAD(dipu_free((char *)hit + 16), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  BAD(dipu_memcpy((char *)hit + 224, host, 64, DIPU_COPY_HOST_TO_DEVICE), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memcpy");
  BAD(dipu_memcpy_async((char *)hit + 224, host, 64, DIPU_COPY_HOST_TO_DEVICE, s), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memcpy_async");
  BAD(dipu_memcpy_async(host, (char *)hit - 8, 16, DIPU_COPY_DEVICE_TO_HOST, s), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memcpy_async");
  CHECK(dipu_memcpy_async((char *)hit + 192, host, 64, DIPU_COPY_HOST_TO_DEVICE, s));
  CHECK(dipu_stream_synchronize(s));
  BAD(dipu_record_stream((char *)hit + 8, s), DIPU_STATUS_INVALID_ARGUMENT, "dipu_record_stream");
  /* Another device's block from its own cache, used on device 0's stream. */
  EXPECT(count >= 2);
  CHECK(dipu_stream_from_pool(1, 0, &s1));
  CHECK(dipu_malloc(256, s1, &other));
  CHECK(dipu_free(other));
  CHECK(dipu_malloc(256, s1, &p));
  EXPECT(p == other && other != hit);
  BAD(dipu_free((char *)other + 1), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  CHECK(dipu_record_stream(other, s));
  CHECK(dipu_record_stream(hit, s1));
  CHECK(dipu_free(other));
  BAD(dipu_free(other), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  CHECK(dipu_free(hit));
  BAD(dipu_free(hit), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  BAD(dipu_memcpy(host, hit, 8, DIPU_COPY_DEVICE_TO_HOST), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memcpy");
  BAD(dipu_record_stream(hit, s), DIPU_STATUS_INVALID_ARGUMENT, "dipu_record_stream");
  CHECK(dipu_device_synchronize(0));
  CHECK(dipu_device_synchronize(1));

  /* Invalid stream handles. */
  bogus = s;
  bogus.raw ^= 0x5a5a;
  BAD(dipu_stream_synchronize(bogus), DIPU_STATUS_INVALID_ARGUMENT, "dipu_stream_synchronize");
  bogus.id = 0x7fffffffu;
  BAD(dipu_malloc(16, bogus, &p), DIPU_STATUS_INVALID_ARGUMENT, "dipu_malloc");
  BAD(dipu_stream_set_current(bogus), DIPU_STATUS_INVALID_ARGUMENT, "dipu_stream_set_current");
  BAD(dipu_stream_query(bogus, &done), DIPU_STATUS_INVALID_ARGUMENT, "dipu_stream_query");
  bad_device = s;
  bad_device.device = 1000;
  BAD(dipu_memcpy_async(host, host + 32, 8, DIPU_COPY_HOST_TO_HOST, bad_device), DIPU_STATUS_INVALID_DEVICE, "dipu_memcpy_async");

  /* Events: destroyed, made up, wrong kind. */
  CHECK(dipu_event_create(0, &untimed));
  CHECK(dipu_event_record(untimed, s));
  BAD(dipu_event_elapsed_ms(untimed, untimed, &ms), DIPU_STATUS_INVALID_ARGUMENT, "dipu_event_elapsed_ms");
  BAD(dipu_event_elapsed_ms(untimed, untimed, NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_event_elapsed_ms");
  BAD(dipu_event_record(untimed, bogus), DIPU_STATUS_INVALID_ARGUMENT, "dipu_event_record");
  CHECK(dipu_event_create(1, &e));
  CHECK(dipu_event_destroy(e));
  /* The stale handle is looked up in the registry of live events, never
   * dereferenced. */
  BAD(dipu_event_record(e, s), DIPU_STATUS_INVALID_ARGUMENT, "dipu_event_record");
  BAD(dipu_event_query(e, &done), DIPU_STATUS_INVALID_ARGUMENT, "dipu_event_query");
  BAD(dipu_event_synchronize(e), DIPU_STATUS_INVALID_ARGUMENT, "dipu_event_synchronize");
  BAD(dipu_event_destroy(e), DIPU_STATUS_INVALID_ARGUMENT, "dipu_event_destroy");
  BAD(dipu_stream_wait_event(s, (dipu_event *)q), DIPU_STATUS_INVALID_ARGUMENT, "dipu_stream_wait_event");
  BAD(dipu_event_block(NULL, s), DIPU_STATUS_INVALID_ARGUMENT, "dipu_event_block");
  CHECK(dipu_event_destroy(NULL));

  /* Buffers too small, bad states and values. */
  BAD(dipu_vendor_name(small, sizeof small, &needed), DIPU_STATUS_INVALID_ARGUMENT, "dipu_vendor_name");
  BAD(dipu_vendor_capabilities(NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_vendor_capabilities");
  EXPECT(needed == 5);
  BAD(dipu_memory_snapshot_json(0, small, sizeof small, &needed), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memory_snapshot_json");
  BAD(dipu_generator_get_state(0, junk, 3, NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_generator_get_state");
  memset(junk, 0xee, sizeof junk);
  BAD(dipu_generator_set_state(0, junk, sizeof junk), DIPU_STATUS_INVALID_ARGUMENT, "dipu_generator_set_state");
  BAD(dipu_memory_set_fraction(0, 2.0), DIPU_STATUS_INVALID_ARGUMENT, "dipu_memory_set_fraction");
  BAD(dipu_generator_philox_inputs(0, 4, NULL, NULL), DIPU_STATUS_INVALID_ARGUMENT, "dipu_generator_philox_inputs");

  /* Handles and pointers from before a shutdown. */
  old_stream = s;
  CHECK(dipu_malloc(32, s, &old_ptr));
  CHECK(dipu_malloc(48, s, &old_hit));
  CHECK(dipu_free(old_hit));
  CHECK(dipu_malloc(48, s, &p));
  EXPECT(p == old_hit); /* held from this thread's cache at the shutdown */
  CHECK(dipu_malloc(48, s, &p));
  CHECK(dipu_free(p)); /* in this thread's cache at the shutdown */
  CHECK(dipu_shutdown(&report));
  EXPECT(report.live_allocations == 2 && report.leaked_device_bytes >= 80);
  CHECK(dipu_init(NULL));
  BAD(dipu_stream_synchronize(old_stream), DIPU_STATUS_INVALID_ARGUMENT, "dipu_stream_synchronize");
  BAD(dipu_free(old_ptr), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  BAD(dipu_free(old_hit), DIPU_STATUS_INVALID_ARGUMENT, "dipu_free");
  BAD(dipu_record_stream(old_hit, s), DIPU_STATUS_INVALID_ARGUMENT, "dipu_record_stream");
  BAD(dipu_event_record(untimed, s), DIPU_STATUS_INVALID_ARGUMENT, "dipu_event_record");
  CHECK(dipu_event_destroy(untimed));
  CHECK(dipu_shutdown(NULL));

  if (failures) {
    fprintf(stderr, "%d bad-input checks failed\n", failures);
    return 1;
  }
  printf("bad_input ok\n");
  return 0;
}
