/* payment_export.c -- fencelock's seed story in C.
 *
 * Two workers export today's payments to one file. Worker A takes the lock and then stalls
 * (a GC pause, a SIGSTOP, a slow disk) for longer than its lease. Worker B takes the lock over
 * and writes the export. When A wakes up it still believes it holds the lock -- but its writes
 * carry A's older fencing token, so fencelock refuses them and B's export survives.
 *
 * Build and run from the repository root, in one command:
 *
 *     make -C examples/c run
 *
 * or by hand (static link, so no LD_LIBRARY_PATH is needed):
 *
 *     cargo rustc --release --lib --features capi --crate-type staticlib
 *     cc -Wall -Wextra -Iinclude examples/c/payment_export.c target/release/libfencelock.a \
 *        -lpthread -ldl -lm -lrt -lutil -o payment_export && ./payment_export
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* mkdtemp, usleep */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fencelock.h"

/* Prints the failure of a call and exits. Every fallible call returns a status; details come
   in an error object that we must free. */
static void die(const char *what, fencelock_status status, fencelock_error *err) {
    fprintf(stderr, "%s failed: %s (%s)\n", what, fencelock_status_str(status),
            err ? fencelock_error_message(err) : "no details");
    fencelock_error_free(err);
    exit(1);
}

static const uint8_t KEY[] = "payments/today.csv";
#define KEY_LEN (sizeof KEY - 1)

int main(void) {
    char dir[] = "/tmp/fencelock-example-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char path[64];
    snprintf(path, sizeof path, "%s/locks.db", dir);

    /* One store file, shared by every thread and process of this host that opens it. */
    fencelock_store *store = NULL;
    fencelock_error *err = NULL;
    fencelock_status status = fencelock_store_open(path, &store, &err);
    if (status != FENCELOCK_OK) die("open", status, err);
    printf("fencelock %s, store %s\n", fencelock_version(), path);

    /* Worker A takes the lock with a short lease: 300 ms. */
    fencelock_holder *a = NULL;
    status = fencelock_store_acquire(store, "payment-export", 300, &a, &err);
    if (status != FENCELOCK_OK) die("A: acquire", status, err);
    uint64_t token_a = fencelock_holder_token(a);
    printf("A holds \"%s\" with token %llu\n", fencelock_holder_name(a), (unsigned long long)token_a);

    /* Worker B tries at once: the lock is held, and the error says by whom and for how long. */
    fencelock_holder *b = NULL;
    status = fencelock_store_acquire(store, "payment-export", 30000, &b, &err);
    if (status == FENCELOCK_LOCKED) {
        printf("B: locked by pid %u (token %llu) for %llu ms more\n", fencelock_error_pid(err),
               (unsigned long long)fencelock_error_token(err),
               (unsigned long long)fencelock_error_remaining_ms(err));
        fencelock_error_free(err);
        err = NULL;
    } else {
        die("B: first acquire (expected LOCKED)", status, err);
    }

    /* A stalls for longer than its lease... */
    printf("A stalls for 500 ms; its lease runs out\n");
    usleep(500 * 1000);

    /* ...so B waits (up to 10 s) and gets the lock with a higher token. */
    status = fencelock_store_acquire_wait(store, "payment-export", 30000, 10000, &b, &err);
    if (status != FENCELOCK_OK) die("B: acquire_wait", status, err);
    uint64_t token_b = fencelock_holder_token(b);
    printf("B holds the lock with token %llu\n", (unsigned long long)token_b);

    /* B writes the export. A holder write checks, in one transaction, that the lease is still
       B's and that no higher token wrote the key. */
    const char *export_b = "id,amount\n1,100\n2,250\n";
    status = fencelock_holder_put(b, KEY, KEY_LEN, (const uint8_t *)export_b, strlen(export_b), &err);
    if (status != FENCELOCK_OK) die("B: put", status, err);
    printf("B wrote %s\n", (const char *)KEY);

    /* A wakes up and writes its stale export. Both ways are refused. */
    const char *export_a = "id,amount\n1,100\n";
    status = fencelock_holder_put(a, KEY, KEY_LEN, (const uint8_t *)export_a, strlen(export_a), &err);
    printf("A: holder put -> %s: %s\n", fencelock_status_str(status), fencelock_error_message(err));
    if (status != FENCELOCK_LOCK_LOST) die("A: holder put (expected LOCK_LOST)", status, err);
    fencelock_error_free(err);
    err = NULL;
    /* A write fenced by the token alone -- what a process does when only the token travels
       (e.g. to another service). */
    status = fencelock_store_put(store, KEY, KEY_LEN, (const uint8_t *)export_a, strlen(export_a), token_a, &err);
    printf("A: put with token %llu -> %s: %s\n", (unsigned long long)token_a, fencelock_status_str(status),
           fencelock_error_message(err));
    if (status != FENCELOCK_STALE_TOKEN) die("A: put (expected STALE_TOKEN)", status, err);
    fencelock_error_free(err);
    err = NULL;

    /* B's export stands. Returned buffers are freed with fencelock_buffer_free, never free(). */
    uint8_t *value = NULL;
    size_t len = 0;
    uint64_t token = 0;
    status = fencelock_store_get(store, KEY, KEY_LEN, &value, &len, &token, &err);
    if (status != FENCELOCK_OK) die("get", status, err);
    printf("%s (token %llu):\n%.*s", (const char *)KEY, (unsigned long long)token, (int)len, (const char *)value);
    int ok = token == token_b && len == strlen(export_b) && memcmp(value, export_b, len) == 0;
    fencelock_buffer_free(value, len);

    /* Freeing a holder releases its lease if still held; closing NULL would be a no-op. */
    fencelock_holder_free(a);
    fencelock_holder_free(b);
    fencelock_store_close(store);

    char command[96];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    if (system(command) != 0) fprintf(stderr, "could not remove %s\n", dir);
    printf(ok ? "B's export survived A's stale writes.\n" : "UNEXPECTED: the value changed\n");
    return ok ? 0 : 1;
}
