/* Shared helpers for unit tests (cmocka). */
#ifndef KITE_TEST_UTIL_H
#define KITE_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

/* Path of a file under KITE_TEST_DATA (default ../shared, relative to the source tree). */
static inline const char *kite_test_data(const char *rel) {
    static char buf[8][4096];
    static int slot;
    const char *root = getenv("KITE_TEST_DATA");
    if (!root || !*root) root = "../shared";
    char *out = buf[slot++ & 7];
    snprintf(out, 4096, "%s/%s", root, rel);
    return out;
}

#endif
