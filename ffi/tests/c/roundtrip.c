/* Host -> device -> host on pooled streams, ordered with events; stats,
 * snapshot, generators, a store's queue and barrier, and a clean shutdown. */
#include <stdint.h>
#include <string.h>

#include "check.h"

int main(void) {
  enum { N = 1 << 16 };
  dipu_options opts;
  dipu_stream s1, s2, cur;
  dipu_event *copied = NULL, *t0 = NULL, *t1 = NULL;
  dipu_device_properties props;
  dipu_memory_info info;
  dipu_memory_stats stats;
  dipu_shutdown_report report;
  unsigned char *host_in, *host_out;
  void *dev = NULL, *dev2 = NULL;
  int32_t count = 0, device = -1;
  int done = 0;
  float ms = -1.0f;
  size_t needed = 0, i;
  char name[64];
  char *json;
  uint64_t seed = 0, offset = 0;
  uint8_t state[64];
  size_t state_len = 0;

  EXPECT(strcmp(dipu_version(), DIPU_RUNTIME_VERSION) == 0);
  memset(&opts, 0, sizeof opts);
  opts.vendor = "host";
  opts.device_algorithm = "BF";
  CHECK(dipu_init(&opts));
  CHECK(dipu_vendor_name(name, sizeof name, &needed));
  EXPECT(strcmp(name, "host") == 0 && needed == 5);
  uint32_t caps = 0;
  CHECK(dipu_vendor_capabilities(&caps));
  EXPECT(caps == (DIPU_VENDOR_CAP_COLLECTIVES | DIPU_VENDOR_CAP_VIRTUAL_MEMORY |
                  DIPU_VENDOR_CAP_HOST_ACCESSIBLE_MEMORY));
  CHECK(dipu_device_count(&count));
  EXPECT(count >= 1);
  CHECK(dipu_device_get(&device));
  EXPECT(device == 0);
  CHECK(dipu_device_get_properties(0, &props));
  EXPECT(props.name[0] != '\0' && props.total_memory > 0);
  CHECK(dipu_device_memory_info(0, &info));
  EXPECT(info.total > 0 && info.free <= info.total);

  CHECK(dipu_stream_from_pool(0, 0, &s1));
  CHECK(dipu_stream_from_pool(0, 1, &s2));
  CHECK(dipu_stream_set_current(s1));
  CHECK(dipu_stream_current(0, &cur));
  EXPECT(cur.id == s1.id && cur.raw == s1.raw);

  CHECK(dipu_host_malloc(N, (void **)&host_in));
  host_out = (unsigned char *)malloc(N);
  EXPECT(host_in && host_out);
  for (i = 0; i < N; i++) host_in[i] = (unsigned char)(i * 7 + 3);
  memset(host_out, 0, N);

  CHECK(dipu_malloc(N, s1, &dev));
  EXPECT(dev != NULL);
  CHECK(dipu_event_create(0, &copied));
  CHECK(dipu_event_create(1, &t0));
  CHECK(dipu_event_create(1, &t1));
  CHECK(dipu_event_record(t0, s1));
  CHECK(dipu_memcpy_async(dev, host_in, N, DIPU_COPY_HOST_TO_DEVICE, s1));
  CHECK(dipu_host_record_stream(host_in, s1));
  CHECK(dipu_event_record(copied, s1));
  CHECK(dipu_event_record(t1, s1));
  /* s2 reads what s1 wrote: it waits for the event, and the allocator
   * learns that s2 uses the memory. */
  CHECK(dipu_stream_wait_event(s2, copied));
  CHECK(dipu_record_stream(dev, s2));
  CHECK(dipu_memcpy_async(host_out, dev, N, DIPU_COPY_DEVICE_TO_HOST, s2));
  CHECK(dipu_stream_synchronize(s2));
  CHECK(dipu_event_synchronize(copied));
  CHECK(dipu_event_query(copied, &done));
  EXPECT(done == 1);
  CHECK(dipu_stream_query(s1, &done));
  CHECK(dipu_event_synchronize(t1));
  CHECK(dipu_event_elapsed_ms(t0, t1, &ms));
  EXPECT(ms >= 0.0f);
  EXPECT(memcmp(host_in, host_out, N) == 0);

  /* Synchronous memset and copy back. */
  CHECK(dipu_malloc(256, s1, &dev2));
  CHECK(dipu_memset(dev2, 0xAB, 256));
  CHECK(dipu_memcpy(host_out, dev2, 256, DIPU_COPY_DEVICE_TO_HOST));
  for (i = 0; i < 256; i++) EXPECT(host_out[i] == 0xAB);
  CHECK(dipu_memset_async(dev2, 1, 128, s1));
  CHECK(dipu_memcpy_async(dev, dev2, 256, DIPU_COPY_DEVICE_TO_DEVICE, s1));
  CHECK(dipu_memcpy_async(host_out, dev, 256, DIPU_COPY_DEVICE_TO_HOST, s1));
  CHECK(dipu_stream_synchronize(s1));
  EXPECT(host_out[0] == 1 && host_out[127] == 1 && host_out[128] == 0xAB);

  CHECK(dipu_memory_get_stats(0, &stats));
  EXPECT(stats.allocation.current == 2 && stats.allocated_bytes.current >= N + 256);
  EXPECT(stats.reserved_bytes.current >= stats.allocated_bytes.current);
  EXPECT(stats.num_ooms == 0);
  {
    /* Both blocks are small requests: the small pool holds them all. */
    dipu_memory_pool_stats small, large;
    CHECK(dipu_memory_get_pool_stats(0, DIPU_MEMORY_POOL_SMALL, &small));
    CHECK(dipu_memory_get_pool_stats(0, DIPU_MEMORY_POOL_LARGE, &large));
    EXPECT(small.allocation.current == 2 && large.allocation.current == 0);
    EXPECT(small.allocated_bytes.current == stats.allocated_bytes.current);
    EXPECT(small.reserved_bytes.current + large.reserved_bytes.current == stats.reserved_bytes.current);
  }
  CHECK(dipu_memory_snapshot_json(0, NULL, 0, &needed));
  EXPECT(needed > 2);
  json = (char *)malloc(needed + 64);
  CHECK(dipu_memory_snapshot_json(0, json, needed + 64, &needed));
  EXPECT(strlen(json) + 1 == needed && json[0] == '{');
  free(json);

  CHECK(dipu_free(dev));
  CHECK(dipu_free(dev2));
  CHECK(dipu_device_synchronize(0));
  CHECK(dipu_empty_cache(0));
  CHECK(dipu_memory_get_stats(0, &stats));
  EXPECT(stats.allocation.current == 0 && stats.allocation.peak == 2);
  CHECK(dipu_memory_reset_peak_stats(0));

  CHECK(dipu_generator_manual_seed(0, 42));
  CHECK(dipu_generator_initial_seed(0, &seed));
  EXPECT(seed == 42);
  CHECK(dipu_generator_philox_inputs(0, 10, &seed, &offset));
  EXPECT(seed == 42 && offset == 0);
  CHECK(dipu_generator_get_state(0, state, sizeof state, &state_len));
  CHECK(dipu_generator_philox_inputs(0, 4, &seed, &offset));
  EXPECT(offset == 12);
  CHECK(dipu_generator_set_state(0, state, state_len));
  CHECK(dipu_generator_philox_inputs(0, 4, &seed, &offset));
  EXPECT(offset == 12);
  CHECK(dipu_generator_seed(0, &seed));

  /* c10d's extended store calls: append, queues, list_keys, barrier. */
  {
    dipu_store *st = NULL;
    char popped[16];
    size_t got = 0, keys_len = 0, nkeys = 0;
    int64_t qlen = -1;
    CHECK(dipu_store_hash_create(&st));
    CHECK(dipu_store_append(st, "log", "ab", 2));
    CHECK(dipu_store_append(st, "log", "c", 1));
    CHECK(dipu_store_queue_push(st, "q", "hello", 5));
    CHECK(dipu_store_queue_len(st, "q", &qlen));
    EXPECT(qlen == 1);
    /* The size first: the value stays with the handle for the next pop. */
    CHECK(dipu_store_queue_pop(st, "q", 1, NULL, 0, &got));
    EXPECT(got == 5);
    CHECK(dipu_store_queue_pop(st, "q", 1, popped, sizeof popped, &got));
    EXPECT(got == 5 && memcmp(popped, "hello", 5) == 0);
    EXPECT(dipu_store_queue_pop(st, "q", 0, popped, sizeof popped, &got) ==
           DIPU_STATUS_NOT_READY);
    CHECK(dipu_store_list_keys(st, NULL, 0, &keys_len, &nkeys));
    EXPECT(nkeys == 1 && keys_len == 4);
    CHECK(dipu_store_list_keys(st, popped, sizeof popped, &keys_len, &nkeys));
    EXPECT(strcmp(popped, "log") == 0);
    CHECK(dipu_store_get(st, "log", popped, sizeof popped, &got));
    EXPECT(got == 3 && memcmp(popped, "abc", 3) == 0);
    CHECK(dipu_store_barrier(st, "start", 1, 0));
    CHECK(dipu_store_destroy(st));
  }

  CHECK(dipu_event_destroy(copied));
  CHECK(dipu_event_destroy(t0));
  CHECK(dipu_event_destroy(t1));
  CHECK(dipu_host_free(host_in));
  free(host_out);
  CHECK(dipu_shutdown(&report));
  EXPECT(report.was_initialized == 1 && report.clean == 1);
  EXPECT(report.live_allocations == 0 && report.pinned_blocks == 0);
  printf("roundtrip ok\n");
  return 0;
}
