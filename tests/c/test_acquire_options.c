/* Every acquire through one entry point, fencelock_store_acquire_opts, with a size-tagged
   fencelock_acquire_options: each option, the refusal of a wrong size, of fields a newer header
   set, and of combinations no grant can be, each with its outputs left untouched. Runs under
   valgrind with zero errors and zero leaks. */
#include <stdint.h>

#include "check.h"

static fencelock_acquire_options options_of(uint64_t ttl_ms) {
    fencelock_acquire_options options;
    memset(&options, 0, sizeof options);
    options.size = sizeof options;
    options.ttl_ms = ttl_ms;
    return options;
}

static fencelock_status acquire(const fencelock_store *store, const char *name,
                                const fencelock_acquire_options *options,
                                fencelock_holder **holder, fencelock_error **err) {
    return fencelock_store_acquire_opts(store, &name, 1, options, holder, err);
}

/* `other` is a second open of the store, as another process's: a wait of this thread for its
   own lease through one store would be refused as FENCELOCK_WOULD_DEADLOCK. */
static void one_lock(const fencelock_store *store, const fencelock_store *other) {
    fencelock_acquire_options options = options_of(60000);
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, acquire(other, "job", &options, &holder, ERR));
    CHECK(holder != NULL && fencelock_holder_kind(holder) == FENCELOCK_KIND_EXCLUSIVE);

    /* Tried once: LOCKED, naming the holder's token; waited for: TIMEOUT. */
    fencelock_holder *untouched = (fencelock_holder *)0x1;
    fencelock_error *err = NULL;
    CHECK(acquire(store, "job", &options, &untouched, &err) == FENCELOCK_LOCKED);
    CHECK(fencelock_error_token(err) == fencelock_holder_token(holder));
    options.flags = FENCELOCK_ACQUIRE_WAIT;
    options.timeout_ms = 20;
    CHECK(acquire(store, "job", &options, &untouched, &err) == FENCELOCK_TIMEOUT);
    fencelock_error_free(err);

    /* A cancel handle fired before the wait ends it at its first look. */
    fencelock_cancel *cancel = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_cancel_new(&cancel, ERR));
    fencelock_cancel_fire(cancel);
    options.cancel = cancel;
    options.timeout_ms = UINT64_MAX;
    CHECK_STATUS(FENCELOCK_CANCELLED, acquire(store, "job", &options, &untouched, ERR));
    fencelock_cancel_free(cancel);
    CHECK(untouched == (fencelock_holder *)0x1);
    fencelock_holder_free(holder);

    /* A write in the grant's transaction, with the new token. */
    fencelock_acquire_options put = options_of(60000);
    put.flags = FENCELOCK_ACQUIRE_PUT | FENCELOCK_ACQUIRE_WAIT;
    put.timeout_ms = 10000;
    put.key = (const uint8_t *)"job/owner";
    put.key_len = 9;
    put.value = (const uint8_t *)"host-a";
    put.value_len = 6;
    CHECK_STATUS(FENCELOCK_OK, acquire(store, "job", &put, &holder, ERR));
    uint8_t *value = NULL;
    size_t value_len = 0;
    uint64_t token = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(store, (const uint8_t *)"job/owner", 9, &value,
                                                   &value_len, &token, ERR));
    CHECK(value_len == 6 && memcmp(value, "host-a", 6) == 0);
    CHECK(token == fencelock_holder_token(holder));
    fencelock_buffer_free(value, value_len);
    fencelock_holder_free(holder);

    /* A semaphore's permits. */
    fencelock_acquire_options permit = options_of(60000);
    permit.kind = FENCELOCK_KIND_SEMAPHORE;
    permit.permits = 2;
    fencelock_holder *a = NULL, *b = NULL;
    CHECK_STATUS(FENCELOCK_OK, acquire(store, "pool", &permit, &a, ERR));
    CHECK_STATUS(FENCELOCK_OK, acquire(store, "pool", &permit, &b, ERR));
    CHECK(fencelock_holder_permits(b) == 2);
    CHECK_STATUS(FENCELOCK_LOCKED, acquire(store, "pool", &permit, &untouched, ERR));
    fencelock_holder_free(a);
    fencelock_holder_free(b);
}

static void several_locks(const fencelock_store *store, const fencelock_store *other) {
    fencelock_acquire_options options = options_of(60000);
    const char *names[] = {"a", "b", "c"};
    fencelock_holder *holders[3] = {NULL, NULL, NULL};
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_opts(other, names, 3, &options, holders, ERR));
    CHECK(fencelock_holder_token(holders[1]) == fencelock_holder_token(holders[0]) + 1);
    /* All or none: b is held, so neither d nor anything else is granted. */
    const char *overlap[] = {"d", "b"};
    fencelock_holder *untouched[2] = {(fencelock_holder *)0x1, (fencelock_holder *)0x1};
    CHECK_STATUS(FENCELOCK_LOCKED,
                 fencelock_store_acquire_opts(store, overlap, 2, &options, untouched, ERR));
    options.flags = FENCELOCK_ACQUIRE_WAIT;
    options.timeout_ms = 20;
    CHECK_STATUS(FENCELOCK_TIMEOUT,
                 fencelock_store_acquire_opts(store, overlap, 2, &options, untouched, ERR));
    CHECK(untouched[0] == (fencelock_holder *)0x1 && untouched[1] == (fencelock_holder *)0x1);
    /* Several names are exclusive and write nothing. */
    options = options_of(60000);
    options.kind = FENCELOCK_KIND_SHARED;
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                 fencelock_store_acquire_opts(store, overlap, 2, &options, untouched, ERR));
    for (int i = 0; i < 3; i++) {
        fencelock_holder_free(holders[i]);
    }
}

/* The options struct of a newer header: this one's fields, then one more. */
typedef struct newer_options {
    fencelock_acquire_options known;
    uint64_t later_field;
} newer_options;

static void sizes_and_refusals(const fencelock_store *store) {
    fencelock_holder *untouched = (fencelock_holder *)0x1;
    fencelock_error *err = NULL;
    fencelock_acquire_options options = options_of(60000);

    /* A wrong size is refused before anything else is read, with a message that says so. */
    options.size = 0;
    CHECK(acquire(store, "sized", &options, &untouched, &err) == FENCELOCK_INVALID_ARGUMENT);
    CHECK(strstr(fencelock_error_message(err), "sizeof(fencelock_acquire_options)") != NULL);
    options.size = sizeof options - 8;
    CHECK(acquire(store, "sized", &options, &untouched, &err) == FENCELOCK_INVALID_ARGUMENT);
    options.size = (size_t)-1;
    CHECK(acquire(store, "sized", &options, &untouched, &err) == FENCELOCK_INVALID_ARGUMENT);
    fencelock_error_free(err);
    err = NULL;

    /* A newer header's struct: accepted while its new field is zero, refused once it is set. */
    newer_options newer;
    memset(&newer, 0, sizeof newer);
    newer.known = options_of(60000);
    newer.known.size = sizeof newer;
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, acquire(store, "sized", &newer.known, &holder, ERR));
    fencelock_holder_free(holder);
    newer.later_field = 1;
    CHECK(acquire(store, "sized", &newer.known, &untouched, &err) == FENCELOCK_INVALID_ARGUMENT);
    CHECK(strstr(fencelock_error_message(err), "does not know") != NULL);
    fencelock_error_free(err);

    /* Combinations no grant can be. */
    options = options_of(60000);
    options.flags = 1u << 20;
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, acquire(store, "x", &options, &untouched, ERR));
    options = options_of(60000);
    options.timeout_ms = 10; /* without FENCELOCK_ACQUIRE_WAIT */
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, acquire(store, "x", &options, &untouched, ERR));
    options = options_of(60000);
    options.permits = 3; /* an exclusive lock has no permits */
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, acquire(store, "x", &options, &untouched, ERR));
    options = options_of(60000);
    options.key = (const uint8_t *)"k"; /* without FENCELOCK_ACQUIRE_PUT */
    options.key_len = 1;
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, acquire(store, "x", &options, &untouched, ERR));
    options.flags = FENCELOCK_ACQUIRE_PUT;
    options.kind = FENCELOCK_KIND_SHARED; /* only an exclusive grant writes */
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, acquire(store, "x", &options, &untouched, ERR));
    options = options_of(0);
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, acquire(store, "x", &options, &untouched, ERR));

    /* NULL pointers. */
    options = options_of(60000);
    const char *name = "x";
    CHECK_STATUS(FENCELOCK_NULL_POINTER,
                 fencelock_store_acquire_opts(NULL, &name, 1, &options, &untouched, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER,
                 fencelock_store_acquire_opts(store, NULL, 1, &options, &untouched, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER,
                 fencelock_store_acquire_opts(store, &name, 1, NULL, &untouched, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER,
                 fencelock_store_acquire_opts(store, &name, 1, &options, NULL, ERR));
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                 fencelock_store_acquire_opts(store, &name, 0, &options, &untouched, ERR));
    CHECK(untouched == (fencelock_holder *)0x1);

    /* Nothing refused above granted anything. */
    fencelock_lock_list *locks = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_locks(store, &locks, ERR));
    CHECK(fencelock_lock_list_len(locks) == 1); /* "sized", granted and released */
    fencelock_lock_list_free(locks);
}

int main(void) {
    scratch s;
    scratch_make(&s);
    fencelock_store *store = NULL, *other = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(s.path, &store, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(s.path, &other, ERR));
    sizes_and_refusals(store);
    one_lock(store, other);
    several_locks(store, other);
    fencelock_store_close(other);
    fencelock_store_close(store);
    scratch_remove(&s);
    return check_report("test_acquire_options");
}
