#include "core/storage.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/check.h"

namespace loom {

std::shared_ptr<Storage> Storage::alloc(size_t nbytes, bool zero) {
    auto s = std::shared_ptr<Storage>(new Storage());
    size_t rounded = (nbytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    s->data_ = std::aligned_alloc(64, rounded);
    LOOM_CHECK(s->data_ != nullptr, "out of memory allocating {} bytes", nbytes);
    if (zero) std::memset(s->data_, 0, rounded);
    s->nbytes_ = nbytes;
    void* p = s->data_;
    s->release_ = [p] { std::free(p); };
    return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, std::function<void()> release,
                                       Device device) {
    auto s = std::shared_ptr<Storage>(new Storage());
    s->data_ = data;
    s->nbytes_ = nbytes;
    s->device_ = device;
    s->release_ = std::move(release);
    return s;
}

Storage::~Storage() {
    if (release_) release_();
}

}  // namespace loom
