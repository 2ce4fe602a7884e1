/* CHECK(call): abort the test program with the status and message when a
 * dipu call fails. Shared by the C and C++ test programs. */
#ifndef DIPU_TEST_CHECK_H
#define DIPU_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include "dipu_runtime.h"

#define CHECK(call)                                                          \
  do {                                                                       \
    dipu_status check_status_ = (call);                                      \
    if (check_status_ != DIPU_OK) {                                          \
      fprintf(stderr, "%s:%d: %s failed: %s (%d): %s\n", __FILE__, __LINE__, \
              #call, dipu_status_str((int32_t)check_status_),                \
              (int)check_status_, dipu_last_error_message());                \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#define EXPECT(cond)                                                         \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);    \
      exit(1);                                                               \
    }                                                                        \
  } while (0)
#endif
