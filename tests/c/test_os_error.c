/* fencelock_error_os_code: the errno behind a FENCELOCK_IO error the system reported, from
   real failures of the system (a missing directory, a path through a regular file, a directory
   that may not be written), and 0 for every error without such a cause and for NULL. */
#include <errno.h>
#include <sys/stat.h>

#include "check.h"

/* The status and errno of opening a store at `path`; the store is never opened. */
static fencelock_status open_errno(const char *path, int *os_code) {
    fencelock_store *store = (fencelock_store *)0x1;
    fencelock_error *err = NULL;
    fencelock_status status = fencelock_store_open(path, &store, &err);
    CHECK(store == (fencelock_store *)0x1);
    CHECK(err != NULL && fencelock_error_status(err) == status);
    *os_code = fencelock_error_os_code(err);
    fencelock_error_free(err);
    return status;
}

static void missing_directory(const scratch *s) {
    char path[256];
    int os_code = -1;
    snprintf(path, sizeof path, "%s/no/such/dir/locks.db", s->dir);
    CHECK(open_errno(path, &os_code) == FENCELOCK_IO);
    CHECK(os_code == ENOENT);
}

static void through_a_regular_file(const scratch *s) {
    char file[192], path[256];
    snprintf(file, sizeof file, "%s/plain-file", s->dir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/locks.db", file);
    int os_code = -1;
    CHECK(open_errno(path, &os_code) == FENCELOCK_IO);
    CHECK(os_code == ENOTDIR);
}

static void without_permission(const scratch *s) {
    char dir[192], path[256];
    if (geteuid() == 0) {
        /* Root passes permission bits; sysfs refuses to create files even for root. */
        snprintf(dir, sizeof dir, "/sys");
    } else {
        snprintf(dir, sizeof dir, "%s/locked", s->dir);
        CHECK(mkdir(dir, 0500) == 0);
    }
    snprintf(path, sizeof path, "%s/fencelock-test.db", dir);
    int os_code = -1;
    CHECK(open_errno(path, &os_code) == FENCELOCK_IO);
    CHECK(os_code == EACCES || os_code == EPERM);
    if (os_code != EACCES && os_code != EPERM) {
        fprintf(stderr, "open of %s: os code %d\n", path, os_code);
    }
}

/* Errors that are not the system's: 0. */
static void no_system_cause(const scratch *s) {
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(s->path, &store, ERR));
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "payment-export", 60000, &holder, ERR));

    fencelock_holder *second = NULL;
    fencelock_error *err = NULL;
    CHECK(fencelock_store_acquire(store, "payment-export", 1000, &second, &err) == FENCELOCK_LOCKED);
    CHECK(fencelock_error_os_code(err) == 0);
    CHECK(fencelock_store_acquire(store, "", 1000, &second, &err) == FENCELOCK_INVALID_ARGUMENT);
    CHECK(fencelock_error_os_code(err) == 0);
    CHECK(fencelock_store_acquire(store, "x", 1000, NULL, &err) == FENCELOCK_NULL_POINTER);
    CHECK(fencelock_error_os_code(err) == 0);
    fencelock_error_free(err);

    /* A file that is not a store is not an I/O error either. */
    char path[192];
    snprintf(path, sizeof path, "%s/notes.txt", s->dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fputs("not a database at all", f);
        fclose(f);
    }
    int os_code = -1;
    CHECK(open_errno(path, &os_code) == FENCELOCK_NOT_A_STORE);
    CHECK(os_code == 0);

    CHECK(fencelock_error_os_code(NULL) == 0);
    fencelock_holder_free(holder);
    fencelock_store_close(store);
}

int main(void) {
    scratch s;
    scratch_make(&s);
    missing_directory(&s);
    through_a_regular_file(&s);
    without_permission(&s);
    no_system_cause(&s);
    scratch_remove(&s);
    return check_report("test_os_error");
}
