/* FENCELOCK_OPEN_WRITE_LOG: the seed's walkthrough with fenced writes through the redo log
   beside the store file. A's lease runs out, B takes the lock with the next token and writes;
   A's late writes are refused and B's value stands, in the store and after the last close. */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>

#include "check.h"

static const uint8_t KEY[] = "payments/today.csv";
#define KEY_LEN (sizeof KEY - 1)
static const char EXPORT_B[] = "id,amount\n1,100\n2,250\n";
static const char EXPORT_A[] = "id,amount\n1,100\n";

/* Whether `dir` holds a segment of the redo log of its store locks.db (locks.db.wal.<seq>). */
static bool has_log_segment(const char *dir) {
    DIR *listing = opendir(dir);
    if (listing == NULL) {
        perror("opendir");
        exit(2);
    }
    bool found = false;
    for (struct dirent *entry; (entry = readdir(listing)) != NULL;) {
        if (strncmp(entry->d_name, "locks.db.wal.", strlen("locks.db.wal.")) == 0) found = true;
    }
    closedir(listing);
    return found;
}

static fencelock_store *open_store(const char *path, uint32_t flags) {
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open_cancellable(
        path, FENCELOCK_MODE_MULTI_PROCESS, flags, 0, 0, NULL, &store, ERR));
    CHECK(store != NULL);
    return store;
}

/* B's export under its token, as the store returns it. */
static void check_value_is_bs(const fencelock_store *store, uint64_t token_b) {
    uint8_t *value = NULL;
    size_t len = 0;
    uint64_t token = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(store, KEY, KEY_LEN, &value, &len, &token, ERR));
    CHECK(token == token_b);
    CHECK(len == strlen(EXPORT_B) && value != NULL && memcmp(value, EXPORT_B, len) == 0);
    fencelock_buffer_free(value, len);
}

static void walkthrough(const scratch *s) {
    /* Worker A and worker B each open the store, as two processes would. */
    fencelock_store *store_a = open_store(s->path, FENCELOCK_OPEN_WRITE_LOG);
    fencelock_store *store_b = open_store(s->path, FENCELOCK_OPEN_WRITE_LOG);

    /* A takes the lock with a short lease, gets N, and stalls past it. */
    fencelock_holder *a = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store_a, "payment-export", 100, &a, ERR));
    uint64_t n = fencelock_holder_token(a);
    CHECK(n > 0);
    bool lost = false;
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_wait_lost(a, 10000, &lost, ERR));
    CHECK(lost);

    /* B takes the lock over with N+1 and writes the export, through the log. */
    fencelock_holder *b = NULL;
    CHECK_STATUS(FENCELOCK_OK,
                 fencelock_store_acquire_wait(store_b, "payment-export", 60000, 10000, &b, ERR));
    uint64_t n1 = fencelock_holder_token(b);
    CHECK(n1 == n + 1);
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(b, KEY, KEY_LEN, (const uint8_t *)EXPORT_B,
                                                    strlen(EXPORT_B), ERR));
    CHECK(has_log_segment(s->dir));

    /* A wakes up: its holder's write is LOCK_LOST, its token's STALE_TOKEN, naming N+1. */
    fencelock_error *err = NULL;
    CHECK(fencelock_holder_put(a, KEY, KEY_LEN, (const uint8_t *)EXPORT_A, strlen(EXPORT_A),
                               &err) == FENCELOCK_LOCK_LOST);
    CHECK(fencelock_error_token(err) == n && fencelock_error_highest(err) == n1);
    fencelock_error_free(err);
    err = NULL;
    CHECK(fencelock_store_put(store_a, KEY, KEY_LEN, (const uint8_t *)EXPORT_A, strlen(EXPORT_A),
                              n, &err) == FENCELOCK_STALE_TOKEN);
    CHECK(fencelock_error_token(err) == n && fencelock_error_highest(err) == n1);
    fencelock_error_free(err);
    bool existed = true;
    CHECK_STATUS(FENCELOCK_STALE_TOKEN, fencelock_store_delete(store_a, KEY, KEY_LEN, n, &existed, ERR));
    CHECK(existed); /* untouched on failure */

    /* B's export stands, seen through either open. */
    check_value_is_bs(store_a, n1);
    check_value_is_bs(store_b, n1);
    fencelock_holder_free(a);
    fencelock_holder_free(b);
    fencelock_store_close(store_a);
    fencelock_store_close(store_b);

    /* The last close moved the log into the store file: a read-only open reads it there. */
    fencelock_store *reader = open_store(s->path, FENCELOCK_OPEN_READ_ONLY);
    check_value_is_bs(reader, n1);
    fencelock_store_close(reader);
}

/* Without the flag a fenced write commits to the store file and makes no log. */
static void without_the_flag(const scratch *s) {
    fencelock_store *store = open_store(s->path, 0);
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "payment-export", 60000, &holder, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(holder, KEY, KEY_LEN, (const uint8_t *)EXPORT_B,
                                                    strlen(EXPORT_B), ERR));
    CHECK(!has_log_segment(s->dir));
    fencelock_holder_free(holder);
    fencelock_store_close(store);
}

int main(void) {
    scratch s;
    scratch_make(&s);
    walkthrough(&s);
    scratch_remove(&s);
    scratch_make(&s);
    without_the_flag(&s);
    scratch_remove(&s);
    return check_report("test_write_log");
}
