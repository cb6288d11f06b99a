/* Many threads share one store: at most one of them holds the lock at any moment, every
   increment of the fenced counter survives, and a holder is shared by threads writing at once. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

#define THREADS 8
#define ROUNDS 25

static fencelock_store *store;
static atomic_int inside;     /* threads inside the critical section right now */
static atomic_int overlaps;   /* times a thread found another one inside */
static atomic_int failures;   /* calls that did not return OK */

static const uint8_t COUNTER[] = "counter";

static void expect_ok(fencelock_status status, fencelock_error *err, const char *what) {
    if (status != FENCELOCK_OK) {
        atomic_fetch_add(&failures, 1);
        fprintf(stderr, "%s: %s: %s\n", what, fencelock_status_str(status),
                err ? fencelock_error_message(err) : "");
    }
    fencelock_error_free(err);
}

static void *worker(void *arg) {
    (void)arg;
    for (int round = 0; round < ROUNDS; round++) {
        fencelock_holder *holder = NULL;
        fencelock_error *err = NULL;
        /* A long TTL and timeout: the test checks exclusion, never speed. */
        fencelock_status status = fencelock_store_acquire_wait(store, "counter-lock", 600000, 600000, &holder, &err);
        expect_ok(status, err, "acquire_wait");
        if (status != FENCELOCK_OK) {
            continue;
        }
        if (atomic_fetch_add(&inside, 1) != 0) {
            atomic_fetch_add(&overlaps, 1);
        }
        uint64_t count = 0;
        uint8_t *value = NULL;
        size_t len = 0;
        err = NULL;
        status = fencelock_store_get(store, COUNTER, sizeof COUNTER - 1, &value, &len, NULL, &err);
        if (status == FENCELOCK_OK) {
            if (len == sizeof count) {
                memcpy(&count, value, sizeof count);
            }
            fencelock_buffer_free(value, len);
            fencelock_error_free(err);
        } else if (status == FENCELOCK_NOT_FOUND) {
            fencelock_error_free(err);
        } else {
            expect_ok(status, err, "get");
        }
        count++;
        err = NULL;
        expect_ok(fencelock_holder_put(holder, COUNTER, sizeof COUNTER - 1, (const uint8_t *)&count, sizeof count, &err), err, "holder_put");
        atomic_fetch_sub(&inside, 1);
        err = NULL;
        expect_ok(fencelock_holder_release(holder, &err), err, "release");
        fencelock_holder_free(holder);
    }
    return NULL;
}

typedef struct shared_write {
    const fencelock_holder *holder;
    int index;
} shared_write;

static void *shared_writer(void *arg) {
    const shared_write *job = arg;
    char key[32];
    snprintf(key, sizeof key, "shared/%d", job->index);
    for (int i = 0; i < 5; i++) {
        fencelock_error *err = NULL;
        expect_ok(fencelock_holder_put(job->holder, (const uint8_t *)key, strlen(key), (const uint8_t *)&i, sizeof i, &err), err, "shared put");
    }
    return NULL;
}

int main(void) {
    scratch sc;
    scratch_make(&sc);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(sc.path, &store, ERR));

    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_create(&threads[i], NULL, worker, NULL) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
    }
    CHECK(atomic_load(&overlaps) == 0);
    CHECK(atomic_load(&failures) == 0);
    uint8_t *value = NULL;
    size_t len = 0;
    uint64_t count = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(store, COUNTER, sizeof COUNTER - 1, &value, &len, NULL, ERR));
    if (value != NULL && len == sizeof count) {
        memcpy(&count, value, sizeof count);
    }
    fencelock_buffer_free(value, len);
    CHECK(count == THREADS * ROUNDS);

    /* One holder shared by threads that write at once. */
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "shared", 600000, &holder, ERR));
    shared_write jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i].holder = holder;
        jobs[i].index = i;
        CHECK(pthread_create(&threads[i], NULL, shared_writer, &jobs[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
    }
    CHECK(atomic_load(&failures) == 0);
    fencelock_key_list *keys = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_keys(store, (const uint8_t *)"shared/", 7, &keys, ERR));
    CHECK(fencelock_key_list_len(keys) == THREADS);
    fencelock_key_list_free(keys);
    fencelock_holder_free(holder);

    fencelock_store_close(store);
    scratch_remove(&sc);
    printf("test_threads: %d threads x %d rounds, counter %llu\n", THREADS, ROUNDS, (unsigned long long)count);
    return check_report("test_threads");
}
