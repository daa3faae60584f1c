/* check.h - the tiny assertion kit every C test uses.
 * CHECK(cond, fmt, ...) records a failure and goes on; a test's main returns
 * check_report(), which prints a summary line and is nonzero when anything failed. */
#ifndef CHATFS_CHECK_H
#define CHATFS_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failures, check_count;

#define CHECK_AS(ok, text, ...)                                                 \
    do {                                                                        \
        check_count++;                                                          \
        if (!(ok)) {                                                            \
            check_failures++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, text);      \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

#define CHECK(cond, ...) CHECK_AS(cond, #cond, __VA_ARGS__)

/* a fatal check: stop the test when the rest cannot run */
#define REQUIRE(cond, ...)                                                      \
    do {                                                                        \
        int require_ok_ = (cond) ? 1 : 0; /* evaluated once */                 \
        CHECK_AS(require_ok_, #cond, __VA_ARGS__);                              \
        if (!require_ok_) exit(check_report_fatal(__FILE__));                   \
    } while (0)

static inline int check_report_fatal(const char *file) {
    fprintf(stderr, "%s: stopped after a fatal failure (%d of %d checks failed)\n", file, check_failures,
            check_count);
    return 1;
}

static inline int check_report(const char *name) {
    printf("%-28s %s (%d checks, %d failed)\n", name, check_failures ? "FAIL" : "ok", check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
