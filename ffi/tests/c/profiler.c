/* The runtime trace from C. With a path argument: records a copy on one
 * stream, an event recorded there and waited for on another, and an
 * allocate + free; checks bad input; dumps the trace to the path. With
 * "exit" as the argument: only allocates and frees, so that DIPU_PROFILE
 * writes the trace at exit. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

int main(int argc, char **argv) {
  EXPECT(argc == 2);
  dipu_stream a, b;
  CHECK(dipu_stream_from_pool(0, 0, &a));
  CHECK(dipu_stream_from_pool(0, 1, &b));
  if (strcmp(argv[1], "exit") == 0) {
    void *p = NULL;
    CHECK(dipu_malloc(1000, a, &p));
    CHECK(dipu_free(p));
    printf("profiler exit done\n");
    return 0;
  }
  size_t n = 1;
  CHECK(dipu_profiler_clear());
  CHECK(dipu_profiler_events(&n));
  EXPECT(n == 0);
  CHECK(dipu_profiler_start());
  void *p = NULL;
  char host[256] = {1};
  CHECK(dipu_malloc(sizeof host, a, &p));
  CHECK(dipu_memcpy_async(p, host, sizeof host, DIPU_COPY_HOST_TO_DEVICE, a));
  dipu_event *ev = NULL;
  CHECK(dipu_event_create(0, &ev));
  CHECK(dipu_event_record(ev, a));
  CHECK(dipu_stream_wait_event(b, ev));
  CHECK(dipu_stream_synchronize(b));
  CHECK(dipu_free(p));
  CHECK(dipu_event_destroy(ev));
  CHECK(dipu_profiler_stop());
  CHECK(dipu_profiler_events(&n));
  EXPECT(n > 0);

  /* Bad input: an error, nothing lost. */
  EXPECT(dipu_profiler_dump(NULL) == DIPU_STATUS_INVALID_ARGUMENT);
  EXPECT(dipu_profiler_dump("/nonexistent-dir/t.json") == DIPU_STATUS_INVALID_ARGUMENT);
  EXPECT(strstr(dipu_last_error_message(), "nonexistent-dir") != NULL);
  EXPECT(dipu_profiler_set_capacity(0) == DIPU_STATUS_INVALID_ARGUMENT);
  EXPECT(dipu_profiler_events(NULL) == DIPU_STATUS_INVALID_ARGUMENT);
  size_t m = 0;
  CHECK(dipu_profiler_events(&m));
  EXPECT(m >= n);

  /* Read back: the allocation is there, by name and category. */
  dipu_trace_event evs[64];
  size_t got = 0, allocs = 0;
  for (size_t skip = 0;; skip += got) {
    CHECK(dipu_profiler_read(skip, evs, 64, &got));
    if (got == 0) break;
    for (size_t i = 0; i < got; i++) {
      if (strcmp(evs[i].name, "allocate") == 0) {
        EXPECT(strcmp(evs[i].category, "allocator") == 0);
        EXPECT(evs[i].kind == 1 && evs[i].device == -1);
        allocs++;
      }
    }
  }
  EXPECT(allocs == 1);
  EXPECT(dipu_profiler_read(0, NULL, 4, &got) == DIPU_STATUS_INVALID_ARGUMENT);
  uint64_t now = 0;
  CHECK(dipu_profiler_now_ns(&now));
  EXPECT(now > evs[0].ts_ns);

  CHECK(dipu_profiler_dump(argv[1]));
  CHECK(dipu_profiler_clear());
  CHECK(dipu_profiler_events(&n));
  EXPECT(n == 0);
  printf("profiler done\n");
  return 0;
}
