/* The seed's walkthrough through a server: `fencelock serve` (the program named by
   $FENCELOCK_CLI, as make test sets it) holds the store file alone, so every call below can
   only have gone through it. A acquires payment-export and gets token N; A pauses past its
   lease; B acquires and gets a higher token and writes with it; A's write with N is refused,
   and B's data stays. */
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>

#include "check.h"

static const uint8_t KEY[] = "payments/today.csv";
#define KEY_LEN (sizeof KEY - 1)

/* Starts `fencelock serve` for `path`; returns its pid once it serves. */
static pid_t start_server(const char *cli, const char *path) {
    int report[2];
    if (pipe(report) != 0) {
        perror("pipe");
        exit(2);
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(report[1], STDERR_FILENO);
        close(report[0]);
        execl(cli, cli, "--db", path, "serve", (char *)NULL);
        perror("exec fencelock");
        _exit(127);
    }
    close(report[1]);
    char line[512];
    FILE *from = fdopen(report[0], "r");
    if (fgets(line, sizeof line, from) == NULL || strstr(line, "serving") == NULL) {
        fprintf(stderr, "the server did not start: %s\n", line);
        exit(2);
    }
    fclose(from);
    return pid;
}

int main(void) {
    const char *cli = getenv("FENCELOCK_CLI");
    if (cli == NULL || access(cli, X_OK) != 0) {
        fprintf(stderr, "test_served needs $FENCELOCK_CLI, the fencelock program (make test sets it)\n");
        return 2;
    }
    scratch sc;
    scratch_make(&sc);
    pid_t server = start_server(cli, sc.path);

    fencelock_store *a_store = NULL, *b_store = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(sc.path, &a_store, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_open(sc.path, &b_store, ERR));
    fencelock_holder *a = NULL, *b = NULL;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(a_store, "payment-export", 100, &a, ERR));
    uint64_t n = fencelock_holder_token(a);
    usleep(300 * 1000); /* A is paused past its lease */
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_acquire(b_store, "payment-export", 30000, &b, ERR));
    CHECK(fencelock_holder_token(b) > n);
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(b, KEY, KEY_LEN, (const uint8_t *)"B", 1, ERR));
    CHECK_STATUS(FENCELOCK_LOCK_LOST, fencelock_holder_put(a, KEY, KEY_LEN, (const uint8_t *)"A", 1, ERR));
    CHECK_STATUS(FENCELOCK_STALE_TOKEN, fencelock_store_put(a_store, KEY, KEY_LEN, (const uint8_t *)"A", 1, n, ERR));
    uint8_t *value = NULL;
    size_t len = 0;
    uint64_t token = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_get(a_store, KEY, KEY_LEN, &value, &len, &token, ERR));
    CHECK(len == 1 && value[0] == 'B' && token == fencelock_holder_token(b));
    fencelock_buffer_free(value, len);

    uint32_t pid = 0;
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_server_pid(a_store, &pid, ERR));
    CHECK(pid == (uint32_t)server);

    /* The server still serves: it stops on SIGTERM, and exits 0. */
    int status = 0;
    CHECK(waitpid(server, &status, WNOHANG) == 0);
    kill(server, SIGTERM);
    CHECK(waitpid(server, &status, 0) == server && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* Without it, the stores use the file themselves. */
    CHECK_STATUS(FENCELOCK_OK, fencelock_holder_put(b, KEY, KEY_LEN, (const uint8_t *)"C", 1, ERR));
    CHECK_STATUS(FENCELOCK_OK, fencelock_store_server_pid(a_store, &pid, ERR));
    CHECK(pid == 0);

    fencelock_holder_free(a);
    fencelock_holder_free(b);
    fencelock_store_close(a_store);
    fencelock_store_close(b_store);
    scratch_remove(&sc);
    return check_report("test_served");
}
