/* Copies a buffer to the device and back on a pooled stream. */
#include <stdio.h>
#include <string.h>

#include <dipu_runtime.h>

/* Prints the failed call and the thread's last error message. */
static int fail(const char *what, dipu_status status) {
  fprintf(stderr, "%s failed: %s: %s\n", what, dipu_status_str(status),
          dipu_last_error_message());
  return 1;
}

int main(void) {
  const char message[] = "hello, device";
  char back[sizeof message] = {0};
  dipu_stream stream;
  dipu_event *done = NULL;
  void *dev = NULL;
  dipu_shutdown_report report;
  dipu_status st;

  printf("dipu_runtime %s\n", dipu_version());
  if ((st = dipu_init(NULL)) != DIPU_OK) return fail("dipu_init", st);
  if ((st = dipu_stream_from_pool(0, 0, &stream)) != DIPU_OK)
    return fail("dipu_stream_from_pool", st);
  if ((st = dipu_malloc(sizeof message, stream, &dev)) != DIPU_OK)
    return fail("dipu_malloc", st);
  if ((st = dipu_event_create(0, &done)) != DIPU_OK)
    return fail("dipu_event_create", st);

  /* Queue both copies, mark the end with an event, wait for it. */
  st = dipu_memcpy_async(dev, message, sizeof message, DIPU_COPY_HOST_TO_DEVICE, stream);
  if (st == DIPU_OK)
    st = dipu_memcpy_async(back, dev, sizeof message, DIPU_COPY_DEVICE_TO_HOST, stream);
  if (st == DIPU_OK) st = dipu_event_record(done, stream);
  if (st == DIPU_OK) st = dipu_event_synchronize(done);
  if (st != DIPU_OK) return fail("copy", st);
  printf("back from the device: %s\n", back);

  /* A bad call fails with a status and a message, never a crash. */
  st = dipu_free(back);
  printf("dipu_free(host pointer): %s: %s\n", dipu_status_str(st),
         dipu_last_error_message());

  dipu_event_destroy(done);
  dipu_free(dev);
  if ((st = dipu_shutdown(&report)) != DIPU_OK) return fail("dipu_shutdown", st);
  return strcmp(message, back) == 0 && report.clean ? 0 : 1;
}
