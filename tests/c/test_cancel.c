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

    fencelock_holder_free(holder);
    fencelock_store_close(owner);
    fencelock_store_close(store);
    scratch_remove(&sc);
    return check_report("test_cancel");
}
