/* Cancel handles from C: a thread fires the handle while another waits for a held lock; the
   wait ends with FENCELOCK_CANCELLED, writes nothing, and the lock stays with its holder. */
#include <pthread.h>
#include <time.h>

#include "check.h"

static void *fire_later(void *arg) {
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    fencelock_cancel_fire((const fencelock_cancel *)arg);
    return NULL;
}

static uint64_t last_token(fencelock_store *store) {
    /* A fence records the token it is given; reading the counter goes through a fresh grant. */
    fencelock_holder *probe = NULL;
    uint64_t token = 0;
    if (fencelock_store_acquire(store, "probe", 60000, &probe, NULL) == FENCELOCK_OK) {
        token = fencelock_holder_token(probe);
    }
    fencelock_holder_free(probe);
    return token;
}

int main(void) {
    scratch sc;
    scratch_make(&sc);
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(sc.path, &store, ERR));
    /* Held through another open of the store: a wait of this thread for a lease it holds
       through the same store would be refused at once (FENCELOCK_WOULD_DEADLOCK). */
    fencelock_store *owner = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(sc.path, &owner, ERR));
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(owner, "payment-export", 600000, &holder, ERR));
    uint64_t before = last_token(store);

    fencelock_cancel *cancel = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_cancel_new(&cancel, ERR));
    pthread_t firer;
    CHECK(pthread_create(&firer, NULL, fire_later, cancel) == 0);
    fencelock_holder *waiter = NULL;
    CHECK_STATUS(FENCELOCK_CANCELLED,
                 fencelock_store_acquire_wait_cancellable(store, "payment-export", 60000, 600000,
                                                          cancel, &waiter, ERR));
    pthread_join(firer, NULL);
    CHECK(waiter == NULL);
    bool lost = false;
    CHECK_STATUS(FENCELOCK_CANCELLED,
                 fencelock_holder_wait_lost_cancellable(holder, 600000, cancel, &lost, ERR));
    bool held = false;
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_is_held(holder, &held, ERR));
    CHECK(held);
    /* Only the probe's own grant moved the counter: the cancelled wait spent no token. */
    CHECK(last_token(store) == before + 1);
    CHECK(strcmp(fencelock_status_str(FENCELOCK_CANCELLED), "unknown status") != 0);
    CHECK(strcmp(fencelock_status_str(FENCELOCK_REPLACED), "unknown status") != 0);
    fencelock_cancel_free(cancel);
    fencelock_cancel_free(NULL);
    fencelock_cancel_fire(NULL);

    /* Writes with a cancel handle: NULL is the plain call; a deadline far off changes nothing;
       a fired handle refuses at once, writing nothing. */
    fencelock_holder *writer = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_kind_cancellable(
                                   store, "writer", FENCELOCK_KIND_EXCLUSIVE, 0, 60000, NULL,
                                   &writer, ERR));
    uint64_t token = fencelock_holder_token(writer);
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_cancel_set_timeout(NULL, 1000, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_cancel_new(&cancel, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_cancel_set_timeout(cancel, 60000, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_put_cancellable(store, (const uint8_t *)"k", 1,
                                                               (const uint8_t *)"v", 1, token,
                                                               NULL, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put_cancellable(writer, (const uint8_t *)"h", 1,
                                                                (const uint8_t *)"v", 1, cancel,
                                                                ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_extend_cancellable(writer, 60000, cancel, ERR));
    CHECK_STATUS(FENCELOCK_OK,
                 fencelock_store_fence_cancellable(store, "s3://bucket/x", token, cancel, ERR));
    fencelock_cancel_fire(cancel);
    CHECK_STATUS(FENCELOCK_CANCELLED,
                 fencelock_store_put_cancellable(store, (const uint8_t *)"late", 4,
                                                 (const uint8_t *)"v", 1, token, cancel, ERR));
    bool existed = false;
    CHECK_STATUS(FENCELOCK_CANCELLED, fencelock_store_delete_cancellable(
                                          store, (const uint8_t *)"k", 1, token, cancel, &existed,
                                          ERR));
    CHECK_STATUS(FENCELOCK_CANCELLED, fencelock_holder_delete_cancellable(
                                          writer, (const uint8_t *)"h", 1, cancel, &existed, ERR));
    fencelock_holder *late = NULL;
    CHECK_STATUS(FENCELOCK_CANCELLED, fencelock_store_acquire_and_put_cancellable(
                                          store, "late", 60000, (const uint8_t *)"late", 4,
                                          (const uint8_t *)"v", 1, cancel, &late, ERR));
    CHECK(late == NULL);
    uint8_t *value = NULL;
    size_t value_len = 0;
    CHECK_STATUS(FENCELOCK_NOT_FOUND,
                 fencelock_store_get(store, (const uint8_t *)"late", 4, &value, &value_len, NULL, ERR));
    CHECK_STATUS(FENCELOCK_OK,
                 fencelock_store_get(store, (const uint8_t *)"k", 1, &value, &value_len, NULL, ERR));
    fencelock_buffer_free(value, value_len);
    fencelock_cancel_free(cancel);
    fencelock_holder_free(writer);

    fencelock_holder_free(holder);
    fencelock_store_close(owner);
    fencelock_store_close(store);
    scratch_remove(&sc);
    return check_report("test_cancel");
}
