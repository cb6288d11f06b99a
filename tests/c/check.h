/* Helpers shared by the C tests: checks that count failures, and a scratch directory. */
#ifndef FENCELOCK_TEST_CHECK_H
#define FENCELOCK_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fencelock.h"

static int check_failures = 0;
static int check_count = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        check_count++;                                                           \
        if (!(cond)) {                                                           \
            check_failures++;                                                    \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)

/* Checks that `call` returned `expected`, printing the error message otherwise. The error
   object, if any, is freed. */
#define CHECK_STATUS(expected, call)                                             \
    do {                                                                         \
        fencelock_error *check_err_ = NULL;                                      \
        fencelock_status check_got_ = (call);                                    \
        check_count++;                                                           \
        if (check_got_ != (expected)) {                                          \
            check_failures++;                                                    \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d: %s\n",     \
                    __FILE__, __LINE__, #call, (int)check_got_,                  \
                    fencelock_status_str(check_got_), (int)(expected),           \
                    check_err_ ? fencelock_error_message(check_err_) : "(no error object)"); \
        }                                                                        \
        fencelock_error_free(check_err_);                                        \
    } while (0)

/* In CHECK_STATUS calls, pass ERR as the err_out argument. */
#define ERR (&check_err_)

/* A fresh scratch directory and the store path inside it. */
typedef struct scratch {
    char dir[64];
    char path[128];
} scratch;

static inline void scratch_make(scratch *s) {
    strcpy(s->dir, "/tmp/fencelock-c-XXXXXX");
    if (mkdtemp(s->dir) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
    snprintf(s->path, sizeof s->path, "%s/locks.db", s->dir);
}

/* Removes the scratch directory and what the tests put in it. */
static inline void scratch_remove(const scratch *s) {
    char command[160];
    snprintf(command, sizeof command, "rm -rf '%s'", s->dir);
    if (system(command) != 0) {
        fprintf(stderr, "could not remove %s\n", s->dir);
    }
}

/* Starts counting afresh, in a forked child that reports on its own. */
static inline void check_reset(void) {
    check_count = 0;
    check_failures = 0;
}

/* Prints the summary line and gives the exit status. */
static inline int check_report(const char *program) {
    printf("%s: %d checks, %d failed\n", program, check_count, check_failures);
    fflush(stdout); /* a forked child ends with _exit(), which does not flush */
    return check_failures == 0 ? 0 : 1;
}

#endif
