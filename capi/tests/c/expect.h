/* The checks of the C API's test programs: a call's status and the message it leaves. */
#ifndef NMSPARSE_TEST_EXPECT_H
#define NMSPARSE_TEST_EXPECT_H

#include <stdio.h>
#include <string.h>

#include "nmsparse.h"

static int failures = 0;

/* `call` must return `expected`, with a message containing `needle`. */
#define EXPECT(call, expected, needle)                                                                 \
    do {                                                                                               \
        nms_status got_ = (call);                                                                      \
        const char *message_ = nms_last_error();                                                       \
        if (got_ != (expected) || strstr(message_, (needle)) == NULL) {                                \
            fprintf(stderr, "line %d: %s\n  returned %s (%d), message \"%s\"; expected %s with \"%s\"\n", \
                    __LINE__, #call, nms_status_str(got_), (int)got_, message_, #expected, (needle));  \
            failures++;                                                                                \
        }                                                                                              \
    } while (0)

#define OK(call) EXPECT(call, NMS_OK, "")

#endif
