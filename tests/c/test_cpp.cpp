// The header compiles as C++ with -Wall -Wextra -Werror -pedantic, and the library works from
// C++ with RAII owners for its handles.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <unistd.h>

#include "fencelock.h"

namespace {

struct StoreClose {
    void operator()(fencelock_store *store) const { fencelock_store_close(store); }
};
struct HolderFree {
    void operator()(fencelock_holder *holder) const { fencelock_holder_free(holder); }
};
struct ErrorFree {
    void operator()(fencelock_error *err) const { fencelock_error_free(err); }
};
using Store = std::unique_ptr<fencelock_store, StoreClose>;
using Holder = std::unique_ptr<fencelock_holder, HolderFree>;
using Error = std::unique_ptr<fencelock_error, ErrorFree>;

int failures = 0;

void check(bool ok, const char *what) {
    if (!ok) {
        ++failures;
        std::fprintf(stderr, "test_cpp: check failed: %s\n", what);
    }
}

}  // namespace

int main() {
    char dir[] = "/tmp/fencelock-cpp-XXXXXX";
    if (mkdtemp(dir) == nullptr) {
        return 2;
    }
    const std::string path = std::string(dir) + "/locks.db";

    fencelock_store *raw_store = nullptr;
    check(fencelock_store_open(path.c_str(), &raw_store, nullptr) == FENCELOCK_OK, "open");
    Store store(raw_store);

    fencelock_holder *raw_holder = nullptr;
    check(fencelock_store_acquire(store.get(), "cpp", 60000, &raw_holder, nullptr) == FENCELOCK_OK, "acquire");
    Holder holder(raw_holder);
    const std::string value = "from C++";
    check(fencelock_holder_put(holder.get(), reinterpret_cast<const uint8_t *>("k"), 1,
                               reinterpret_cast<const uint8_t *>(value.data()), value.size(),
                               nullptr) == FENCELOCK_OK,
          "holder_put");

    fencelock_holder *second = nullptr;
    fencelock_error *raw_err = nullptr;
    check(fencelock_store_acquire(store.get(), "cpp", 1000, &second, &raw_err) == FENCELOCK_LOCKED, "locked");
    Error err(raw_err);
    check(second == nullptr, "holder_out untouched");
    check(fencelock_error_token(err.get()) == fencelock_holder_token(holder.get()), "holder token");

    uint8_t *buf = nullptr;
    size_t len = 0;
    check(fencelock_store_get(store.get(), reinterpret_cast<const uint8_t *>("k"), 1, &buf, &len, nullptr, nullptr) == FENCELOCK_OK, "get");
    check(std::string(reinterpret_cast<const char *>(buf), len) == value, "value");
    fencelock_buffer_free(buf, len);

    check(fencelock_version_number() == FENCELOCK_VERSION_NUMBER &&
              FENCELOCK_AT_LEAST_VERSION(FENCELOCK_VERSION_MAJOR, FENCELOCK_VERSION_MINOR, 0),
          "version number");

    holder.reset();
    store.reset();
    std::string command = std::string("rm -rf '") + dir + "'";
    check(std::system(command.c_str()) == 0, "cleanup");
    std::printf("test_cpp: %s, %d failed\n", fencelock_version(), failures);
    return failures == 0 ? 0 : 1;
}
