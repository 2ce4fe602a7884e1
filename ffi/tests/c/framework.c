/* What a framework adapter (torch_dipu) asks of the runtime: pointer
 * attributes, a stream rebuilt from (device, id), stream priorities, the
 * pinned allocator's statistics and cache, resetting accumulated
 * statistics, and the generator's offset. */
#include <stdint.h>
#include <string.h>

#include "check.h"

int main(void) {
  dipu_pointer_attributes a;
  dipu_stream pooled, high, created, back;
  dipu_memory_stats stats;
  void *dev = NULL, *pinned = NULL;
  char host_byte = 0;
  int32_t prio = 99;
  uint64_t seed = 0, offset = 0;

  /* Device memory: device, base and size, from inside the allocation too. */
  CHECK(dipu_stream_from_pool(0, 0, &pooled));
  CHECK(dipu_malloc(1000, pooled, &dev));
  CHECK(dipu_pointer_get_attributes((char *)dev + 10, &a));
  EXPECT(a.memory_type == DIPU_MEMORY_DEVICE && a.device == 0);
  EXPECT(a.base == dev && a.size == 1000);
  /* Pinned host memory. */
  CHECK(dipu_host_malloc(300, &pinned));
  CHECK(dipu_pointer_get_attributes((char *)pinned + 299, &a));
  EXPECT(a.memory_type == DIPU_MEMORY_PINNED && a.device == -1);
  EXPECT(a.base == pinned && a.size == 300);
  /* Neither: ordinary host memory and NULL; a NULL out is an error. */
  CHECK(dipu_pointer_get_attributes(&host_byte, &a));
  EXPECT(a.memory_type == DIPU_MEMORY_UNREGISTERED && a.base == NULL && a.size == 0);
  CHECK(dipu_pointer_get_attributes(NULL, &a));
  EXPECT(a.memory_type == DIPU_MEMORY_UNREGISTERED);
  EXPECT(dipu_pointer_get_attributes(dev, NULL) == DIPU_STATUS_INVALID_ARGUMENT);

  /* Streams from (device, id), and their priorities. */
  CHECK(dipu_stream_from_id(0, pooled.id, &back));
  EXPECT(back.device == 0 && back.id == pooled.id && back.raw == pooled.raw);
  CHECK(dipu_stream_from_id(0, 0, &back));
  EXPECT(back.id == 0 && back.raw == 0);
  EXPECT(dipu_stream_from_id(0, 0x7777, &back) == DIPU_STATUS_INVALID_ARGUMENT);
  EXPECT(dipu_stream_from_id(99, 0, &back) == DIPU_STATUS_INVALID_DEVICE);
  CHECK(dipu_stream_priority(pooled, &prio));
  EXPECT(prio == 0);
  CHECK(dipu_stream_from_pool(0, 1, &high));
  CHECK(dipu_stream_priority(high, &prio));
  EXPECT(prio <= 0);
  CHECK(dipu_stream_create(0, 0, &created));
  CHECK(dipu_stream_priority(created, &prio));
  EXPECT(prio == 0);

  /* Pinned statistics and empty_cache. */
  CHECK(dipu_host_memory_get_stats(&stats));
  EXPECT(stats.allocation.current == 1 && stats.requested_bytes.current == 300);
  CHECK(dipu_host_free(pinned));
  CHECK(dipu_host_empty_cache());
  CHECK(dipu_host_memory_get_stats(&stats));
  EXPECT(stats.allocation.current == 0 && stats.reserved_bytes.current == 0);
  CHECK(dipu_host_memory_reset_peak_stats());
  CHECK(dipu_host_memory_get_stats(&stats));
  EXPECT(stats.allocated_bytes.peak == 0);
  EXPECT(stats.allocation.allocated == 1 && stats.allocation.freed == 1);
  CHECK(dipu_host_memory_reset_accumulated_stats());
  CHECK(dipu_host_memory_get_stats(&stats));
  EXPECT(stats.allocation.allocated == 0 && stats.allocation.freed == 0);
  EXPECT(stats.num_device_alloc == 0 && stats.num_device_free == 0);

  /* Accumulated device statistics restart at zero; current values stay. */
  CHECK(dipu_memory_get_stats(0, &stats));
  EXPECT(stats.allocation.allocated >= 1 && stats.allocation.current >= 1);
  CHECK(dipu_memory_reset_accumulated_stats(0));
  CHECK(dipu_memory_get_stats(0, &stats));
  EXPECT(stats.allocation.allocated == 0 && stats.allocation.freed == 0);
  EXPECT(stats.allocation.current >= 1 && stats.num_device_alloc == 0);
  CHECK(dipu_free(dev));
  CHECK(dipu_memory_get_stats(0, &stats));
  EXPECT(stats.allocation.freed == 1);
  EXPECT(dipu_memory_reset_accumulated_stats(99) == DIPU_STATUS_INVALID_DEVICE);

  /* The generator's offset. */
  CHECK(dipu_generator_manual_seed(0, 7));
  CHECK(dipu_generator_get_offset(0, &offset));
  EXPECT(offset == 0);
  CHECK(dipu_generator_philox_inputs(0, 10, &seed, &offset));
  CHECK(dipu_generator_get_offset(0, &offset));
  EXPECT(offset == 12);
  CHECK(dipu_generator_set_offset(0, 40));
  CHECK(dipu_generator_philox_inputs(0, 4, &seed, &offset));
  EXPECT(seed == 7 && offset == 40);
  EXPECT(dipu_generator_set_offset(0, 3) == DIPU_STATUS_INVALID_ARGUMENT);
  EXPECT(dipu_generator_get_offset(0, NULL) == DIPU_STATUS_INVALID_ARGUMENT);

  /* Stream priorities, and a stream for a vendor handle made elsewhere
   * (here: a created stream's handle, as another library would pass it). */
  int32_t least = 1, greatest = 1;
  CHECK(dipu_stream_priority_range(0, &least, &greatest));
  EXPECT(least == 0 && greatest <= least);
  EXPECT(dipu_stream_priority_range(99, &least, &greatest) == DIPU_STATUS_INVALID_DEVICE);
  EXPECT(dipu_stream_priority_range(0, NULL, &greatest) == DIPU_STATUS_INVALID_ARGUMENT);
  dipu_stream made, ext, again;
  CHECK(dipu_stream_create(0, 0, &made));
  CHECK(dipu_stream_from_raw(0, made.raw, &ext));
  EXPECT(ext.raw == made.raw && ext.id == made.id && ext.device == 0);
  CHECK(dipu_stream_from_raw(0, made.raw, &again));
  EXPECT(again.id == ext.id);
  void *buf = NULL;
  CHECK(dipu_malloc(16, ext, &buf));
  CHECK(dipu_memset_async(buf, 5, 16, ext));
  CHECK(dipu_stream_synchronize(ext));
  unsigned char host[16];
  CHECK(dipu_memcpy(host, buf, 16, DIPU_COPY_DEVICE_TO_HOST));
  EXPECT(host[0] == 5 && host[15] == 5);
  CHECK(dipu_free(buf));
  EXPECT(dipu_stream_from_raw(0, 0, &ext) == DIPU_STATUS_INVALID_ARGUMENT);
  EXPECT(dipu_stream_from_raw(99, made.raw, &ext) == DIPU_STATUS_INVALID_DEVICE);

  CHECK(dipu_shutdown(NULL));
  printf("framework ok\n");
  return 0;
}
