/* Fork semantics: a child forked before the runtime exists can use dipu;
 * a child forked after the parent queued work gets a clear error (not a
 * hang). */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* Forks, runs `child` in the child (its return is the exit code; a hang
 * is killed by the alarm, far beyond what a slow machine takes) and
 * returns the child's exit code. */
static int in_child(int (*child)(void)) {
  fflush(stdout);
  pid_t pid = fork();
  EXPECT(pid >= 0);
  if (pid == 0) {
    alarm(120);
    int rc = child();
    fflush(stdout);
    _exit(rc);
  }
  int st = 0;
  EXPECT(waitpid(pid, &st, 0) == pid);
  EXPECT(WIFEXITED(st));
  return WEXITSTATUS(st);
}

/* Uses dipu for real: allocate, fill, read back. */
static int child_uses_dipu(void) {
  int32_t bad = -1;
  CHECK(dipu_is_in_bad_fork(&bad));
  EXPECT(bad == 0);
  dipu_stream s;
  CHECK(dipu_stream_current(0, &s));
  void *p = NULL;
  CHECK(dipu_malloc(64, s, &p));
  CHECK(dipu_memset_async(p, 7, 64, s));
  unsigned char back[64];
  CHECK(dipu_memcpy(back, p, 64, DIPU_COPY_DEVICE_TO_HOST));
  EXPECT(back[0] == 7 && back[63] == 7);
  CHECK(dipu_free(p));
  return 0;
}

/* Any call fails with the fork error (no runtime is started: no hang). */
static int child_gets_the_error(void) {
  int32_t bad = 0;
  CHECK(dipu_is_in_bad_fork(&bad));
  EXPECT(bad == 1);
  int32_t init = 1;
  CHECK(dipu_is_initialized(&init));
  EXPECT(init == 0);
  void *p = NULL;
  dipu_stream s = {0};
  dipu_status st = dipu_malloc(64, s, &p);
  EXPECT(st == DIPU_STATUS_VENDOR_INIT_FAILED);
  EXPECT(strstr(dipu_last_error_message(), "Cannot re-initialize dipu in forked subprocess") != NULL);
  int32_t n = 0;
  EXPECT(dipu_device_get(&n) == DIPU_STATUS_VENDOR_INIT_FAILED);
  EXPECT(dipu_init(NULL) == DIPU_STATUS_VENDOR_INIT_FAILED);
  printf("child got the fork error\n");
  return 0;
}

int main(void) {
  /* Counting devices and seeding start no runtime: children can still
   * use dipu, and the seed applies when the runtime is created. */
  int32_t n = 0;
  CHECK(dipu_device_count_without_init(&n));
  CHECK(dipu_generator_manual_seed_all(1234));
  EXPECT(n >= 1);
  int32_t init = 1;
  CHECK(dipu_is_initialized(&init));
  EXPECT(init == 0);
  EXPECT(in_child(child_uses_dipu) == 0);
  uint64_t seed = 0;
  CHECK(dipu_generator_initial_seed(0, &seed));
  EXPECT(seed == 1234);

  /* The parent queues work: now a child must get the error. */
  dipu_stream s;
  CHECK(dipu_stream_from_pool(0, 0, &s));
  void *p = NULL;
  CHECK(dipu_malloc(1 << 20, s, &p));
  CHECK(dipu_memset_async(p, 1, 1 << 20, s));
  EXPECT(in_child(child_gets_the_error) == 0);
  CHECK(dipu_device_count_without_init(&n));
  EXPECT(n >= 1);

  /* The parent is unaffected. */
  CHECK(dipu_stream_synchronize(s));
  CHECK(dipu_free(p));
  printf("fork ok\n");
  return 0;
}
