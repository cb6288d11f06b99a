/* The error object names what it concerns: a failed open names the store's path (in the
   message and through fencelock_error_path), a held lock names the lock (in the message and
   through fencelock_error_name), a waiting acquire that times out names the lock and how long
   it waited, and no message carries Rust's "(os error N)": the number is
   fencelock_error_os_code's. */
#include <errno.h>
#include <string.h>

#include "check.h"

static void open_names_the_path(const scratch *s) {
    char path[256];
    snprintf(path, sizeof path, "%s/no/such/dir/locks.db", s->dir);
    fencelock_store *store = NULL;
    fencelock_error *err = NULL;
    CHECK(fencelock_store_open(path, &store, &err) == FENCELOCK_IO);
    const char *message = fencelock_error_message(err);
    CHECK(strstr(message, path) != NULL);
    CHECK(strstr(message, strerror(ENOENT)) != NULL);
    CHECK(strstr(message, "os error") == NULL);
    CHECK(fencelock_error_path(err) != NULL && strcmp(fencelock_error_path(err), path) == 0);
    CHECK(fencelock_error_name(err) == NULL);
    CHECK(fencelock_error_os_code(err) == ENOENT);
    if (strstr(message, path) == NULL || strstr(message, "os error") != NULL) {
        fprintf(stderr, "open of %s: %s\n", path, message);
    }
    fencelock_error_free(err);
}

static void held_lock_names_the_lock(const scratch *s) {
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(s->path, &store, ERR));
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "payment-export", 60000, &holder, ERR));

    fencelock_holder *second = NULL;
    fencelock_error *err = NULL;
    CHECK(fencelock_store_acquire(store, "payment-export", 1000, &second, &err) == FENCELOCK_LOCKED);
    const char *message = fencelock_error_message(err);
    CHECK(strstr(message, "\"payment-export\"") != NULL);
    CHECK(fencelock_error_name(err) != NULL && strcmp(fencelock_error_name(err), "payment-export") == 0);
    CHECK(fencelock_error_path(err) == NULL);
    if (strstr(message, "\"payment-export\"") == NULL) {
        fprintf(stderr, "held lock: %s\n", message);
    }
    fencelock_error_free(err);
    err = NULL;

    /* A waiting acquire that times out names the lock and how long it waited (through another
       open of the store: this one refuses a wait for its own thread's lease at once). */
    fencelock_store *other = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(s->path, &other, ERR));
    fencelock_acquire_options options;
    memset(&options, 0, sizeof options);
    options.size = sizeof options;
    options.ttl_ms = 1000;
    options.flags = FENCELOCK_ACQUIRE_WAIT;
    options.timeout_ms = 20;
    const char *name = "payment-export";
    CHECK(fencelock_store_acquire_opts(other, &name, 1, &options, &second, &err) == FENCELOCK_TIMEOUT);
    message = fencelock_error_message(err);
    CHECK(strncmp(message, "timed out after ", 16) == 0);
    CHECK(strstr(message, "s waiting for lock \"payment-export\"") != NULL);
    CHECK(fencelock_error_name(err) != NULL && strcmp(fencelock_error_name(err), "payment-export") == 0);
    if (strstr(message, "waiting for lock \"payment-export\"") == NULL) {
        fprintf(stderr, "timed-out wait: %s\n", message);
    }
    fencelock_error_free(err);
    fencelock_store_close(other);

    CHECK(fencelock_error_name(NULL) == NULL);
    CHECK(fencelock_error_path(NULL) == NULL);
    fencelock_holder_free(holder);
    fencelock_store_close(store);
}

int main(void) {
    scratch s;
    scratch_make(&s);
    open_names_the_path(&s);
    held_lock_names_the_lock(&s);
    scratch_remove(&s);
    return check_report("test_error_text");
}
