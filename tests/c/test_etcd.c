/* The seed walkthrough through the C ABI on an etcd store: the library built with the `etcd`
   feature, the store string in $FENCELOCK_ETCD_URL (scripts/with-etcd.sh starts a node and sets
   it). A acquires payment-export and gets token N; A stops renewing (as when paused) and its
   lease ends; B acquires with a higher token and writes; A's writes with N are refused and B's
   data stays. */
#include "check.h"

#define KEY ((const uint8_t *)"payments/today.csv")
#define KEY_LEN (sizeof "payments/today.csv" - 1)
#define TTL_MS 2000 /* etcd's shortest lease */

int main(void) {
    const char *url = getenv("FENCELOCK_ETCD_URL");
    if (url == NULL || url[0] == '\0') {
        fprintf(stderr, "test_etcd: FENCELOCK_ETCD_URL is not set; run it through "
                        "scripts/with-etcd.sh (make test-etcd does)\n");
        return 1;
    }
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(url, &store, ERR));
    if (store == NULL) {
        return check_report("test_etcd");
    }
    /* Below etcd's minimum TTL: refused, nothing granted. */
    fencelock_holder *none = NULL;
    CHECK_STATUS(FENCELOCK_INVALID_ARGUMENT,
                 fencelock_store_acquire(store, "payment-export", 500, &none, ERR));
    CHECK(none == NULL);

    fencelock_holder *a = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "payment-export", TTL_MS, &a, ERR));
    uint64_t n = fencelock_holder_token(a);
    CHECK(n > 0);

    /* B, another open of the store (this thread's own wait through A's store would be refused
       with WOULD_DEADLOCK), waits until A's lease has ended. */
    fencelock_store *store_b = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(url, &store_b, ERR));
    fencelock_holder *b = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire_wait(store_b, "payment-export", 30000, 30000,
                                                            &b, ERR));
    uint64_t m = fencelock_holder_token(b);
    CHECK(m > n);
    CHECK_STATUS(FENCELOCK_OK,
                 fencelock_store_put(store, KEY, KEY_LEN, (const uint8_t *)"B", 1, m, ERR));

    fencelock_error *err = NULL;
    CHECK(fencelock_store_put(store, KEY, KEY_LEN, (const uint8_t *)"A", 1, n, &err) ==
          FENCELOCK_STALE_TOKEN);
    CHECK(fencelock_error_token(err) == n && fencelock_error_highest(err) == m);
    fencelock_error_free(err);
    CHECK_STATUS(FENCELOCK_LOCK_LOST,
                 fencelock_holder_put(a, KEY, KEY_LEN, (const uint8_t *)"A", 1, ERR));

    uint8_t *value = NULL;
    size_t len = 0;
    uint64_t token = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(store, KEY, KEY_LEN, &value, &len, &token, ERR));
    CHECK(len == 1 && value != NULL && value[0] == 'B' && token == m);
    fencelock_buffer_free(value, len);

    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_release(b, ERR));
    /* A's lease ended before its release: the release says so, once. */
    CHECK_STATUS(FENCELOCK_LOCK_LOST, fencelock_holder_release(a, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_release(a, ERR));
    fencelock_holder_free(a);
    fencelock_holder_free(b);
    fencelock_store_close(store_b);
    fencelock_store_close(store);
    return check_report("test_etcd");
}
