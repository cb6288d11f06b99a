/* A damaged store never prints on the host's stderr: every page of a store zeroed in turn, the
   store opened, read and closed through the C ABI with stderr captured. The damage surfaces
   as a status (CORRUPT, STORAGE, ...) from the call that met it, never as a panic message. */
#include <fcntl.h>
#include <sys/stat.h>

#include "check.h"

#define PAGE 4096

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int acceptable(fencelock_status status) {
    return status == FENCELOCK_OK || status == FENCELOCK_CORRUPT || status == FENCELOCK_STORAGE ||
           status == FENCELOCK_NOT_A_STORE || status == FENCELOCK_NOT_FOUND || status == FENCELOCK_IO;
}

/* Opens, reads and closes the store at `path`; returns how many calls failed. */
static int exercise(const char *path) {
    int failed = 0;
    fencelock_store *store = NULL;
    fencelock_status status = fencelock_store_open(path, &store, NULL);
    CHECK(acceptable(status));
    if (status != FENCELOCK_OK) {
        return 1;
    }
    uint8_t *value = NULL;
    size_t len = 0;
    status = fencelock_store_get(store, (const uint8_t *)"k3", 2, &value, &len, NULL, NULL);
    CHECK(acceptable(status));
    failed += status != FENCELOCK_OK;
    fencelock_buffer_free(value, len);
    fencelock_lock_list *locks = NULL;
    status = fencelock_store_locks(store, &locks, NULL);
    CHECK(acceptable(status));
    failed += status != FENCELOCK_OK;
    fencelock_lock_list_free(locks);
    fencelock_key_list *keys = NULL;
    status = fencelock_store_keys(store, NULL, 0, &keys, NULL);
    CHECK(acceptable(status));
    failed += status != FENCELOCK_OK;
    fencelock_key_list_free(keys);
    fencelock_store_close(store);
    return failed;
}

int main(void) {
    scratch sc;
    scratch_make(&sc);
    fencelock_store *store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(sc.path, &store, ERR));
    fencelock_holder *holder = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(store, "job", 600000, &holder, ERR));
    for (int i = 0; i < 5; i++) {
        char key[8];
        snprintf(key, sizeof key, "k%d", i);
        CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(holder, (const uint8_t *)key, strlen(key),
                                                        (const uint8_t *)"value", 5, ERR));
    }
    fencelock_holder_free(holder);
    fencelock_store_close(store);

    long size = file_size(sc.path);
    CHECK(size >= 2 * PAGE);
    unsigned char *pristine = malloc((size_t)size);
    FILE *in = fopen(sc.path, "rb");
    CHECK(in != NULL && fread(pristine, 1, (size_t)size, in) == (size_t)size);
    fclose(in);

    char damaged[160], captured[160];
    snprintf(damaged, sizeof damaged, "%s/damaged.db", sc.dir);
    snprintf(captured, sizeof captured, "%s/stderr.txt", sc.dir);
    int saved = dup(2);
    int sink = open(captured, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(saved >= 0 && sink >= 0);
    int pages_failing = 0;
    for (long page = 1; page < size / PAGE; page++) {
        unsigned char *bytes = malloc((size_t)size);
        memcpy(bytes, pristine, (size_t)size);
        memset(bytes + page * PAGE, 0, PAGE);
        unlink(damaged);
        FILE *out = fopen(damaged, "wb");
        CHECK(out != NULL && fwrite(bytes, 1, (size_t)size, out) == (size_t)size);
        fclose(out);
        free(bytes);
        dup2(sink, 2);
        pages_failing += exercise(damaged) > 0;
        dup2(saved, 2);
    }
    close(sink);
    close(saved);
    free(pristine);
    long noise = file_size(captured);
    if (noise != 0) {
        char text[512] = {0};
        FILE *log = fopen(captured, "r");
        if (log != NULL) {
            size_t got = fread(text, 1, sizeof text - 1, log);
            text[got] = '\0';
            fclose(log);
        }
        fprintf(stderr, "the library printed %ld bytes on stderr:\n%s\n", noise, text);
    }
    CHECK(noise == 0);
    /* The damage was met: some pages make calls fail. */
    CHECK(pages_failing > 0);
    printf("test_damaged: %ld pages zeroed in turn, %d made a call fail, %ld bytes on stderr\n",
           size / PAGE - 1, pages_failing, noise);
    scratch_remove(&sc);
    return check_report("test_damaged");
}
