/* Metrics, the observer callback and the grant history through the C ABI: the seed's
   walkthrough on record (the paused holder taken over, the next one released), a holder
   killed in a forked child, the counters, the Prometheus text, and bad input refused with the
   outputs untouched. Runs under valgrind with zero errors and zero leaks. */
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

#include "check.h"

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int64_t now_unix_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static fencelock_history *history_of(const fencelock_store *store, const char *name) {
    fencelock_history *history = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_history(store, name, &history, ERR));
    return history;
}

static fencelock_history_entry entry_at(const fencelock_history *history, size_t i) {
    fencelock_history_entry entry;
    memset(&entry, 0, sizeof entry);
    CHECK_STATUS(FENCELOCK_OK, fencelock_history_get(history, i, &entry));
    return entry;
}

/* What the observer heard, in order. */
typedef struct heard {
    int events[16];
    uint64_t tokens[16];
    fencelock_status statuses[16];
    int count;
    int dirty_padding; /* events whose padding was not zero */
} heard;

/* Whether every byte of `event` outside its fields is zero: the padding after `event` and
   after `status`, which a caller that copies or compares events reads. */
static int event_padding_is_zero(const fencelock_event *event) {
    unsigned char field[sizeof *event];
    memset(field, 0, sizeof field);
#define FIELD(name) memset(field + offsetof(fencelock_event, name), 1, sizeof event->name)
    FIELD(event);
    FIELD(name);
    FIELD(kind);
    FIELD(permits);
    FIELD(token);
    FIELD(status);
    FIELD(waited_ns);
    FIELD(held_ns);
#undef FIELD
    const unsigned char *bytes = (const unsigned char *)event;
    int zero = 1;
    for (size_t i = 0; i < sizeof *event; i++) {
        zero &= field[i] || bytes[i] == 0;
    }
    return zero;
}

static void observe(void *context, const fencelock_event *event) {
    heard *h = context;
    h->dirty_padding += !event_padding_is_zero(event);
    if (h->count < 16 && strcmp(event->name, "payment-export") == 0) {
        h->events[h->count] = event->event;
        h->tokens[h->count] = event->token;
        h->statuses[h->count] = event->status;
        h->count++;
    }
}

static void walkthrough_on_record(const fencelock_store *store, heard *h) {
    int64_t start = now_unix_ms();
    /* A acquires with a short lease and is paused past it, still holding on. */
    fencelock_holder *a = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "payment-export", 150, &a, ERR));
    sleep_ms(300);
    fencelock_holder *b = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "payment-export", 60000, &b, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(b, (const uint8_t *)"report", 6,
                                                    (const uint8_t *)"fresh", 5, ERR));
    CHECK_STATUS(FENCELOCK_LOCK_LOST, fencelock_holder_put(a, (const uint8_t *)"report", 6,
                                                           (const uint8_t *)"stale", 5, ERR));
    fencelock_holder *refused = (fencelock_holder *)0x1;
    CHECK_STATUS(FENCELOCK_LOCKED,
                 fencelock_store_acquire(store, "payment-export", 1000, &refused, ERR));
    CHECK(refused == (fencelock_holder *)0x1);

    fencelock_history *history = history_of(store, "payment-export");
    CHECK(fencelock_history_len(history) == 2);
    fencelock_history_entry first = entry_at(history, 0);
    fencelock_history_entry second = entry_at(history, 1);
    CHECK(first.token == fencelock_holder_token(a));
    CHECK(first.ending == FENCELOCK_ENDING_TAKEN_OVER);
    CHECK(first.kind == FENCELOCK_KIND_EXCLUSIVE && first.permits == 0);
    CHECK(first.pid == (uint32_t)getpid());
    CHECK(first.granted_unix_ms >= start - 1000 && first.granted_unix_ms <= now_unix_ms());
    CHECK(first.expires_unix_ms < first.ended_unix_ms);
    CHECK(first.recorded_unix_ms != 0);
    CHECK(second.token == fencelock_holder_token(b));
    CHECK(second.ending == FENCELOCK_ENDING_HELD && second.recorded_unix_ms == 0);
    /* Out of range: the output is untouched. */
    fencelock_history_entry untouched;
    memset(&untouched, 0xab, sizeof untouched);
    CHECK(fencelock_history_get(history, 2, &untouched) == FENCELOCK_INVALID_ARGUMENT);
    CHECK(untouched.token == 0xababababababababULL);
    CHECK(fencelock_history_get(history, 0, NULL) == FENCELOCK_NULL_POINTER);
    CHECK(fencelock_history_len(NULL) == 0);
    fencelock_history_free(history);

    /* B releases; the next grant records it as released, with the release's time. */
    int64_t released = now_unix_ms();
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_release(b, ERR));
    fencelock_holder *c = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "payment-export", 60000, &c, ERR));
    history = history_of(store, "payment-export");
    CHECK(fencelock_history_len(history) == 3);
    fencelock_history_entry b_entry = entry_at(history, 1);
    CHECK(b_entry.ending == FENCELOCK_ENDING_RELEASED);
    CHECK(b_entry.ended_unix_ms >= released - 5 && b_entry.ended_unix_ms <= now_unix_ms());
    CHECK(entry_at(history, 2).token == fencelock_holder_token(c));
    fencelock_history_free(history);

    /* The observer heard: A granted, B granted, A's loss, the refusal, B's release, C. */
    CHECK(h->count == 6);
    int expected[6] = {FENCELOCK_EVENT_ACQUIRE, FENCELOCK_EVENT_ACQUIRE, FENCELOCK_EVENT_LOST,
                       FENCELOCK_EVENT_ACQUIRE, FENCELOCK_EVENT_RELEASE, FENCELOCK_EVENT_ACQUIRE};
    for (int i = 0; i < 6 && i < h->count; i++) {
        CHECK(h->events[i] == expected[i]);
    }
    CHECK(h->tokens[0] == fencelock_holder_token(a) && h->statuses[0] == FENCELOCK_OK);
    CHECK(h->tokens[2] == fencelock_holder_token(a));
    CHECK(h->tokens[3] == 0 && h->statuses[3] == FENCELOCK_LOCKED);
    CHECK(h->tokens[4] == fencelock_holder_token(b));
    CHECK(h->tokens[5] == fencelock_holder_token(c));
    /* Freeing A, already lost, tells nothing more; freeing C releases it. */
    fencelock_holder_free(a);
    fencelock_holder_free(b);
    fencelock_holder_free(c);
    CHECK(h->count == 7 && h->events[6] == FENCELOCK_EVENT_RELEASE);
}

/* A child holds the lock and is killed: the next grant records its holder as dead. */
static void a_killed_holder(const fencelock_store *store, const char *path) {
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t child = fork();
    if (child == 0) {
        close(ready[0]);
        fencelock_store *own = NULL;
        fencelock_holder *holder = NULL;
        if (fencelock_store_open(path, &own, NULL) != FENCELOCK_OK ||
            fencelock_store_acquire(own, "nightly", 600000, &holder, NULL) != FENCELOCK_OK) {
            _exit(2);
        }
        uint64_t token = fencelock_holder_token(holder);
        if (write(ready[1], &token, sizeof token) != sizeof token) {
            _exit(3);
        }
        for (;;) {
            pause();
        }
    }
    close(ready[1]);
    uint64_t killed = 0;
    CHECK(read(ready[0], &killed, sizeof killed) == sizeof killed);
    close(ready[0]);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    fencelock_holder *next = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "nightly", 60000, &next, ERR));
    fencelock_history *history = history_of(store, "nightly");
    CHECK(fencelock_history_len(history) == 2);
    fencelock_history_entry dead = entry_at(history, 0);
    CHECK(dead.token == killed && dead.ending == FENCELOCK_ENDING_HOLDER_DIED);
    CHECK(dead.pid == (uint32_t)child);
    fencelock_history_free(history);
    fencelock_holder_free(next);
}

static void metrics(const fencelock_store *store, const fencelock_metrics *before) {
    fencelock_metrics after;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_metrics(store, &after, sizeof after, ERR));
    CHECK(after.scope == FENCELOCK_SCOPE_STORE);
    /* A, B, C, one unheard, the next holder of nightly, and the child's grant (it shares the
       counters). */
    CHECK(after.grants - before->grants == 6);
    CHECK(after.refused_locked - before->refused_locked == 1);
    CHECK(after.lock_lost - before->lock_lost == 1);
    CHECK(after.releases - before->releases >= 1);
    CHECK(after.ended_taken_over - before->ended_taken_over == 1);
    CHECK(after.ended_released - before->ended_released >= 1);
    CHECK(after.ended_holder_died - before->ended_holder_died == 1);
    CHECK(after.commits > before->commits && after.committed_ops >= after.commits);
    CHECK(after.since_unix_ms > 0 && after.since_unix_ms <= now_unix_ms());

    /* The gauges: no lease is live now; the file has a size. */
    CHECK(after.live_exclusive == 0 && after.live_shared == 0 && after.live_permits == 0);
    CHECK(after.queued_waiters == 0 && after.file_bytes > 0);

    fencelock_metrics untouched;
    memset(&untouched, 0xab, sizeof untouched);
    /* Smaller than the first version's struct. */
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                 fencelock_store_metrics(store, &untouched,
                                         offsetof(fencelock_metrics, live_exclusive) - 1, ERR));
    CHECK(untouched.grants == 0xababababababababULL);
    /* A struct of a newer header, larger: the fields this library knows, zeros past them. */
    unsigned char larger[sizeof(fencelock_metrics) + 16];
    memset(larger, 0xab, sizeof larger);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_metrics(store, (fencelock_metrics *)(void *)larger,
                                                       sizeof larger, ERR));
    int zeros = 1;
    for (size_t i = sizeof(fencelock_metrics); i < sizeof larger; i++) {
        zeros &= larger[i] == 0;
    }
    CHECK(zeros);
    /* A struct of the first header, before the gauges: its fields, and nothing past them. */
    fencelock_metrics first;
    memset(&first, 0xab, sizeof first);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_metrics(
                                   store, &first, offsetof(fencelock_metrics, live_exclusive), ERR));
    CHECK(first.grants == after.grants && first.committed_ops >= after.committed_ops);
    CHECK(first.live_exclusive == 0xababababababababULL);
    CHECK(first.file_bytes == 0xababababababababULL);
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_store_metrics(store, NULL, sizeof after, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_store_metrics(NULL, &after, sizeof after, ERR));

    uint8_t *text = NULL;
    size_t len = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_metrics_prometheus(store, &text, &len, ERR));
    char *copy = malloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = '\0';
    CHECK(strstr(copy, "# TYPE fencelock_grants_total counter") != NULL);
    CHECK(strstr(copy, "fencelock_wait_seconds_bucket{") != NULL);
    CHECK(strstr(copy, "# TYPE fencelock_live_leases gauge") != NULL);
    CHECK(strstr(copy, "fencelock_build_info{") != NULL);
    free(copy);
    fencelock_buffer_free(text, len);
}

/* Two snapshots of a quiet store, taken into memory filled with different bytes, are equal
   byte for byte: the padding between `scope` and `since_unix_ms` is zero, neither the
   caller's fill nor the library's stack (valgrind reports a read of it otherwise). */
static void snapshots_have_no_undefined_bytes(const fencelock_store *store) {
    fencelock_metrics a, b;
    memset(&a, 0xaa, sizeof a);
    memset(&b, 0x55, sizeof b);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_metrics(store, &a, sizeof a, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_metrics(store, &b, sizeof b, ERR));
    const unsigned char *bytes = (const unsigned char *)&a;
    int zeros = 1;
    for (size_t i = offsetof(fencelock_metrics, scope) + sizeof a.scope;
         i < offsetof(fencelock_metrics, since_unix_ms); i++) {
        zeros &= bytes[i] == 0;
    }
    CHECK(zeros);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
}

/* The live-lease gauges count each kind: an exclusive lease, shared holders, permits. */
static void live_leases(const fencelock_store *store) {
    fencelock_holder *holders[5] = {NULL};
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "gauged", 60000, &holders[0], ERR));
    for (int i = 1; i <= 2; i++) {
        CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_kind(store, "read", FENCELOCK_KIND_SHARED,
                                                                0, 60000, &holders[i], ERR));
    }
    for (int i = 3; i <= 4; i++) {
        CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_kind(
                                       store, "pool", FENCELOCK_KIND_SEMAPHORE, 3, 60000,
                                       &holders[i], ERR));
    }
    fencelock_metrics m;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_metrics(store, &m, sizeof m, ERR));
    CHECK(m.live_exclusive == 1 && m.live_shared == 2 && m.live_permits == 2);
    for (int i = 0; i < 5; i++) {
        fencelock_holder_free(holders[i]);
    }
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_metrics(store, &m, sizeof m, ERR));
    CHECK(m.live_exclusive == 0 && m.live_shared == 0 && m.live_permits == 0);
}

/* A wait of another thread, through a second open of the store (a wait for a lease held through
   the same open is refused at once): up to 3 s, while the main thread looks at the queue. */
static fencelock_status queued_open, queued_wait;

static void *wait_for_queued(void *path) {
    fencelock_store *other = NULL;
    queued_open = fencelock_store_open(path, &other, NULL);
    if (queued_open == FENCELOCK_OK) {
        fencelock_holder *granted = NULL;
        queued_wait = fencelock_store_acquire_wait(other, "queued", 60000, 3000, &granted, NULL);
        fencelock_holder_free(granted);
        fencelock_store_close(other);
    }
    return NULL;
}

/* The waiters of a lock: the queued acquire of another thread, with this process's pid; bad
   input refused with the output untouched. */
static void waiters(const fencelock_store *store, const char *path) {
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "queued", 60000, &holder, ERR));
    pthread_t waiter;
    CHECK(pthread_create(&waiter, NULL, wait_for_queued, (void *)path) == 0);
    fencelock_waiter_list *list = NULL;
    for (int tries = 0; tries < 6000; tries++) {
        CHECK_STATUS(FENCELOCK_OK, fencelock_store_waiters(store, "queued", &list, ERR));
        if (fencelock_waiter_list_len(list) == 1) {
            break;
        }
        fencelock_waiter_list_free(list);
        list = NULL;
        sleep_ms(10);
    }
    CHECK(list != NULL && fencelock_waiter_list_len(list) == 1);
    fencelock_waiter_info info;
    memset(&info, 0, sizeof info);
    CHECK_STATUS(FENCELOCK_OK, fencelock_waiter_list_get(list, 0, &info));
    CHECK(strcmp(info.name, "queued") == 0);
    CHECK(info.pid == (uint32_t)getpid());
    CHECK(info.ticket > 0);
    CHECK(info.waiting_since_unix_ms <= now_unix_ms());
    fencelock_waiter_info untouched;
    memset(&untouched, 0xab, sizeof untouched);
    CHECK(fencelock_waiter_list_get(list, 1, &untouched) == FENCELOCK_INVALID_ARGUMENT);
    CHECK(untouched.ticket == 0xababababababababULL);
    CHECK(fencelock_waiter_list_get(list, 0, NULL) == FENCELOCK_NULL_POINTER);
    fencelock_waiter_list_free(list);
    /* The waiter is granted once the holder lets go, and leaves the queue. */
    fencelock_holder_free(holder);
    CHECK(pthread_join(waiter, NULL) == 0);
    CHECK(queued_open == FENCELOCK_OK && queued_wait == FENCELOCK_OK);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_waiters(store, "queued", &list, ERR));
    CHECK(fencelock_waiter_list_len(list) == 0);
    fencelock_waiter_list_free(list);

    fencelock_waiter_list *kept = (fencelock_waiter_list *)0x1;
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, fencelock_store_waiters(store, "", &kept, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_store_waiters(store, NULL, &kept, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_store_waiters(NULL, "queued", &kept, ERR));
    CHECK(kept == (fencelock_waiter_list *)0x1);
    CHECK(fencelock_waiter_list_len(NULL) == 0);
    fencelock_waiter_list_free(NULL);
}

/* A store opened with FENCELOCK_OPEN_NO_HISTORY records no history; unknown flags are refused. */
static void no_history(const char *path) {
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open_cancellable(
        path, FENCELOCK_MODE_MULTI_PROCESS, FENCELOCK_OPEN_NO_HISTORY, 0, 0, NULL, &store, ERR));
    fencelock_holder *first = NULL, *second = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "quiet", 60000, &first, ERR));
    fencelock_holder_free(first);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "quiet", 60000, &second, ERR));
    fencelock_history *history = history_of(store, "quiet");
    CHECK(fencelock_history_len(history) == 1);
    CHECK(entry_at(history, 0).ending == FENCELOCK_ENDING_HELD);
    fencelock_history_free(history);
    fencelock_holder_free(second);
    fencelock_store_close(store);
    fencelock_store *untouched = (fencelock_store *)0x1;
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, fencelock_store_open_cancellable(
        path, FENCELOCK_MODE_MULTI_PROCESS, FENCELOCK_OPEN_WRITE_LOG << 1, 0, 0, NULL, &untouched,
        ERR));
    CHECK(untouched == (fencelock_store *)0x1);
}

int main(void) {
    scratch s;
    scratch_make(&s);
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(s.path, &store, ERR));
    fencelock_metrics before;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_metrics(store, &before, sizeof before, ERR));
    heard h;
    memset(&h, 0, sizeof h);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_set_observer(store, observe, &h, ERR));
    walkthrough_on_record(store, &h);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_set_observer(store, NULL, NULL, ERR));
    fencelock_holder *unheard = NULL;
    CHECK_STATUS(FENCELOCK_OK,
                 fencelock_store_acquire(store, "payment-export", 60000, &unheard, ERR));
    fencelock_holder_free(unheard);
    CHECK(h.count == 7); /* removed: nothing more was heard */
    CHECK(h.dirty_padding == 0);
    a_killed_holder(store, s.path);
    metrics(store, &before);
    snapshots_have_no_undefined_bytes(store);
    live_leases(store);
    waiters(store, s.path);

    fencelock_history *untouched = (fencelock_history *)0x1;
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, fencelock_store_history(store, "", &untouched, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_store_history(store, NULL, &untouched, ERR));
    CHECK(untouched == (fencelock_history *)0x1);
    fencelock_history *none = history_of(store, "never-granted");
    CHECK(fencelock_history_len(none) == 0);
    fencelock_history_free(none);
    fencelock_history_free(NULL);
    fencelock_store_close(store);
    no_history(s.path);
    scratch_remove(&s);
    return check_report("test_metrics");
}
