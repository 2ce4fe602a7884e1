/* Two ranks as threads of one process (host devices 0 and 1) meeting
 * through a store made of C callbacks (a small in-memory table, as a
 * framework's own store would be): all-reduce of bool (SUM is logical or)
 * and complex64 (as pairs of floats); then dipu_process_group_abort ends
 * a blocked wait with an error and later collectives fail at once; and a
 * store whose get fails reaches the group as that error, not a hang. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"

enum { SLOTS = 64, KEY = 128, VAL = 256, N = 1000 };

/* The table behind the callbacks. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  int used[SLOTS];
  char key[SLOTS][KEY];
  unsigned char val[SLOTS][VAL];
  size_t len[SLOTS];
  int fail_get; /* every get fails with DIPU_STATUS_TIMEOUT */
} table;

static int find(table *t, const char *key) {
  for (int i = 0; i < SLOTS; i++)
    if (t->used[i] && strcmp(t->key[i], key) == 0) return i;
  return -1;
}

static int32_t fail(dipu_store_reply *r, int32_t status, const char *msg) {
  dipu_store_reply_error(r, msg);
  return status;
}

static int32_t cb_set(void *ctx, const char *key, const void *v, size_t len,
                      dipu_store_reply *r) {
  table *t = ctx;
  if (strlen(key) >= KEY || len > VAL) return fail(r, DIPU_STATUS_INVALID_ARGUMENT, "too big");
  pthread_mutex_lock(&t->lock);
  int i = find(t, key);
  for (int j = 0; i < 0 && j < SLOTS; j++)
    if (!t->used[j]) i = j;
  if (i < 0) {
    pthread_mutex_unlock(&t->lock);
    return fail(r, DIPU_STATUS_OUT_OF_MEMORY, "table full");
  }
  t->used[i] = 1;
  strcpy(t->key[i], key);
  if (len) memcpy(t->val[i], v, len);
  t->len[i] = len;
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
  return 0;
}

/* Waits (lock held) until every key is set or `ms` pass (-1: forever). */
static int wait_keys(table *t, const char *const *keys, size_t n, int64_t ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  if (ms > 0) {
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000L;
    }
  }
  for (;;) {
    size_t have = 0;
    while (have < n && find(t, keys[have]) >= 0) have++;
    if (have == n) return 1;
    if (ms < 0) {
      pthread_cond_wait(&t->changed, &t->lock);
    } else if (pthread_cond_timedwait(&t->changed, &t->lock, &until) != 0) {
      return 0;
    }
  }
}

static int32_t cb_get(void *ctx, const char *key, int64_t ms, dipu_store_reply *r) {
  table *t = ctx;
  if (t->fail_get) return fail(r, DIPU_STATUS_TIMEOUT, "the framework's store timed out");
  pthread_mutex_lock(&t->lock);
  int ok = wait_keys(t, &key, 1, ms);
  int32_t status = 0;
  if (ok) {
    int i = find(t, key);
    dipu_store_reply_value(r, t->val[i], t->len[i]);
  } else {
    status = fail(r, DIPU_STATUS_TIMEOUT, "key not set in time");
  }
  pthread_mutex_unlock(&t->lock);
  return status;
}

static int32_t cb_add(void *ctx, const char *key, int64_t delta, int64_t *out,
                      dipu_store_reply *r) {
  table *t = ctx;
  char digits[32] = "0";
  pthread_mutex_lock(&t->lock);
  int i = find(t, key);
  if (i >= 0) {
    memcpy(digits, t->val[i], t->len[i] < 31 ? t->len[i] : 31);
    digits[t->len[i] < 31 ? t->len[i] : 31] = 0;
  }
  pthread_mutex_unlock(&t->lock);
  *out = strtoll(digits, NULL, 10) + delta; /* racy across adders: unused by the group */
  snprintf(digits, sizeof digits, "%lld", (long long)*out);
  return cb_set(ctx, key, digits, strlen(digits), r);
}

static int32_t cb_check(void *ctx, const char *const *keys, size_t n, int32_t *out,
                        dipu_store_reply *r) {
  table *t = ctx;
  (void)r;
  pthread_mutex_lock(&t->lock);
  *out = wait_keys(t, keys, n, 0);
  pthread_mutex_unlock(&t->lock);
  return 0;
}

static int32_t cb_wait(void *ctx, const char *const *keys, size_t n, int64_t ms,
                       dipu_store_reply *r) {
  table *t = ctx;
  pthread_mutex_lock(&t->lock);
  int ok = wait_keys(t, keys, n, ms);
  pthread_mutex_unlock(&t->lock);
  return ok ? 0 : fail(r, DIPU_STATUS_TIMEOUT, "keys not set in time");
}

static int32_t cb_delete(void *ctx, const char *key, int32_t *out, dipu_store_reply *r) {
  table *t = ctx;
  (void)r;
  pthread_mutex_lock(&t->lock);
  int i = find(t, key);
  if (i >= 0) t->used[i] = 0;
  *out = i >= 0;
  pthread_mutex_unlock(&t->lock);
  return 0;
}

static int32_t cb_num_keys(void *ctx, int64_t *out, dipu_store_reply *r) {
  table *t = ctx;
  (void)r;
  pthread_mutex_lock(&t->lock);
  *out = 0;
  for (int i = 0; i < SLOTS; i++) *out += t->used[i];
  pthread_mutex_unlock(&t->lock);
  return 0;
}

static dipu_store *make_store(table *t, int64_t timeout_ms) {
  dipu_store_callbacks c;
  memset(&c, 0, sizeof c);
  c.ctx = t;
  c.set = cb_set;
  c.get = cb_get;
  c.add = cb_add;
  c.check = cb_check;
  c.wait = cb_wait;
  c.delete_key = cb_delete;
  c.num_keys = cb_num_keys;
  dipu_store *s;
  CHECK(dipu_store_callback_create(&c, timeout_ms, &s));
  return s;
}

static table shared = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, {{0}}, {{0}}, {0}, 0};
static dipu_store *store;
static dipu_process_group *groups[2];

static void *rank_main(void *arg) {
  int rank = (int)(intptr_t)arg;
  dipu_stream s;
  dipu_work *w;
  CHECK(dipu_device_set(rank));
  CHECK(dipu_stream_current(rank, &s));
  CHECK(dipu_process_group_create(store, rank, 2, rank, 20000, 0, &groups[rank]));
  dipu_process_group *pg = groups[rank];

  /* bool: rank 0 has i%2, rank 1 has i%3==0; SUM is "or". */
  unsigned char flags[N], got_flags[N];
  for (int i = 0; i < N; i++) flags[i] = rank == 0 ? (i % 2) : (i % 3 == 0);
  void *dev;
  CHECK(dipu_malloc(N * 8, s, &dev));
  CHECK(dipu_memcpy_async(dev, flags, N, DIPU_COPY_HOST_TO_DEVICE, s));
  CHECK(dipu_process_group_all_reduce(pg, dev, N, DIPU_DTYPE_BOOL, DIPU_REDUCE_SUM, &w));
  CHECK(dipu_work_wait_host(w, 0));
  CHECK(dipu_work_destroy(w));
  CHECK(dipu_memcpy_async(got_flags, dev, N, DIPU_COPY_DEVICE_TO_HOST, s));
  CHECK(dipu_stream_synchronize(s));
  for (int i = 0; i < N; i++) EXPECT(got_flags[i] == ((i % 2) || (i % 3 == 0)));
  EXPECT(dipu_process_group_all_reduce(pg, dev, N, DIPU_DTYPE_BOOL, DIPU_REDUCE_AVG, &w) ==
         DIPU_STATUS_UNSUPPORTED);
  EXPECT(strstr(dipu_last_error_message(), "bool") != NULL);

  /* complex64: N/2 values (re, im) = (i + rank, -i); the sum's parts add. */
  float z[N], got_z[N];
  for (int i = 0; i < N / 2; i++) {
    z[2 * i] = (float)(i + rank);
    z[2 * i + 1] = -(float)i;
  }
  CHECK(dipu_memcpy_async(dev, z, sizeof z, DIPU_COPY_HOST_TO_DEVICE, s));
  CHECK(dipu_process_group_all_reduce(pg, dev, N / 2, DIPU_DTYPE_C64, DIPU_REDUCE_SUM, &w));
  CHECK(dipu_work_wait_host(w, 0));
  CHECK(dipu_work_destroy(w));
  CHECK(dipu_memcpy_async(got_z, dev, sizeof z, DIPU_COPY_DEVICE_TO_HOST, s));
  CHECK(dipu_stream_synchronize(s));
  for (int i = 0; i < N / 2; i++) {
    EXPECT(got_z[2 * i] == (float)(2 * i + 1));
    EXPECT(got_z[2 * i + 1] == -(float)(2 * i));
  }
  EXPECT(dipu_process_group_all_reduce(pg, dev, N / 2, DIPU_DTYPE_C64, DIPU_REDUCE_MAX, &w) ==
         DIPU_STATUS_UNSUPPORTED);
  EXPECT(strstr(dipu_last_error_message(), "complex64") != NULL);

  /* Abort: rank 0 starts an all-reduce rank 1 never joins, and aborts it. */
  if (rank == 0) {
    CHECK(dipu_process_group_all_reduce(pg, dev, N, DIPU_DTYPE_F32, DIPU_REDUCE_SUM, &w));
    int32_t done = 1;
    CHECK(dipu_work_is_completed(w, &done));
    EXPECT(done == 0); /* blocked: rank 1 never comes */
    CHECK(dipu_process_group_abort(pg, "the test gave up"));
    dipu_status st = dipu_work_wait_host(w, 0);
    EXPECT(st != DIPU_OK);
    EXPECT(strstr(dipu_last_error_message(), "the test gave up") != NULL);
    CHECK(dipu_work_destroy(w));
    st = dipu_process_group_all_reduce(pg, dev, N, DIPU_DTYPE_F32, DIPU_REDUCE_SUM, &w);
    EXPECT(st != DIPU_OK);
    EXPECT(strstr(dipu_last_error_message(), "aborted") != NULL);
    EXPECT(dipu_process_group_barrier(pg) != DIPU_OK);
  }
  CHECK(dipu_free(dev));
  return NULL;
}

int main(void) {
  dipu_options opts;
  memset(&opts, 0, sizeof opts);
  opts.vendor = "host";
  CHECK(dipu_init(&opts));
  store = make_store(&shared, 10000);
  pthread_t threads[2];
  for (intptr_t r = 0; r < 2; r++) pthread_create(&threads[r], NULL, rank_main, (void *)r);
  for (int r = 0; r < 2; r++) pthread_join(threads[r], NULL);
  for (int r = 0; r < 2; r++) CHECK(dipu_process_group_destroy(groups[r]));
  EXPECT(dipu_process_group_abort(groups[0], NULL) == DIPU_STATUS_INVALID_ARGUMENT);
  CHECK(dipu_store_destroy(store));

  /* A store whose get fails: the group's first collective (which reads
   * the communicator id as rank 1) fails with that error. */
  static table broken = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, {{0}}, {{0}}, {0}, 1};
  dipu_store *bad = make_store(&broken, 500);
  dipu_process_group *pg;
  dipu_stream s;
  void *dev;
  dipu_work *w;
  CHECK(dipu_stream_current(1, &s));
  CHECK(dipu_malloc(64, s, &dev));
  CHECK(dipu_process_group_create(bad, 1, 2, 1, 5000, 0, &pg));
  dipu_status st = dipu_process_group_all_reduce(pg, dev, 16, DIPU_DTYPE_F32, DIPU_REDUCE_SUM, &w);
  EXPECT(st == DIPU_STATUS_TIMEOUT);
  EXPECT(strstr(dipu_last_error_message(), "the framework's store timed out") != NULL);
  CHECK(dipu_free(dev));
  CHECK(dipu_process_group_destroy(pg));
  CHECK(dipu_store_destroy(bad));
  CHECK(dipu_shutdown(NULL));
  printf("callback store ok\n");
  return 0;
}
