/* Every function of the C ABI, every status code reachable from C, and bad arguments of every
   kind: NULL pointers, names that are not UTF-8, empty and long keys, out-of-range TTLs and
   tokens. Outputs must stay untouched on failure. Runs under valgrind with zero errors and
   zero leaks. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h"

static const uint8_t KEY[] = "payments/today.csv";
#define KEY_LEN (sizeof KEY - 1)

static fencelock_holder *acquire(const fencelock_store *store, const char *name, uint64_t ttl_ms) {
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, name, ttl_ms, &holder, ERR));
    CHECK(holder != NULL);
    return holder;
}

static void version_and_status_strings(void) {
    CHECK(strcmp(fencelock_version(), FENCELOCK_VERSION) == 0);
    char built[32];
    snprintf(built, sizeof built, "%d.%d.%d", FENCELOCK_VERSION_MAJOR, FENCELOCK_VERSION_MINOR,
             FENCELOCK_VERSION_PATCH);
    CHECK(strncmp(fencelock_version(), built, strlen(built)) == 0);

    /* The number: the header's, the loaded library's and the parts' agree. */
    CHECK(fencelock_version_number() == FENCELOCK_VERSION_NUMBER);
    CHECK(FENCELOCK_VERSION_NUMBER == FENCELOCK_VERSION_MAJOR * 1000000 +
                                          FENCELOCK_VERSION_MINOR * 1000 + FENCELOCK_VERSION_PATCH);
    CHECK(FENCELOCK_AT_LEAST_VERSION(0, 0, 0));
    CHECK(FENCELOCK_AT_LEAST_VERSION(0, 1, 0)); /* the first release: every header is later */
    CHECK(FENCELOCK_AT_LEAST_VERSION(FENCELOCK_VERSION_MAJOR, FENCELOCK_VERSION_MINOR,
                                     FENCELOCK_VERSION_PATCH));
    CHECK(!FENCELOCK_AT_LEAST_VERSION(FENCELOCK_VERSION_MAJOR, FENCELOCK_VERSION_MINOR,
                                      FENCELOCK_VERSION_PATCH + 1));
    CHECK(!FENCELOCK_AT_LEAST_VERSION(FENCELOCK_VERSION_MAJOR, FENCELOCK_VERSION_MINOR + 1, 0));
    CHECK(!FENCELOCK_AT_LEAST_VERSION(FENCELOCK_VERSION_MAJOR + 1, 0, 0));
    CHECK(!FENCELOCK_AT_LEAST_VERSION(1000, 0, 0));
    /* A higher part outweighs every lower one: x.y.0 is later than x.(y-1).999. */
    CHECK(FENCELOCK_VERSION_MINOR == 0 ||
          FENCELOCK_AT_LEAST_VERSION(FENCELOCK_VERSION_MAJOR, FENCELOCK_VERSION_MINOR - 1, 999));
    CHECK(!FENCELOCK_AT_LEAST_VERSION(FENCELOCK_VERSION_MAJOR, FENCELOCK_VERSION_MINOR, 999) ||
          FENCELOCK_VERSION_PATCH == 999);
    for (int code = FENCELOCK_OK; code <= FENCELOCK_WOULD_DEADLOCK; code++) {
        const char *text = fencelock_status_str(code);
        CHECK(text != NULL && text[0] != '\0' && strcmp(text, "unknown status") != 0);
    }
    CHECK(strcmp(fencelock_status_str(FENCELOCK_OK), "ok") == 0);
    CHECK(strcmp(fencelock_status_str(-1), "unknown status") == 0);
    CHECK(strcmp(fencelock_status_str(FENCELOCK_WOULD_DEADLOCK + 1), "unknown status") == 0);
}

static void fenced_values(const fencelock_store *store) {
    fencelock_holder *a = acquire(store, "payment-export", 60000);
    uint64_t n = fencelock_holder_token(a);
    CHECK(n > 0);
    CHECK(strcmp(fencelock_holder_name(a), "payment-export") == 0);

    CHECK_STATUS(FENCELOCK_OK, fencelock_store_put(store, KEY, KEY_LEN, (const uint8_t *)"v1", 2, n, ERR));
    uint8_t *value = (uint8_t *)0x1;
    size_t len = 99;
    uint64_t token = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(store, KEY, KEY_LEN, &value, &len, &token, ERR));
    CHECK(len == 2 && memcmp(value, "v1", 2) == 0 && token == n);
    fencelock_buffer_free(value, len);

    /* LOCKED carries the holder's token, pid and time left; holder_out stays untouched. */
    fencelock_holder *untouched = (fencelock_holder *)0x1;
    fencelock_error *err = NULL;
    CHECK(fencelock_store_acquire(store, "payment-export", 1000, &untouched, &err) == FENCELOCK_LOCKED);
    CHECK(untouched == (fencelock_holder *)0x1);
    CHECK(fencelock_error_status(err) == FENCELOCK_LOCKED);
    CHECK(fencelock_error_token(err) == n);
    CHECK(fencelock_error_pid(err) == (uint32_t)getpid());
    CHECK(fencelock_error_remaining_ms(err) > 0 && fencelock_error_remaining_ms(err) <= 60000);
    CHECK(fencelock_error_highest(err) == 0);
    CHECK(strstr(fencelock_error_message(err), "held") != NULL);
    fencelock_error_free(err);

    /* TIMEOUT for a zero timeout; a NULL err_out still gives the status. A longer wait of the
       holder's own thread through the same store is refused at once: WOULD_DEADLOCK, naming
       the holder's token. */
    CHECK_STATUS(FENCELOCK_TIMEOUT, fencelock_store_acquire_wait(store, "payment-export", 1000, 0, &untouched, ERR));
    CHECK(fencelock_store_acquire_wait(store, "payment-export", 1000, 0, &untouched, NULL) == FENCELOCK_TIMEOUT);
    err = NULL;
    CHECK(fencelock_store_acquire_wait(store, "payment-export", 1000, 60000, &untouched, &err) ==
          FENCELOCK_WOULD_DEADLOCK);
    CHECK(fencelock_error_status(err) == FENCELOCK_WOULD_DEADLOCK);
    CHECK(fencelock_error_token(err) == n);
    CHECK(strstr(fencelock_error_message(err), "payment-export") != NULL);
    fencelock_error_free(err);
    CHECK(untouched == (fencelock_holder *)0x1);
    CHECK(fencelock_store_acquire_and_put(store, "payment-export", 1000, KEY, KEY_LEN, NULL, 0, &untouched, NULL) == FENCELOCK_LOCKED);
    CHECK(untouched == (fencelock_holder *)0x1);

    /* The next holder writes with a higher token; the old token is refused. */
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_release(a, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_release(a, ERR)); /* idempotent */
    fencelock_holder *b = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_wait(store, "payment-export", 60000, 10000, &b, ERR));
    uint64_t n1 = fencelock_holder_token(b);
    CHECK(n1 > n);
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(b, KEY, KEY_LEN, (const uint8_t *)"v2", 2, ERR));
    err = NULL;
    CHECK(fencelock_store_put(store, KEY, KEY_LEN, (const uint8_t *)"old", 3, n, &err) == FENCELOCK_STALE_TOKEN);
    CHECK(fencelock_error_token(err) == n && fencelock_error_highest(err) == n1);
    fencelock_error_free(err);
    CHECK_STATUS(FENCELOCK_STALE_TOKEN, fencelock_store_delete(store, KEY, KEY_LEN, n, NULL, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(store, KEY, KEY_LEN, &value, &len, NULL, ERR));
    CHECK(len == 2 && memcmp(value, "v2", 2) == 0);
    fencelock_buffer_free(value, len);

    /* A released holder's writes are LOCK_LOST; its wait_lost reports the end at once. */
    CHECK_STATUS(FENCELOCK_LOCK_LOST, fencelock_holder_put(a, KEY, KEY_LEN, (const uint8_t *)"x", 1, ERR));
    CHECK_STATUS(FENCELOCK_LOCK_LOST, fencelock_holder_delete(a, KEY, KEY_LEN, NULL, ERR));
    CHECK_STATUS(FENCELOCK_LOCK_LOST, fencelock_holder_extend(a, 1000, ERR));
    bool flag = true;
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_is_held(a, &flag, ERR));
    CHECK(!flag);
    flag = false;
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_wait_lost(a, 0, &flag, ERR));
    CHECK(flag);

    /* Zero-length values: NULL is allowed with length 0, and get returns a non-NULL buffer. */
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(b, (const uint8_t *)"empty", 5, NULL, 0, ERR));
    value = NULL;
    len = 7;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(store, (const uint8_t *)"empty", 5, &value, &len, &token, ERR));
    CHECK(value != NULL && len == 0 && token == n1);
    fencelock_buffer_free(value, len);

    /* Deletes, by holder and by token, with and without existed_out. */
    bool existed = false;
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_delete(b, (const uint8_t *)"empty", 5, &existed, ERR));
    CHECK(existed);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_delete(store, (const uint8_t *)"empty", 5, n1, &existed, ERR));
    CHECK(!existed);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_delete(store, (const uint8_t *)"empty", 5, n1, NULL, ERR));
    value = (uint8_t *)0x1;
    len = 7;
    token = 9;
    CHECK_STATUS(FENCELOCK_NOT_FOUND, fencelock_store_get(store, (const uint8_t *)"empty", 5, &value, &len, &token, ERR));
    CHECK(value == (uint8_t *)0x1 && len == 7 && token == 9);

    /* extend, is_held, keep_alive, wait_lost on a live holder. */
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_extend(b, 60000, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_is_held(b, &flag, ERR));
    CHECK(flag);
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_keep_alive(b, 3000, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_wait_lost(b, 10, &flag, ERR));
    CHECK(!flag);

    /* acquire_and_put: lock and value in one transaction. */
    fencelock_holder *c = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_and_put(store, "other-job", 60000, (const uint8_t *)"o", 1, (const uint8_t *)"first", 5, &c, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(store, (const uint8_t *)"o", 1, &value, &len, &token, ERR));
    CHECK(len == 5 && memcmp(value, "first", 5) == 0 && token == fencelock_holder_token(c));
    fencelock_buffer_free(value, len);

    fencelock_holder_free(a);
    fencelock_holder_free(b); /* stops the keep-alive thread and releases */
    fencelock_holder_free(c);
}

static void expiry_and_takeover(const fencelock_store *store) {
    fencelock_holder *old = acquire(store, "short", 5);
    usleep(30 * 1000); /* the 5 ms lease runs out */
    fencelock_holder *taker = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_wait(store, "short", 60000, 60000, &taker, ERR));
    fencelock_error *err = NULL;
    CHECK(fencelock_holder_put(old, KEY, KEY_LEN, (const uint8_t *)"late", 4, &err) == FENCELOCK_LOCK_LOST);
    CHECK(fencelock_error_token(err) == fencelock_holder_token(old));
    CHECK(fencelock_error_highest(err) == fencelock_holder_token(taker));
    fencelock_error_free(err);
    /* Its first release says the lease was lost, naming the taker; the second is a no-op. */
    err = NULL;
    CHECK(fencelock_holder_release(old, &err) == FENCELOCK_LOCK_LOST);
    CHECK(fencelock_error_status(err) == FENCELOCK_LOCK_LOST);
    CHECK(fencelock_error_token(err) == fencelock_holder_token(old));
    CHECK(fencelock_error_highest(err) == fencelock_holder_token(taker));
    fencelock_error_free(err);
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_release(old, ERR));
    fencelock_holder_free(old); /* its release never touches the taker's lease */
    bool held = false;
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_is_held(taker, &held, ERR));
    CHECK(held);
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_release(taker, ERR)); /* a live lease's: quiet */
    fencelock_holder_free(taker);
}

/* The time left on a lease: within its TTL right after the acquire, 0 once it ran out. */
static void remaining_time(const fencelock_store *store) {
    fencelock_holder *live = acquire(store, "remaining-live", 60000);
    uint64_t ms = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_remaining_ms(live, &ms, ERR));
    CHECK(ms > 0 && ms <= 60000);
    fencelock_holder_free(live);

    fencelock_holder *brief = acquire(store, "remaining-brief", 50);
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_remaining_ms(brief, &ms, ERR));
    CHECK(ms <= 50);
    usleep(150 * 1000); /* the 50 ms lease runs out */
    ms = 77;
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_remaining_ms(brief, &ms, ERR));
    CHECK(ms == 0);

    /* NULL pointers are refused, and the output is written only on success. */
    ms = 77;
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_holder_remaining_ms(NULL, &ms, ERR));
    CHECK(ms == 77);
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_holder_remaining_ms(brief, NULL, ERR));
    CHECK_STATUS(FENCELOCK_NULL_POINTER, fencelock_holder_remaining_ms(NULL, &ms, NULL));
    fencelock_holder_free(brief);
}

static void fences_and_lists(const fencelock_store *store) {
    fencelock_holder *a = acquire(store, "list-a", 60000);
    fencelock_holder *b = acquire(store, "list-b", 60000);
    uint64_t ta = fencelock_holder_token(a), tb = fencelock_holder_token(b);

    uint64_t seen = 7;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_fence_token(store, "bucket", &seen, ERR));
    CHECK(seen == 0);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_fence(store, "bucket", tb, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_fence(store, "bucket", tb, ERR));
    fencelock_error *err = NULL;
    CHECK(fencelock_store_fence(store, "bucket", ta, &err) == FENCELOCK_STALE_TOKEN);
    CHECK(fencelock_error_token(err) == ta && fencelock_error_highest(err) == tb);
    fencelock_error_free(err);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_fence_token(store, "bucket", &seen, ERR));
    CHECK(seen == tb);

    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_release(a, ERR));
    fencelock_lock_list *locks = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_locks(store, &locks, ERR));
    size_t count = fencelock_lock_list_len(locks);
    int found_a = 0, found_b = 0;
    for (size_t i = 0; i < count; i++) {
        fencelock_lock_info info;
        CHECK(fencelock_lock_list_get(locks, i, &info) == FENCELOCK_OK);
        if (strcmp(info.name, "list-a") == 0) {
            found_a = 1;
            CHECK(info.token == ta && info.state == FENCELOCK_LOCK_RELEASED);
        }
        if (strcmp(info.name, "list-b") == 0) {
            found_b = 1;
            CHECK(info.token == tb && info.state == FENCELOCK_LOCK_HELD);
            CHECK(info.pid == (uint32_t)getpid());
            CHECK(info.remaining_ms > 0 && info.expires_unix_ms > info.granted_unix_ms);
        }
    }
    CHECK(found_a && found_b);
    fencelock_lock_info info;
    info.token = 12345;
    CHECK(fencelock_lock_list_get(locks, count, &info) == FENCELOCK_INVALID_ARGUMENT);
    CHECK(info.token == 12345);
    CHECK(fencelock_lock_list_get(locks, 0, NULL) == FENCELOCK_NULL_POINTER);
    CHECK(fencelock_lock_list_get(NULL, 0, &info) == FENCELOCK_NULL_POINTER);
    CHECK(fencelock_lock_list_len(NULL) == 0);
    fencelock_lock_list_free(locks);

    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(b, (const uint8_t *)"jobs/1", 6, (const uint8_t *)"x", 1, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(b, (const uint8_t *)"jobs/2", 6, (const uint8_t *)"y", 1, ERR));
    fencelock_key_list *keys = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_keys(store, (const uint8_t *)"jobs/", 5, &keys, ERR));
    CHECK(fencelock_key_list_len(keys) == 2);
    const uint8_t *key = NULL;
    size_t key_len = 0;
    CHECK(fencelock_key_list_get(keys, 1, &key, &key_len) == FENCELOCK_OK);
    CHECK(key_len == 6 && memcmp(key, "jobs/2", 6) == 0);
    CHECK(fencelock_key_list_get(keys, 2, &key, &key_len) == FENCELOCK_INVALID_ARGUMENT);
    CHECK(key_len == 6);
    CHECK(fencelock_key_list_get(keys, 0, NULL, &key_len) == FENCELOCK_NULL_POINTER);
    CHECK(fencelock_key_list_get(keys, 0, &key, NULL) == FENCELOCK_NULL_POINTER);
    CHECK(fencelock_key_list_get(NULL, 0, &key, &key_len) == FENCELOCK_NULL_POINTER);
    CHECK(fencelock_key_list_len(NULL) == 0);
    fencelock_key_list_free(keys);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_keys(store, NULL, 0, &keys, ERR));
    CHECK(fencelock_key_list_len(keys) >= 3);
    fencelock_key_list_free(keys);

    fencelock_holder_free(a);
    fencelock_holder_free(b);
}

static void null_pointers(const fencelock_store *s, const char *path) {
    fencelock_holder *h = acquire(s, "null-h", 60000);
    uint64_t t = fencelock_holder_token(h);
    const uint8_t *k = (const uint8_t *)"key", *v = (const uint8_t *)"val";
    fencelock_store *so = NULL;
    fencelock_holder *ho = NULL;
    uint8_t *bo = NULL;
    size_t lo = 0;
    uint64_t nu = 0;
    bool fo = false;
    fencelock_lock_list *lko = NULL;
    fencelock_key_list *kyo = NULL;
    const int NP = FENCELOCK_NULL_POINTER;

    CHECK_STATUS(NP, fencelock_store_open(NULL, &so, ERR));
    CHECK_STATUS(NP, fencelock_store_open(path, NULL, ERR));
    CHECK_STATUS(NP, fencelock_store_open_with(NULL, 0, 0, &so, ERR));
    CHECK_STATUS(NP, fencelock_store_open_with(path, 0, 0, NULL, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire(NULL, "n", 10, &ho, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire(s, NULL, 10, &ho, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire(s, "n", 10, NULL, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire_wait(NULL, "n", 10, 0, &ho, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire_wait(s, NULL, 10, 0, &ho, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire_wait(s, "n", 10, 0, NULL, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire_and_put(NULL, "n", 10, k, 3, v, 3, &ho, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire_and_put(s, NULL, 10, k, 3, v, 3, &ho, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire_and_put(s, "n", 10, NULL, 3, v, 3, &ho, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire_and_put(s, "n", 10, k, 3, NULL, 3, &ho, ERR));
    CHECK_STATUS(NP, fencelock_store_acquire_and_put(s, "n", 10, k, 3, v, 3, NULL, ERR));
    CHECK_STATUS(NP, fencelock_store_put(NULL, k, 3, v, 3, t, ERR));
    CHECK_STATUS(NP, fencelock_store_put(s, NULL, 3, v, 3, t, ERR));
    CHECK_STATUS(NP, fencelock_store_put(s, k, 3, NULL, 3, t, ERR));
    CHECK_STATUS(NP, fencelock_store_get(NULL, k, 3, &bo, &lo, &nu, ERR));
    CHECK_STATUS(NP, fencelock_store_get(s, NULL, 3, &bo, &lo, &nu, ERR));
    CHECK_STATUS(NP, fencelock_store_get(s, k, 3, NULL, &lo, &nu, ERR));
    CHECK_STATUS(NP, fencelock_store_get(s, k, 3, &bo, NULL, &nu, ERR));
    CHECK_STATUS(NP, fencelock_store_delete(NULL, k, 3, t, &fo, ERR));
    CHECK_STATUS(NP, fencelock_store_delete(s, NULL, 3, t, &fo, ERR));
    CHECK_STATUS(NP, fencelock_store_fence(NULL, "r", t, ERR));
    CHECK_STATUS(NP, fencelock_store_fence(s, NULL, t, ERR));
    CHECK_STATUS(NP, fencelock_store_fence_token(NULL, "r", &nu, ERR));
    CHECK_STATUS(NP, fencelock_store_fence_token(s, NULL, &nu, ERR));
    CHECK_STATUS(NP, fencelock_store_fence_token(s, "r", NULL, ERR));
    CHECK_STATUS(NP, fencelock_store_locks(NULL, &lko, ERR));
    CHECK_STATUS(NP, fencelock_store_locks(s, NULL, ERR));
    CHECK_STATUS(NP, fencelock_store_keys(NULL, k, 3, &kyo, ERR));
    CHECK_STATUS(NP, fencelock_store_keys(s, NULL, 3, &kyo, ERR));
    CHECK_STATUS(NP, fencelock_store_keys(s, k, 3, NULL, ERR));
    CHECK_STATUS(NP, fencelock_holder_extend(NULL, 10, ERR));
    CHECK_STATUS(NP, fencelock_holder_is_held(NULL, &fo, ERR));
    CHECK_STATUS(NP, fencelock_holder_is_held(h, NULL, ERR));
    CHECK_STATUS(NP, fencelock_holder_put(NULL, k, 3, v, 3, ERR));
    CHECK_STATUS(NP, fencelock_holder_put(h, NULL, 3, v, 3, ERR));
    CHECK_STATUS(NP, fencelock_holder_put(h, k, 3, NULL, 3, ERR));
    CHECK_STATUS(NP, fencelock_holder_delete(NULL, k, 3, &fo, ERR));
    CHECK_STATUS(NP, fencelock_holder_delete(h, NULL, 3, &fo, ERR));
    CHECK_STATUS(NP, fencelock_holder_release(NULL, ERR));
    CHECK_STATUS(NP, fencelock_holder_keep_alive(NULL, 300, ERR));
    CHECK_STATUS(NP, fencelock_holder_wait_lost(NULL, 0, &fo, ERR));
    CHECK_STATUS(NP, fencelock_holder_wait_lost(h, 0, NULL, ERR));
    /* The same without an error out-parameter. */
    CHECK(fencelock_store_acquire(s, NULL, 10, &ho, NULL) == NP);
    CHECK(fencelock_store_put(s, NULL, 3, v, 3, t, NULL) == NP);
    /* Nothing was written by a refused call. */
    CHECK(so == NULL && ho == NULL && bo == NULL && lo == 0 && nu == 0 && !fo && lko == NULL && kyo == NULL);
    CHECK_STATUS(FENCELOCK_NOT_FOUND, fencelock_store_get(s, k, 3, &bo, &lo, NULL, ERR));

    /* Accessors and destructors accept NULL. */
    CHECK(fencelock_holder_token(NULL) == 0);
    CHECK(fencelock_holder_name(NULL) == NULL);
    CHECK(fencelock_error_status(NULL) == NP);
    CHECK(fencelock_error_message(NULL) == NULL);
    CHECK(fencelock_error_token(NULL) == 0 && fencelock_error_highest(NULL) == 0);
    CHECK(fencelock_error_pid(NULL) == 0 && fencelock_error_remaining_ms(NULL) == 0);
    fencelock_error_free(NULL);
    fencelock_holder_free(NULL);
    fencelock_store_close(NULL);
    fencelock_buffer_free(NULL, 0);
    fencelock_lock_list_free(NULL);
    fencelock_key_list_free(NULL);
    fencelock_holder_free(h);
}

static void invalid_arguments(const fencelock_store *s, const char *path, const char *dir) {
    fencelock_holder *h = acquire(s, "invalid-h", 60000);
    uint64_t t = fencelock_holder_token(h);
    const char *not_utf8 = "bad\xff\xfe";
    const uint8_t *k = (const uint8_t *)"key";
    char long_name[1100];
    memset(long_name, 'x', 1025);
    long_name[1025] = '\0';
    size_t big_len = 16 * 1024 * 1024 + 1;
    uint8_t *big = calloc(big_len, 1);
    fencelock_store *so = (fencelock_store *)0x1;
    fencelock_holder *ho = (fencelock_holder *)0x1;
    fencelock_key_list *kyo = (fencelock_key_list *)0x1;
    uint64_t nu = 5;
    const int IA = FENCELOCK_INVALID_ARGUMENT;

    CHECK_STATUS(IA, fencelock_store_open(not_utf8, &so, ERR));
    CHECK_STATUS(IA, fencelock_store_open(dir, &so, ERR)); /* a directory */
    CHECK_STATUS(IA, fencelock_store_open_with(path, 2, 0, &so, ERR));
    CHECK_STATUS(IA, fencelock_store_open_with(path, -1, 0, &so, ERR));
    CHECK_STATUS(IA, fencelock_store_open_with(path, 0, (1u << 30) + 1, &so, ERR));
    CHECK_STATUS(IA, fencelock_store_acquire(s, not_utf8, 10, &ho, ERR));
    CHECK_STATUS(IA, fencelock_store_acquire(s, "", 10, &ho, ERR));
    CHECK_STATUS(IA, fencelock_store_acquire(s, long_name, 10, &ho, ERR));
    CHECK_STATUS(IA, fencelock_store_acquire(s, "n", 0, &ho, ERR));
    CHECK_STATUS(IA, fencelock_store_acquire(s, "n", UINT64_MAX, &ho, ERR));
    CHECK_STATUS(IA, fencelock_store_acquire_wait(s, not_utf8, 10, 0, &ho, ERR));
    CHECK_STATUS(IA, fencelock_store_acquire_and_put(s, "n", 10, NULL, 0, NULL, 0, &ho, ERR));
    CHECK_STATUS(IA, fencelock_store_acquire_and_put(s, "n", 10, k, 3, big, big_len, &ho, ERR));
    CHECK_STATUS(IA, fencelock_store_put(s, NULL, 0, NULL, 0, t, ERR));
    CHECK_STATUS(IA, fencelock_store_put(s, (const uint8_t *)long_name, 1025, NULL, 0, t, ERR));
    CHECK_STATUS(IA, fencelock_store_put(s, k, 3, big, big_len, t, ERR));
    CHECK_STATUS(IA, fencelock_store_put(s, k, 3, NULL, 0, 0, ERR));
    CHECK_STATUS(IA, fencelock_store_put(s, k, 3, NULL, 0, t + 1000, ERR));
    CHECK_STATUS(IA, fencelock_store_delete(s, k, 3, 0, NULL, ERR));
    CHECK_STATUS(IA, fencelock_store_fence(s, not_utf8, t, ERR));
    CHECK_STATUS(IA, fencelock_store_fence(s, "r", t + 1000, ERR));
    CHECK_STATUS(IA, fencelock_store_fence(s, "r", 0, ERR));
    CHECK_STATUS(IA, fencelock_store_fence_token(s, not_utf8, &nu, ERR));
    CHECK_STATUS(IA, fencelock_store_keys(s, (const uint8_t *)long_name, 1025, &kyo, ERR));
    CHECK_STATUS(IA, fencelock_holder_extend(h, 0, ERR));
    CHECK_STATUS(IA, fencelock_holder_put(h, NULL, 0, NULL, 0, ERR));
    CHECK_STATUS(IA, fencelock_holder_put(h, k, 3, big, big_len, ERR));
    CHECK_STATUS(IA, fencelock_holder_delete(h, NULL, 0, NULL, ERR));
    CHECK_STATUS(IA, fencelock_holder_keep_alive(h, 1, ERR));
    /* A careless length (`len - 1` of 0 is SIZE_MAX) is refused before the byte behind the
       pointer, on the heap so that valgrind sees a read past it, is touched. */
    uint8_t *one = malloc(1);
    one[0] = 'k';
    uint8_t *vo = (uint8_t *)0x1;
    size_t vlo = 5;
    bool existed = true;
    CHECK_STATUS(IA, fencelock_store_put(s, one, SIZE_MAX, one, 1, t, ERR));
    CHECK_STATUS(IA, fencelock_store_put(s, one, 1, one, SIZE_MAX, t, ERR));
    CHECK_STATUS(IA, fencelock_store_get(s, one, SIZE_MAX, &vo, &vlo, &nu, ERR));
    CHECK_STATUS(IA, fencelock_store_delete(s, one, SIZE_MAX, t, &existed, ERR));
    CHECK_STATUS(IA, fencelock_store_keys(s, one, SIZE_MAX, &kyo, ERR));
    CHECK_STATUS(IA, fencelock_store_acquire_and_put(s, "n", 10, one, SIZE_MAX, one, 1, &ho, ERR));
    CHECK_STATUS(IA, fencelock_store_acquire_and_put(s, "n", 10, one, 1, one, SIZE_MAX, &ho, ERR));
    CHECK_STATUS(IA, fencelock_holder_put(h, one, SIZE_MAX, one, 1, ERR));
    CHECK_STATUS(IA, fencelock_holder_put(h, one, 1, one, SIZE_MAX, ERR));
    CHECK_STATUS(IA, fencelock_holder_delete(h, one, SIZE_MAX, &existed, ERR));
    CHECK(vo == (uint8_t *)0x1 && vlo == 5 && existed);
    free(one);
    CHECK(so == (fencelock_store *)0x1 && ho == (fencelock_holder *)0x1 && kyo == (fencelock_key_list *)0x1 && nu == 5);
    free(big);
    fencelock_holder_free(h);
}

static void open_failures(const scratch *sc) {
    char path[256];
    fencelock_store *so = (fencelock_store *)0x1;

    snprintf(path, sizeof path, "%s/no/such/dir/locks.db", sc->dir);
    CHECK_STATUS(FENCELOCK_IO, fencelock_store_open(path, &so, ERR));

    snprintf(path, sizeof path, "%s/notes.txt", sc->dir);
    FILE *f = fopen(path, "w");
    fputs("not a database at all", f);
    fclose(f);
    CHECK_STATUS(FENCELOCK_NOT_A_STORE, fencelock_store_open(path, &so, ERR));

    /* A redb header followed by garbage: damaged. */
    snprintf(path, sizeof path, "%s/damaged.db", sc->dir);
    f = fopen(path, "w");
    static const unsigned char magic[9] = {'r', 'e', 'd', 'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A};
    fwrite(magic, 1, sizeof magic, f);
    for (int i = 0; i < 8192; i++) {
        fputc((i * 7919) & 0xff, f);
    }
    fclose(f);
    CHECK_STATUS(FENCELOCK_CORRUPT, fencelock_store_open(path, &so, ERR));
    CHECK(so == (fencelock_store *)0x1);

    /* Single-process mode excludes a second open; its value limit applies. */
    snprintf(path, sizeof path, "%s/single.db", sc->dir);
    fencelock_store *single = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open_with(path, FENCELOCK_MODE_SINGLE_PROCESS, 4, &single, ERR));
    CHECK_STATUS(FENCELOCK_IN_USE, fencelock_store_open(path, &so, ERR));
    CHECK(so == (fencelock_store *)0x1);
    fencelock_holder *h = acquire(single, "x", 60000);
    uint64_t t = fencelock_holder_token(h);
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, fencelock_store_put(single, (const uint8_t *)"k", 1, (const uint8_t *)"12345", 5, t, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_put(single, (const uint8_t *)"k", 1, (const uint8_t *)"1234", 4, t, ERR));
    /* A holder outlives its store handle. */
    fencelock_store_close(single);
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(h, (const uint8_t *)"k", 1, (const uint8_t *)"abcd", 4, ERR));
    fencelock_holder_free(h);
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open_with(path, FENCELOCK_MODE_SINGLE_PROCESS, 0, &single, ERR));
    uint8_t *value = NULL;
    size_t len = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(single, (const uint8_t *)"k", 1, &value, &len, NULL, ERR));
    CHECK(len == 4 && memcmp(value, "abcd", 4) == 0);
    fencelock_buffer_free(value, len);
    fencelock_store_close(single);
}

/* A read-only store reads and refuses grants and writes; unknown flags are refused. */
static void read_only(const char *path) {
    fencelock_store *ro = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open_cancellable(path, FENCELOCK_MODE_MULTI_PROCESS,
                                                                FENCELOCK_OPEN_READ_ONLY, 0, 0,
                                                                NULL, &ro, ERR));
    fencelock_lock_list *locks = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_locks(ro, &locks, ERR));
    fencelock_lock_list_free(locks);
    fencelock_holder *h = (fencelock_holder *)0x1;
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT, fencelock_store_acquire(ro, "read-only", 1000, &h, ERR));
    CHECK(h == (fencelock_holder *)0x1);
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                 fencelock_store_put(ro, (const uint8_t *)"k", 1, NULL, 0, 1, ERR));
    fencelock_store_close(ro);
    fencelock_store *so = (fencelock_store *)0x1;
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                 fencelock_store_open_cancellable(path, FENCELOCK_MODE_MULTI_PROCESS, 0x80, 0, 0,
                                                  NULL, &so, ERR));
    CHECK(so == (fencelock_store *)0x1);
}

int main(void) {
    scratch sc;
    scratch_make(&sc);
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(sc.path, &store, ERR));

    version_and_status_strings();
    fenced_values(store);
    expiry_and_takeover(store);
    remaining_time(store);
    fences_and_lists(store);
    null_pointers(store, sc.path);
    invalid_arguments(store, sc.path, sc.dir);
    open_failures(&sc);
    read_only(sc.path);

    fencelock_store_close(store);
    scratch_remove(&sc);
    return check_report("test_api");
}
