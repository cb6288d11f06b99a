/* Waits made on another thread's behalf: a helper thread waits with a cancel handle that names
   the main thread (fencelock_cancel_set_thread with the main thread's fencelock_thread_self), as
   a binding that keeps its main thread free for signals does. The library judges the wait, and
   records its grant, as the main thread's. */
#include <pthread.h>

#include "check.h"

typedef struct wait_args {
    fencelock_store *store;
    const char *name;
    uint64_t thread; /* 0: the helper's own */
    fencelock_status status;
    uint64_t token; /* of the error, or of the grant */
    fencelock_holder *holder;
} wait_args;

static void *wait_in_helper(void *arg) {
    wait_args *w = arg;
    fencelock_cancel *cancel = NULL;
    fencelock_error *err = NULL;
    if (fencelock_cancel_new(&cancel, NULL) != FENCELOCK_OK ||
        (w->thread != 0 && fencelock_cancel_set_thread(cancel, w->thread, NULL) != FENCELOCK_OK)) {
        w->status = FENCELOCK_PANIC;
        fencelock_cancel_free(cancel);
        return NULL;
    }
    /* A minute: far longer than the test, so that only a refusal ends it in time. */
    w->status = fencelock_store_acquire_wait_cancellable(w->store, w->name, 600000, 60000, cancel,
                                                         &w->holder, &err);
    w->token = w->holder ? fencelock_holder_token(w->holder) : fencelock_error_token(err);
    fencelock_error_free(err);
    fencelock_cancel_free(cancel);
    return NULL;
}

static void *thread_self(void *arg) {
    *(uint64_t *)arg = fencelock_thread_self();
    return NULL;
}

static wait_args run_helper(fencelock_store *store, const char *name, uint64_t thread) {
    wait_args w = {store, name, thread, FENCELOCK_PANIC, 0, NULL};
    pthread_t helper;
    CHECK(pthread_create(&helper, NULL, wait_in_helper, &w) == 0);
    pthread_join(helper, NULL);
    return w;
}

int main(void) {
    uint64_t me = fencelock_thread_self();
    CHECK(me != 0);
    CHECK(fencelock_thread_self() == me);
    uint64_t other = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_self, &other) == 0);
    pthread_join(t, NULL);
    CHECK(other != 0 && other != me);

    fencelock_cancel *cancel = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_cancel_new(&cancel, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_cancel_set_thread(NULL, me, ERR));
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, fencelock_cancel_set_thread(cancel, 0, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_cancel_set_thread(cancel, me, ERR));
    fencelock_cancel_free(cancel);

    scratch sc;
    scratch_make(&sc);
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(sc.path, &store, ERR));

    /* The main thread holds "job": a helper's wait for it on the main thread's behalf could
       only end with the main thread's own lease, and is refused at once. */
    fencelock_holder *job = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "job", 600000, &job, ERR));
    wait_args w = run_helper(store, "job", me);
    CHECK(w.status == FENCELOCK_WOULD_DEADLOCK);
    CHECK(w.token == fencelock_holder_token(job));
    CHECK(w.holder == NULL);

    /* What a helper is granted on the main thread's behalf is the main thread's: the main
       thread's own wait for it is refused, and so is another helper's for the main thread. */
    w = run_helper(store, "report", me);
    CHECK(w.status == FENCELOCK_OK);
    fencelock_holder *report = w.holder;
    fencelock_holder *again = NULL;
    fencelock_error *err = NULL;
    CHECK(fencelock_store_acquire_wait(store, "report", 600000, 60000, &again, &err) ==
          FENCELOCK_WOULD_DEADLOCK);
    CHECK(fencelock_error_token(err) == fencelock_holder_token(report));
    fencelock_error_free(err);
    CHECK(again == NULL);
    w = run_helper(store, "report", me);
    CHECK(w.status == FENCELOCK_WOULD_DEADLOCK);
    fencelock_holder_free(report);

    fencelock_holder_free(job);
    fencelock_store_close(store);
    scratch_remove(&sc);
    return check_report("test_thread_self");
}
