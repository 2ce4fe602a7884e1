/* One rank of a two-process job (the test starts both with RANK,
 * WORLD_SIZE, MASTER_ADDR and MASTER_PORT): the ranks meet through a TCP
 * store (rank 0 hosts it), use the store, then run collectives on device 0
 * of their own runtime, on the vendor DIPU_VENDOR names (the host vendor
 * when unset; the test also runs it on each fake vendor library): all-reduce
 * SUM (waited on the host)
 * and AVG (waited on the stream), broadcast, all-gather, send/recv, a
 * barrier, bad input, and a receive that times out. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { N = 4096 };

/* EXPECT that `call` fails with `status` and leaves a message naming `what`. */
#define EXPECT_FAIL(call, status, what)                                       \
  do {                                                                        \
    dipu_status expect_status_ = (call);                                      \
    if (expect_status_ != (status) ||                                         \
        strstr(dipu_last_error_message(), (what)) == NULL) {                  \
      fprintf(stderr, "%s:%d: %s returned %s (%d): \"%s\"; expected %s with " \
              "\"%s\"\n", __FILE__, __LINE__, #call,                          \
              dipu_status_str((int32_t)expect_status_), (int)expect_status_, \
              dipu_last_error_message(), #status, (what));                    \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static int env_int(const char *name) {
  const char *v = getenv(name);
  if (v == NULL) {
    fprintf(stderr, "%s is not set: the test runner sets it\n", name);
    exit(2);
  }
  return atoi(v);
}

/* host[i] = rank-dependent values, exact in float. */
static float value(int rank, int i) { return (float)(i % 1000) + 0.5f * (float)rank; }

/* Copies `n` floats to the device on `s` and waits. */
static void upload(void *dev, const float *host, size_t n, dipu_stream s) {
  CHECK(dipu_memcpy_async(dev, host, n * sizeof(float), DIPU_COPY_HOST_TO_DEVICE, s));
  CHECK(dipu_stream_synchronize(s));
}

/* Copies `n` floats back from the device on `s` and waits. */
static void download(float *host, const void *dev, size_t n, dipu_stream s) {
  CHECK(dipu_memcpy_async(host, dev, n * sizeof(float), DIPU_COPY_DEVICE_TO_HOST, s));
  CHECK(dipu_stream_synchronize(s));
}

static void store_checks(dipu_store *store, int rank, int world) {
  char key[32], value_buf[32], got[32], small[4];
  const char *keys[2] = {"hello/0", "hello/1"};
  size_t needed = 0;
  int64_t n = 0;
  int all = 0, deleted = -1;

  snprintf(key, sizeof key, "hello/%d", rank);
  snprintf(value_buf, sizeof value_buf, "from rank %d", rank);
  CHECK(dipu_store_set(store, key, value_buf, strlen(value_buf)));
  CHECK(dipu_store_wait(store, keys, 2, 10000));
  CHECK(dipu_store_check(store, keys, 2, &all));
  EXPECT(all == 1);

  /* The other rank's value: a short buffer is an error that still reports
   * the size and leaves the buffer alone. */
  snprintf(key, sizeof key, "hello/%d", 1 - rank);
  memset(small, 'x', sizeof small);
  EXPECT_FAIL(dipu_store_get(store, key, small, sizeof small, &needed),
              DIPU_STATUS_INVALID_ARGUMENT, "too small");
  EXPECT(needed == strlen("from rank 0") && small[0] == 'x');
  CHECK(dipu_store_get(store, key, got, sizeof got, &needed));
  got[needed] = '\0';
  snprintf(value_buf, sizeof value_buf, "from rank %d", 1 - rank);
  EXPECT(strcmp(got, value_buf) == 0);

  CHECK(dipu_store_add(store, "arrived", 1, &n));
  EXPECT(n >= 1 && n <= world);
  /* Both try to become the leader; exactly one wins and both see it. */
  snprintf(value_buf, sizeof value_buf, "rank %d", rank);
  CHECK(dipu_store_compare_set(store, "leader", NULL, 0, value_buf, strlen(value_buf),
                               got, sizeof got, &needed));
  EXPECT(needed == 6 && (memcmp(got, "rank 0", 6) == 0 || memcmp(got, "rank 1", 6) == 0));
  CHECK(dipu_store_num_keys(store, &n));
  EXPECT(n >= 4);
  CHECK(dipu_store_delete_key(store, "no such key", &deleted));
  EXPECT(deleted == 0);
  EXPECT_FAIL(dipu_store_wait(store, (const char *const[]){"never set"}, 1, 50),
              DIPU_STATUS_TIMEOUT, "never set");
}

int main(void) {
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  const int port = env_int("MASTER_PORT");
  const char *addr = getenv("MASTER_ADDR");
  dipu_options opts;
  dipu_store *tcp = NULL, *store = NULL, *store2 = NULL;
  dipu_process_group *pg = NULL, *pg2 = NULL;
  dipu_work *w = NULL, *w2 = NULL;
  dipu_stream s;
  dipu_shutdown_report report;
  float *host = NULL, *gathered = NULL;
  void *dev = NULL, *tmp = NULL, *outs[2] = {NULL, NULL};
  uint16_t got_port = 0;
  int32_t got = -1;
  int done = 0, i;
  float ms = -1.0f;
  char what[256], vendor[64];
  size_t needed = 0;

  EXPECT(world == 2 && (rank == 0 || rank == 1) && addr != NULL);
  memset(&opts, 0, sizeof opts);
  opts.vendor = NULL; /* DIPU_VENDOR, else the host vendor */
  CHECK(dipu_init(&opts));

  /* Rendezvous: rank 0 hosts the server; both wait for each other. */
  CHECK(dipu_store_tcp_create(addr, (uint16_t)port, rank == 0, (size_t)world, 10000, &tcp));
  CHECK(dipu_store_tcp_port(tcp, &got_port));
  EXPECT(got_port == port);
  CHECK(dipu_store_prefix_create("c_test", tcp, &store));
  store_checks(store, rank, world);

  CHECK(dipu_process_group_create(store, rank, world, 0, 20000, 0, &pg));
  CHECK(dipu_process_group_rank(pg, &got));
  EXPECT(got == rank);
  CHECK(dipu_process_group_world_size(pg, &got));
  EXPECT(got == world);
  CHECK(dipu_process_group_device(pg, &got));
  EXPECT(got == 0);

  CHECK(dipu_stream_current(0, &s));
  host = (float *)malloc(N * sizeof(float));
  gathered = (float *)malloc(2 * N * sizeof(float));
  EXPECT(host != NULL && gathered != NULL);
  CHECK(dipu_malloc(N * sizeof(float), s, &dev));

  /* SUM, waited on the host. */
  for (i = 0; i < N; i++) host[i] = value(rank, i);
  upload(dev, host, N, s);
  CHECK(dipu_process_group_all_reduce(pg, dev, N, DIPU_DTYPE_F32, DIPU_REDUCE_SUM, &w));
  CHECK(dipu_work_wait_host(w, 0));
  CHECK(dipu_work_is_completed(w, &done));
  EXPECT(done == 1);
  CHECK(dipu_work_duration_ms(w, &ms));
  EXPECT(ms >= 0.0f);
  CHECK(dipu_work_describe(w, what, sizeof what, &needed));
  EXPECT(strstr(what, "all_reduce") != NULL && needed == strlen(what) + 1);
  CHECK(dipu_work_destroy(w));
  download(host, dev, N, s);
  for (i = 0; i < N; i++) EXPECT(host[i] == value(0, i) + value(1, i));

  /* AVG, waited on the stream: the download queued after it sees it. */
  for (i = 0; i < N; i++) host[i] = value(rank, i);
  upload(dev, host, N, s);
  CHECK(dipu_process_group_all_reduce(pg, dev, N, DIPU_DTYPE_F32, DIPU_REDUCE_AVG, &w));
  CHECK(dipu_work_wait(w));
  download(host, dev, N, s);
  for (i = 0; i < N; i++) EXPECT(host[i] == (value(0, i) + value(1, i)) / 2.0f);
  CHECK(dipu_work_destroy(w));

  /* Broadcast from rank 1 into a buffer freed right after the call: the
   * group holds the allocation until the broadcast is done. */
  for (i = 0; i < N; i++) host[i] = rank == 1 ? (float)(3 * i) : -1.0f;
  upload(dev, host, N, s);
  CHECK(dipu_malloc(N * sizeof(float), s, &tmp));
  CHECK(dipu_process_group_broadcast(pg, tmp, N, DIPU_DTYPE_F32, 1, &w2));
  CHECK(dipu_free(tmp));
  CHECK(dipu_process_group_broadcast(pg, dev, N, DIPU_DTYPE_F32, 1, &w));
  CHECK(dipu_work_wait_host(w2, 0));
  CHECK(dipu_work_wait_host(w, 0));
  download(host, dev, N, s);
  for (i = 0; i < N; i++) EXPECT(host[i] == (float)(3 * i));
  CHECK(dipu_work_destroy(w));
  CHECK(dipu_work_destroy(w2));

  /* All-gather of the second half of `dev` (an interior pointer) into two
   * halves of one allocation. */
  for (i = 0; i < N; i++) host[i] = value(rank, i);
  upload(dev, host, N, s);
  CHECK(dipu_malloc(2 * (N / 2) * sizeof(float), s, &tmp));
  outs[0] = tmp;
  outs[1] = (char *)tmp + (N / 2) * sizeof(float);
  CHECK(dipu_process_group_all_gather(pg, outs, NULL, 2, (float *)dev + N / 2, N / 2,
                                      DIPU_DTYPE_F32, &w));
  CHECK(dipu_work_wait_host(w, 0));
  download(gathered, tmp, N, s);
  for (i = 0; i < N; i++) EXPECT(gathered[i] == value(i < N / 2 ? 0 : 1, i % (N / 2) + N / 2));
  CHECK(dipu_work_destroy(w));
  CHECK(dipu_free(tmp));

  /* Send and receive between the two ranks. */
  for (i = 0; i < N; i++) host[i] = rank == 0 ? (float)(7 * i) : 0.0f;
  upload(dev, host, N, s);
  if (rank == 0)
    CHECK(dipu_process_group_send(pg, dev, N, DIPU_DTYPE_F32, 1, 0, &w));
  else
    CHECK(dipu_process_group_recv(pg, dev, N, DIPU_DTYPE_F32, 0, 0, &w));
  CHECK(dipu_work_wait_host(w, 0));
  download(host, dev, N, s);
  for (i = 0; i < N; i++) EXPECT(host[i] == (float)(7 * i));

  /* Bad input fails with a status and a message, writes no out-parameter
   * and launches nothing. */
  w2 = NULL;
  EXPECT_FAIL(dipu_process_group_broadcast(pg, dev, N, DIPU_DTYPE_F32, world, &w2),
              DIPU_STATUS_INVALID_ARGUMENT, "root 2");
  EXPECT_FAIL(dipu_process_group_all_reduce(pg, dev, N, 99, DIPU_REDUCE_SUM, &w2),
              DIPU_STATUS_INVALID_ARGUMENT, "element type");
  EXPECT_FAIL(dipu_process_group_all_reduce(pg, dev, N, DIPU_DTYPE_F32, 42, &w2),
              DIPU_STATUS_INVALID_ARGUMENT, "reduce operator");
  EXPECT_FAIL(dipu_process_group_all_reduce(pg, (float *)dev + 1, N, DIPU_DTYPE_F32,
                                            DIPU_REDUCE_SUM, &w2),
              DIPU_STATUS_INVALID_ARGUMENT, "past the end");
  EXPECT_FAIL(dipu_process_group_all_reduce(pg, dev, N, DIPU_DTYPE_F32, DIPU_REDUCE_SUM, NULL),
              DIPU_STATUS_INVALID_ARGUMENT, "out is NULL");
  EXPECT_FAIL(dipu_process_group_send(pg, dev, N, DIPU_DTYPE_F32, rank, 0, &w2),
              DIPU_STATUS_INVALID_ARGUMENT, "itself");
  EXPECT_FAIL(dipu_process_group_all_gather(pg, outs, NULL, 1, dev, N, DIPU_DTYPE_F32, &w2),
              DIPU_STATUS_INVALID_ARGUMENT, "1 buffers for a group of 2");
  EXPECT_FAIL(dipu_process_group_barrier((dipu_process_group *)host),
              DIPU_STATUS_INVALID_ARGUMENT, "not a live process group");
  EXPECT_FAIL(dipu_process_group_create(store, 2, 2, 0, 0, 0, &pg2),
              DIPU_STATUS_INVALID_ARGUMENT, "rank 2 of world size 2");
  EXPECT_FAIL(dipu_process_group_create(store, 0, 2, 9, 0, 0, &pg2),
              DIPU_STATUS_INVALID_DEVICE, "");
  CHECK(dipu_work_destroy(w));
  EXPECT_FAIL(dipu_work_wait_host(w, 0), DIPU_STATUS_INVALID_ARGUMENT, "not a live work");
  EXPECT_FAIL(dipu_work_destroy(w), DIPU_STATUS_INVALID_ARGUMENT, "not a live work");
  EXPECT(pg2 == NULL && w2 == NULL);

  /* A receive nobody sends to times out on rank 1 (aborting that second
   * group only); both first connect the pair with one send. */
  CHECK(dipu_store_prefix_create("c_test_timeout", tcp, &store2));
  CHECK(dipu_process_group_create(store2, rank, world, 0, 20000, 0, &pg2));
  if (rank == 0)
    CHECK(dipu_process_group_send(pg2, dev, 1, DIPU_DTYPE_F32, 1, 0, &w2));
  else
    CHECK(dipu_process_group_recv(pg2, dev, 1, DIPU_DTYPE_F32, 0, 0, &w2));
  CHECK(dipu_work_wait_host(w2, 0));
  CHECK(dipu_work_destroy(w2));
  if (rank == 1) {
    CHECK(dipu_process_group_recv(pg2, dev, N, DIPU_DTYPE_F32, 0, 0, &w2));
    EXPECT_FAIL(dipu_work_wait_host(w2, 100), DIPU_STATUS_TIMEOUT, "timed out");
    CHECK(dipu_work_is_completed(w2, &done));
    EXPECT(done == 1);
    EXPECT_FAIL(dipu_work_duration_ms(w2, &ms), DIPU_STATUS_TIMEOUT, "recv");
    EXPECT_FAIL(dipu_process_group_barrier(pg2), DIPU_STATUS_TIMEOUT, "aborted");
    CHECK(dipu_work_destroy(w2));
  }

  /* Both are done with the store, then meet one last time. */
  CHECK(dipu_store_delete_key(store, rank == 0 ? "hello/0" : "hello/1", &done));
  EXPECT(done == 1);
  CHECK(dipu_process_group_barrier(pg));

  CHECK(dipu_process_group_destroy(pg2));
  CHECK(dipu_process_group_destroy(pg));
  EXPECT_FAIL(dipu_process_group_destroy(pg), DIPU_STATUS_INVALID_ARGUMENT,
              "not a live process group");
  CHECK(dipu_store_destroy(store2));
  CHECK(dipu_store_destroy(store));
  CHECK(dipu_store_destroy(tcp));
  EXPECT_FAIL(dipu_store_set(tcp, "k", "v", 1), DIPU_STATUS_INVALID_ARGUMENT,
              "not a live store");
  CHECK(dipu_free(dev));
  free(host);
  free(gathered);
  CHECK(dipu_vendor_name(vendor, sizeof vendor, &needed));
  CHECK(dipu_shutdown(&report));
  EXPECT(report.clean == 1);
  printf("allreduce ok: rank %d, vendor %s\n", rank, vendor);
  return 0;
}
