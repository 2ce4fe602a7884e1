/* Eight threads, each on its own pooled stream: allocate, fill, copy back,
 * check, free; plus concurrent events and generator offsets. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

enum { THREADS = 8, ROUNDS = 50, BYTES = 4096 };

static uint64_t offsets[THREADS][ROUNDS];

static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  unsigned char in[BYTES], out[BYTES];
  dipu_stream s, cur;
  int r;
  CHECK(dipu_stream_from_pool(0, t % 2, &s));
  CHECK(dipu_stream_set_current(s));
  for (r = 0; r < ROUNDS; r++) {
    void *dev = NULL;
    dipu_event *e = NULL;
    uint64_t seed;
    memset(in, (t * 31 + r) & 0xff, BYTES);
    CHECK(dipu_stream_current(0, &cur));
    EXPECT(cur.raw == s.raw);
    CHECK(dipu_malloc(BYTES, cur, &dev));
    CHECK(dipu_memcpy_async(dev, in, BYTES, DIPU_COPY_HOST_TO_DEVICE, cur));
    CHECK(dipu_event_create(0, &e));
    CHECK(dipu_event_record(e, cur));
    CHECK(dipu_memcpy_async(out, dev, BYTES, DIPU_COPY_DEVICE_TO_HOST, cur));
    CHECK(dipu_event_synchronize(e));
    CHECK(dipu_stream_synchronize(cur));
    EXPECT(memcmp(in, out, BYTES) == 0);
    CHECK(dipu_event_destroy(e));
    CHECK(dipu_free(dev));
    CHECK(dipu_generator_philox_inputs(0, 4, &seed, &offsets[t][r]));
  }
  return NULL;
}

int main(void) {
  pthread_t threads[THREADS];
  dipu_memory_stats stats;
  int t, r, u, q;
  CHECK(dipu_generator_manual_seed(0, 7));
  for (t = 0; t < THREADS; t++)
    EXPECT(pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t) == 0);
  for (t = 0; t < THREADS; t++) EXPECT(pthread_join(threads[t], NULL) == 0);
  /* Every reserved Philox range is distinct. */
  for (t = 0; t < THREADS; t++)
    for (r = 0; r < ROUNDS; r++)
      for (u = 0; u < THREADS; u++)
        for (q = 0; q < ROUNDS; q++)
          if (t != u || r != q) EXPECT(offsets[t][r] != offsets[u][q]);
  CHECK(dipu_memory_get_stats(0, &stats));
  EXPECT(stats.allocation.current == 0);
  EXPECT(stats.allocation.allocated == THREADS * ROUNDS);
  CHECK(dipu_shutdown(NULL));
  printf("threads ok\n");
  return 0;
}
