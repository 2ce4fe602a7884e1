/* The memory history from C: records with native stacks and a frames
 * hook's frames, allocates three device blocks from a named function, frees
 * one, and dumps the snapshot to the file named by argv[1]; bad arguments
 * give DIPU_STATUS_INVALID_ARGUMENT. Build with -g -O0 -rdynamic so the
 * frames resolve. */
#include <stddef.h>
#include <stdio.h>

#include "check.h"

void *alloc_from_gamma(dipu_stream stream, size_t bytes);

__attribute__((noinline)) void *alloc_from_gamma(dipu_stream stream, size_t bytes) {
  void *p = NULL;
  CHECK(dipu_malloc(bytes, stream, &p));
  return p;
}

/* A frames hook whose captures are numbered; each names one frame,
 * model.py:<n> in "layer". */
static size_t captured, released;

static size_t capture(void *user) {
  (void)user;
  return ++captured;
}

static void symbolize(void *user, size_t handle, dipu_memory_frame_sink sink, void *ctx) {
  (void)user;
  sink(ctx, "model.py", (uint32_t)handle, "layer");
}

static void release(void *user, size_t handle) {
  (void)user;
  (void)handle;
  released++;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: memory_history SNAPSHOT\n");
    return 2;
  }
  EXPECT(dipu_memory_record_history(-1, 0) == DIPU_STATUS_INVALID_ARGUMENT);
  EXPECT(dipu_memory_record_history_stacks(10, 8) == DIPU_STATUS_INVALID_ARGUMENT);
  EXPECT(dipu_memory_record_history_stacks(10, DIPU_MEMORY_HISTORY_FRAMEWORK) ==
         DIPU_STATUS_INVALID_ARGUMENT); /* no hook yet */
  dipu_memory_frames_hook hook = {NULL, capture, symbolize, NULL};
  EXPECT(dipu_memory_history_set_frames_hook(&hook) == DIPU_STATUS_INVALID_ARGUMENT);
  hook.release = release;
  CHECK(dipu_memory_history_set_frames_hook(&hook));
  CHECK(dipu_memory_record_history_stacks(1000, DIPU_MEMORY_HISTORY_NATIVE | DIPU_MEMORY_HISTORY_FRAMEWORK));
  dipu_stream stream;
  CHECK(dipu_stream_from_pool(0, 0, &stream));
  void *a = alloc_from_gamma(stream, 1000);
  void *b = alloc_from_gamma(stream, 3 << 20);
  void *c = alloc_from_gamma(stream, 4096);
  CHECK(dipu_free(b));
  EXPECT(dipu_memory_dump_snapshot(NULL) == DIPU_STATUS_INVALID_ARGUMENT);
  EXPECT(dipu_memory_dump_snapshot("/nonexistent-dir/x.pickle") == DIPU_STATUS_INVALID_ARGUMENT);
  printf("bad path: %s\n", dipu_last_error_message());
  CHECK(dipu_memory_dump_snapshot(argv[1]));
  EXPECT(captured > 0 && released == 0);
  /* A ring of one event releases every capture but the last event's. */
  CHECK(dipu_memory_record_history_stacks(1, DIPU_MEMORY_HISTORY_NATIVE));
  EXPECT(released == captured - 1);
  CHECK(dipu_free(a));
  CHECK(dipu_free(c));
  printf("history done\n");
  return 0;
}
