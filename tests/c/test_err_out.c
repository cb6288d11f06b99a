/* One error variable reused across calls: a call that fails while *err_out holds an error
   object frees that object before writing its own, and a call that succeeds leaves it as it
   was. Under valgrind (make test-c) a leaked error object fails the run; without valgrind, the
   heap's growth over many reused failures is checked (glibc's mallinfo2). */
#include <malloc.h>
#include <stdint.h>

#include "check.h"

static const uint8_t KEY[] = "payments/today.csv";
#define KEY_LEN (sizeof KEY - 1)
#define ROUNDS 2000

/* Bytes the C heap holds in use now. */
static size_t heap_in_use(void) {
    return mallinfo2().uordblks;
}

int main(void) {
    scratch s;
    scratch_make(&s);
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(s.path, &store, ERR));
    fencelock_holder *a = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "payment-export", 60000, &a, ERR));
    uint64_t n = fencelock_holder_token(a);
    fencelock_holder *b = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "other-lock", 60000, &b, ERR));
    uint64_t n1 = fencelock_holder_token(b);
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(b, KEY, KEY_LEN, (const uint8_t *)"B", 1, ERR));

    fencelock_error *err = NULL;
    fencelock_holder *untouched = NULL;

    /* First failure: the lock is held. */
    CHECK(fencelock_store_acquire(store, "payment-export", 1000, &untouched, &err) == FENCELOCK_LOCKED);
    CHECK(err != NULL && fencelock_error_status(err) == FENCELOCK_LOCKED);
    CHECK(fencelock_error_token(err) == n);
    const fencelock_error *first = err;

    /* A success leaves the error of the earlier failure in place. */
    uint64_t fence = 0;
    CHECK(fencelock_store_fence_token(store, "nothing-fenced", &fence, &err) == FENCELOCK_OK);
    CHECK(err == first && fencelock_error_status(err) == FENCELOCK_LOCKED);

    /* Second failure with the same variable: the old object is freed, the new one written. */
    CHECK(fencelock_store_put(store, KEY, KEY_LEN, (const uint8_t *)"A", 1, n, &err) == FENCELOCK_STALE_TOKEN);
    CHECK(err != NULL && fencelock_error_status(err) == FENCELOCK_STALE_TOKEN);
    CHECK(fencelock_error_token(err) == n && fencelock_error_highest(err) == n1);

    /* Many failures through one variable do not pile up on the heap. */
    size_t before = heap_in_use();
    for (int i = 0; i < ROUNDS; i++) {
        fencelock_status status = (i % 2)
            ? fencelock_store_acquire(store, "payment-export", 1000, &untouched, &err)
            : fencelock_store_put(store, KEY, KEY_LEN, (const uint8_t *)"A", 1, n, &err);
        CHECK(status == ((i % 2) ? FENCELOCK_LOCKED : FENCELOCK_STALE_TOKEN));
    }
    size_t after = heap_in_use();
    /* An error object with its message takes over 64 bytes, so leaking each would grow the
       heap by more than ROUNDS * 64; a quarter of that leaves room for the engine's own
       allocations. */
    CHECK(after < before + (size_t)ROUNDS * 64 / 4);
    CHECK(untouched == NULL);
    CHECK(fencelock_error_status(err) == FENCELOCK_LOCKED);

    /* A NULL err_out is still allowed and writes nothing. */
    CHECK(fencelock_store_acquire(store, "payment-export", 1000, &untouched, NULL) == FENCELOCK_LOCKED);
    CHECK(fencelock_error_status(err) == FENCELOCK_LOCKED);

    fencelock_error_free(err); /* the last one: one free at the end */
    fencelock_holder_free(b);
    fencelock_holder_free(a);
    fencelock_store_close(store);
    scratch_remove(&s);
    return check_report("test_err_out");
}
