/* Semaphores, shared locks and atomic multi-lock acquires through the C ABI: their rules,
   their errors with outputs left untouched, and a permit held by another process that dies.
   Runs under valgrind with zero errors and zero leaks. */
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>

#include "check.h"

static fencelock_holder *acquire_kind(const fencelock_store *store, const char *name, int kind,
                                      uint32_t permits) {
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK,
                 fencelock_store_acquire_kind(store, name, kind, permits, 60000, &holder, ERR));
    CHECK(holder != NULL);
    return holder;
}

static void semaphores(const fencelock_store *store) {
    fencelock_holder *a = acquire_kind(store, "pool", FENCELOCK_KIND_SEMAPHORE, 2);
    fencelock_holder *b = acquire_kind(store, "pool", FENCELOCK_KIND_SEMAPHORE, 2);
    CHECK(fencelock_holder_token(b) > fencelock_holder_token(a));
    CHECK(fencelock_holder_kind(a) == FENCELOCK_KIND_SEMAPHORE);
    CHECK(fencelock_holder_permits(a) == 2);
    CHECK(fencelock_holder_kind(NULL) == -1 && fencelock_holder_permits(NULL) == 0);

    fencelock_holder *untouched = (fencelock_holder *)0x1;
    fencelock_error *err = NULL;
    CHECK(fencelock_store_acquire_kind(store, "pool", FENCELOCK_KIND_SEMAPHORE, 2, 1000, &untouched,
                                       &err) == FENCELOCK_LOCKED);
    CHECK(untouched == (fencelock_holder *)0x1);
    /* Another count while permits are live: the stored count and the asked one. */
    CHECK(fencelock_store_acquire_kind(store, "pool", FENCELOCK_KIND_SEMAPHORE, 3, 1000, &untouched,
                                       &err) == FENCELOCK_PERMITS_MISMATCH);
    CHECK(fencelock_error_status(err) == FENCELOCK_PERMITS_MISMATCH);
    CHECK(fencelock_error_token(err) == 2 && fencelock_error_highest(err) == 3);
    CHECK(untouched == (fencelock_holder *)0x1);
    CHECK(strcmp(fencelock_status_str(FENCELOCK_PERMITS_MISMATCH), "unknown status") != 0);
    fencelock_error_free(err);

    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, fencelock_store_acquire_kind(
        store, "pool2", FENCELOCK_KIND_SEMAPHORE, 0, 1000, &untouched, ERR));
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, fencelock_store_acquire_kind(
        store, "pool2", FENCELOCK_KIND_SEMAPHORE, FENCELOCK_MAX_HOLDERS + 1, 1000, &untouched, ERR));
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                 fencelock_store_acquire_kind(store, "pool2", 7, 0, 1000, &untouched, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_store_acquire_kind(
        NULL, "pool", FENCELOCK_KIND_SHARED, 0, 1000, &untouched, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_store_acquire_kind(
        store, "pool", FENCELOCK_KIND_SHARED, 0, 1000, NULL, ERR));
    CHECK(untouched == (fencelock_holder *)0x1);

    /* A permit's holder-checked write works as an exclusive holder's. */
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(b, (const uint8_t *)"k", 1,
                                                    (const uint8_t *)"v", 1, ERR));
    CHECK_STATUS(FENCELOCK_STALE_TOKEN, fencelock_holder_put(a, (const uint8_t *)"k", 1,
                                                             (const uint8_t *)"v", 1, ERR));

    /* A waiting acquire gets the place of a permit let go. */
    fencelock_holder_free(a);
    fencelock_holder *c = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_kind_wait(
        store, "pool", FENCELOCK_KIND_SEMAPHORE, 2, 60000, 10000, NULL, &c, ERR));
    CHECK(fencelock_holder_token(c) > fencelock_holder_token(b));
    /* Both permits are this thread's own (b and c): a wait for a third is refused at once,
     * whatever its wait (a short one ran out first under valgrind now and then: TIMEOUT). */
    CHECK_STATUS(FENCELOCK_WOULD_DEADLOCK, fencelock_store_acquire_kind_wait(
        store, "pool", FENCELOCK_KIND_SEMAPHORE, 2, 60000, 60000, NULL, &untouched, ERR));

    /* The lock list has one entry per permit, with its kind and count. */
    fencelock_lock_list *list = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_locks(store, &list, ERR));
    size_t held = 0;
    for (size_t i = 0; i < fencelock_lock_list_len(list); i++) {
        fencelock_lock_info info;
        int kind = -1;
        uint32_t permits = 0;
        CHECK_STATUS(FENCELOCK_OK, fencelock_lock_list_get(list, i, &info));
        CHECK_STATUS(FENCELOCK_OK, fencelock_lock_list_kind(list, i, &kind, &permits));
        if (strcmp(info.name, "pool") == 0 && info.state == FENCELOCK_LOCK_HELD) {
            CHECK(kind == FENCELOCK_KIND_SEMAPHORE && permits == 2);
            held++;
        }
    }
    CHECK(held == 2);
    int kind = 7;
    uint32_t permits = 7;
    CHECK(fencelock_lock_list_kind(list, fencelock_lock_list_len(list), &kind, &permits) ==
          FENCELOCK_INVALID_ARGUMENT);
    CHECK(fencelock_lock_list_kind(list, 0, NULL, &permits) == FENCELOCK_NULL_POINTER);
    CHECK(kind == 7 && permits == 7);
    fencelock_lock_list_free(list);
    fencelock_holder_free(b);
    fencelock_holder_free(c);
}

static void shared_locks(const fencelock_store *store) {
    fencelock_holder *r1 = acquire_kind(store, "config", FENCELOCK_KIND_SHARED, 0);
    fencelock_holder *r2 = acquire_kind(store, "config", FENCELOCK_KIND_SHARED, 0);
    CHECK(fencelock_holder_kind(r2) == FENCELOCK_KIND_SHARED);
    fencelock_holder *untouched = (fencelock_holder *)0x1;
    CHECK_STATUS(FENCELOCK_LOCKED, fencelock_store_acquire(store, "config", 1000, &untouched, ERR));
    CHECK_STATUS(FENCELOCK_LOCKED, fencelock_store_acquire_kind(
        store, "config", FENCELOCK_KIND_EXCLUSIVE, 0, 1000, &untouched, ERR));
    /* A shared holder does not write through its lease. */
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, fencelock_holder_put(r1, (const uint8_t *)"c", 1,
                                                                  (const uint8_t *)"v", 1, ERR));
    fencelock_holder_free(r1);
    fencelock_holder_free(r2);
    fencelock_holder *w = acquire_kind(store, "config", FENCELOCK_KIND_EXCLUSIVE, 0);
    CHECK(fencelock_holder_kind(w) == FENCELOCK_KIND_EXCLUSIVE);
    CHECK_STATUS(FENCELOCK_LOCKED, fencelock_store_acquire_kind(
        store, "config", FENCELOCK_KIND_SHARED, 0, 1000, &untouched, ERR));
    CHECK(untouched == (fencelock_holder *)0x1);
    fencelock_holder_free(w);
}

static void multi_lock(const fencelock_store *store) {
    const char *names[] = {"a", "b", "c"};
    fencelock_holder *holders[3] = {(fencelock_holder *)0x1, (fencelock_holder *)0x1,
                                    (fencelock_holder *)0x1};
    fencelock_holder *b = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "b", 60000, &b, ERR));
    CHECK_STATUS(FENCELOCK_LOCKED,
                 fencelock_store_acquire_all(store, names, 3, 60000, 0, NULL, holders, ERR));
    /* "b" is this thread's own lease: a waiting acquire of all is refused at once, whatever
     * its wait (a short one ran out first under valgrind now and then: TIMEOUT). */
    CHECK_STATUS(FENCELOCK_WOULD_DEADLOCK,
                 fencelock_store_acquire_all(store, names, 3, 60000, 60000, NULL, holders, ERR));
    CHECK(holders[0] == (fencelock_holder *)0x1 && holders[2] == (fencelock_holder *)0x1);
    /* All or none: "a" was not granted. */
    fencelock_holder *a = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "a", 60000, &a, ERR));
    fencelock_holder_free(a);
    fencelock_holder_free(b);

    const char *twice[] = {"a", "a"};
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                 fencelock_store_acquire_all(store, twice, 2, 60000, 0, NULL, holders, ERR));
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                 fencelock_store_acquire_all(store, names, 0, 60000, 0, NULL, holders, ERR));
    /* A count above the limit (SIZE_MAX: a careless `n - 1` of 0) is refused before `names`
       is read: one name and room for one holder, on the heap so that valgrind sees a read or
       write past them. */
    const char **one_name = malloc(sizeof *one_name);
    fencelock_holder **one_holder = malloc(sizeof *one_holder);
    one_name[0] = "a";
    one_holder[0] = (fencelock_holder *)0x1;
    const size_t too_many[] = {SIZE_MAX, (size_t)FENCELOCK_MAX_HOLDERS + 1};
    for (size_t i = 0; i < sizeof too_many / sizeof too_many[0]; i++) {
        for (uint64_t timeout_ms = 0; timeout_ms <= 10; timeout_ms += 10) {
            CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                         fencelock_store_acquire_all(store, one_name, too_many[i], 60000,
                                                     timeout_ms, NULL, one_holder, ERR));
        }
    }
    CHECK(one_holder[0] == (fencelock_holder *)0x1);
    free(one_name);
    free(one_holder);
    const char *with_null[] = {"a", NULL};
    CHECK_STATUS(FENCELOCK_NULL_POINTER,
                 fencelock_store_acquire_all(store, with_null, 2, 60000, 0, NULL, holders, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER,
                 fencelock_store_acquire_all(store, NULL, 2, 60000, 0, NULL, holders, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER,
                 fencelock_store_acquire_all(store, names, 3, 60000, 0, NULL, NULL, ERR));

    CHECK_STATUS(FENCELOCK_OK,
                 fencelock_store_acquire_all(store, names, 3, 60000, 1000, NULL, holders, ERR));
    CHECK(strcmp(fencelock_holder_name(holders[2]), "c") == 0);
    CHECK(fencelock_holder_token(holders[1]) == fencelock_holder_token(holders[0]) + 1);
    CHECK(fencelock_holder_token(holders[2]) == fencelock_holder_token(holders[1]) + 1);
    for (int i = 0; i < 3; i++) {
        fencelock_holder_free(holders[i]);
    }
}

/* A child process holds a permit and is killed: its place is free at once. */
static void a_killed_permit_holder(const char *path) {
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t child = fork();
    if (child == 0) {
        fencelock_store *store = NULL;
        fencelock_holder *holder = NULL;
        if (fencelock_store_open(path, &store, NULL) != FENCELOCK_OK ||
            fencelock_store_acquire_kind(store, "gpu", FENCELOCK_KIND_SEMAPHORE, 1, 600000, &holder,
                                         NULL) != FENCELOCK_OK) {
            _exit(3);
        }
        if (write(ready[1], "x", 1) != 1) {
            _exit(4);
        }
        pause();
        _exit(0);
    }
    char byte;
    CHECK(read(ready[0], &byte, 1) == 1);
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(path, &store, ERR));
    fencelock_holder *mine = (fencelock_holder *)0x1;
    CHECK_STATUS(FENCELOCK_LOCKED, fencelock_store_acquire_kind(
        store, "gpu", FENCELOCK_KIND_SEMAPHORE, 1, 60000, &mine, ERR));
    kill(child, SIGKILL);
    int status;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_kind(
        store, "gpu", FENCELOCK_KIND_SEMAPHORE, 1, 60000, &mine, ERR));
    fencelock_holder_free(mine);
    fencelock_store_close(store);
    close(ready[0]);
    close(ready[1]);
}

int main(void) {
    scratch s;
    scratch_make(&s);
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(s.path, &store, ERR));
    semaphores(store);
    shared_locks(store);
    multi_lock(store);
    fencelock_store_close(store);
    a_killed_permit_holder(s.path);
    scratch_remove(&s);
    return check_report("test_kinds");
}
