/* Leader election from C: a campaign, the leader, a proclaim told to a blocking watch, fenced
   writes by the term, a second candidate that waits in another thread and leads once the first
   resigns, a watch and a campaign ended by their cancel handle, and a deposed leader's write
   refused. */
#include <pthread.h>
#include <time.h>

#include "check.h"

static const char *NAME = "scheduler";

typedef struct candidate {
    fencelock_store *store;
    fencelock_leadership *leadership;
    fencelock_status status;
} candidate;

static void *campaign_in_thread(void *arg) {
    candidate *c = (candidate *)arg;
    c->status = fencelock_store_campaign(c->store, NAME, (const uint8_t *)"b", 1, 60000, 0,
                                         60000, NULL, &c->leadership, NULL);
    return NULL;
}

static void *fire_later(void *arg) {
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    fencelock_cancel_fire((const fencelock_cancel *)arg);
    return NULL;
}

/* The next leader the watch tells: its term, version and value (copied into value). */
static uint64_t next_term(fencelock_leader_watch *watch, uint64_t *version, char *value) {
    fencelock_leader *leader = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_leader_watch_next(watch, 60000, NULL, &leader, ERR));
    size_t len = 0;
    const uint8_t *bytes = fencelock_leader_value(leader, &len);
    memcpy(value, bytes, len);
    value[len] = '\0';
    *version = fencelock_leader_version(leader);
    uint64_t term = fencelock_leader_term(leader);
    CHECK(strcmp(fencelock_leader_name(leader), NAME) == 0);
    CHECK(fencelock_leader_pid(leader) == (uint32_t)getpid());
    CHECK(fencelock_leader_since_unix_ms(leader) > 0);
    fencelock_leader_free(leader);
    return term;
}

int main(void) {
    scratch sc;
    scratch_make(&sc);
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(sc.path, &store, ERR));
    fencelock_store *other = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(sc.path, &other, ERR));

    fencelock_leader_watch *watch = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_observe_leader(store, NAME, &watch, ERR));
    fencelock_leader *leader = NULL;
    CHECK_STATUS(FENCELOCK_NOT_FOUND, fencelock_store_leader(store, NAME, &leader, ERR));
    CHECK(leader == NULL);

    fencelock_leadership *first = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_campaign(store, NAME, (const uint8_t *)"a", 1,
                                                        60000, 0, UINT64_MAX, NULL, &first,
                                                        ERR));
    uint64_t term = fencelock_leadership_term(first);
    CHECK(term > 0);
    CHECK(strcmp(fencelock_leadership_name(first), NAME) == 0);
    uint64_t version = 0;
    char value[64];
    CHECK(next_term(watch, &version, value) == term);
    CHECK(version == 1 && strcmp(value, "a") == 0);
    CHECK_STATUS(FENCELOCK_OK,
                 fencelock_leadership_proclaim(first, (const uint8_t *)"a:8080", 6, ERR));
    CHECK(next_term(watch, &version, value) == term);
    CHECK(version == 2 && strcmp(value, "a:8080") == 0);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_leader(store, NAME, &leader, ERR));
    CHECK(fencelock_leader_term(leader) == term && fencelock_leader_version(leader) == 2);
    fencelock_leader_free(leader);
    CHECK_STATUS(FENCELOCK_OK, fencelock_leadership_put(first, (const uint8_t *)"schedule", 8,
                                                        (const uint8_t *)"by a", 4, ERR));

    /* A watch and a wait for the end, ended by a cancel handle. */
    fencelock_cancel *cancel = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_cancel_new(&cancel, ERR));
    pthread_t firer;
    CHECK(pthread_create(&firer, NULL, fire_later, cancel) == 0);
    leader = NULL;
    CHECK_STATUS(FENCELOCK_CANCELLED,
                 fencelock_leader_watch_next(watch, 600000, cancel, &leader, ERR));
    pthread_join(firer, NULL);
    CHECK(leader == NULL);
    bool lost = true;
    CHECK_STATUS(FENCELOCK_CANCELLED,
                 fencelock_leadership_wait_lost(first, 600000, cancel, &lost, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_leadership_wait_lost(first, 10, NULL, &lost, ERR));
    CHECK(!lost);
    fencelock_leadership *never = NULL;
    CHECK_STATUS(FENCELOCK_CANCELLED,
                 fencelock_store_campaign(other, NAME, NULL, 0, 60000, 0, UINT64_MAX, cancel,
                                          &never, ERR));
    CHECK(never == NULL);
    fencelock_cancel_free(cancel);

    /* A second candidate waits in another thread, and leads once the first resigns. */
    candidate second = {other, NULL, -1};
    pthread_t waiter;
    CHECK(pthread_create(&waiter, NULL, campaign_in_thread, &second) == 0);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    CHECK_STATUS(FENCELOCK_OK, fencelock_leadership_resign(first, ERR));
    pthread_join(waiter, NULL);
    CHECK(second.status == FENCELOCK_OK);
    uint64_t next = fencelock_leadership_term(second.leadership);
    CHECK(next > term);
    CHECK(next_term(watch, &version, value) == next);
    CHECK(version == 1 && strcmp(value, "b") == 0);
    CHECK(fencelock_leadership_is_lost(first));
    CHECK_STATUS(FENCELOCK_OK, fencelock_leadership_put(second.leadership,
                                                        (const uint8_t *)"schedule", 8,
                                                        (const uint8_t *)"by b", 4, ERR));
    /* The deposed leader's writes: refused through its leadership, and with its term. */
    CHECK_STATUS(FENCELOCK_LOCK_LOST,
                 fencelock_leadership_put(first, (const uint8_t *)"schedule", 8,
                                          (const uint8_t *)"late", 4, ERR));
    CHECK_STATUS(FENCELOCK_STALE_TOKEN,
                 fencelock_store_put(store, (const uint8_t *)"schedule", 8,
                                     (const uint8_t *)"late", 4, term, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_leadership_fence(second.leadership, "s3://b/s", ERR));
    CHECK_STATUS(FENCELOCK_STALE_TOKEN, fencelock_store_fence(store, "s3://b/s", term, ERR));

    CHECK_STATUS(FENCELOCK_NULL_POINTER,
                 fencelock_store_campaign(store, NULL, NULL, 0, 60000, 0, 0, NULL, &never, ERR));
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                 fencelock_store_campaign(store, "", NULL, 0, 60000, 0, 0, NULL, &never, ERR));
    CHECK(never == NULL);

    fencelock_leadership_free(second.leadership);
    fencelock_leadership_free(first);
    fencelock_leadership_free(NULL);
    fencelock_leader_watch_free(watch);
    fencelock_leader_free(NULL);
    fencelock_store_close(other);
    fencelock_store_close(store);
    scratch_remove(&sc);
    return check_report("test_election");
}
