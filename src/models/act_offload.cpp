// ActOffload: the copy-queue choreography (see act_offload.h).
#include "models/act_offload.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

int64_t ActOffload::ring_size(const std::vector<int64_t>& hidden, int64_t horizon) {
    const int64_t n = int64_t(hidden.size());
    int64_t R = std::min<int64_t>(std::max<int64_t>(horizon, 0) + 1, n);
    // An application whose input and output are both offloaded (checkpointing
    // every layer) must not read and write one slot.
    for (size_t i = 1; i < hidden.size(); ++i)
        if (hidden[i] == hidden[i - 1] + 1) R = std::max<int64_t>(R, 2);
    return R;
}

void ActOffload::plan(Backend& be, std::vector<int64_t> hidden, int64_t horizon, size_t bytes) {
    be.synchronize();  // the old ring and host buffer may still be in a copy
    be_ = &be;
    hidden_ = std::move(hidden);
    R_ = ring_size(hidden_, horizon);
    bytes_ = bytes;
    index_.clear();
    for (size_t i = 0; i < hidden_.size(); ++i) {
        const int64_t h = hidden_[i];
        LOOM_ASSERT(h >= 0 && (i == 0 || h > hidden_[i - 1]), "offloaded hidden states unsorted");
        if (int64_t(index_.size()) <= h) index_.resize(size_t(h + 1), -1);
        index_[size_t(h)] = int64_t(i);
    }
    ring_.assign(size_t(R_), nullptr);
    const int64_t leaving = first_resident();
    const size_t need = size_t(std::max<int64_t>(leaving, 0)) * bytes_;
    if (need == 0)
        host_.reset();
    else if (!host_ || host_->nbytes() < need)
        host_ = be.alloc_host(need);
    // Fresh markers: a never-marked one is passed at once, so the first wait
    // on each slot does not hold anything up.
    auto fresh = [&](std::vector<std::unique_ptr<Backend::Marker>>& v) {
        v.clear();
        for (int64_t r = 0; r < R_; ++r) v.push_back(be.new_marker());
    };
    fresh(out_done_);
    fresh(in_done_);
    fresh(used_);
    read_ = active() ? be.new_marker() : nullptr;
}

void* ActOffload::slot_of(int64_t h) const {
    const int64_t i = index(h);
    return i < 0 ? nullptr : ring_[slot(i)];
}

void ActOffload::before_write(int64_t h) {
    const int64_t i = index(h);
    if (i < 0) return;
    be_->wait_for(Backend::Queue::compute, *out_done_[slot(i)]);
}

void ActOffload::after_read(int64_t h) {
    const int64_t i = index(h);
    if (i < 0 || i >= first_resident()) return;
    be_->mark(*read_, Backend::Queue::compute);
    be_->wait_for(Backend::Queue::copy, *read_);
    be_->copy_out(host(i), ring_[slot(i)], bytes_);
    be_->mark(*out_done_[slot(i)], Backend::Queue::copy);
}

void ActOffload::begin_backward() {
    next_in_ = first_resident() - 1;
    occupied_ = R_;  // the last R inputs are still in their slots
}

void ActOffload::prefetch_for(int64_t a) {
    while (next_in_ >= 0 && hidden_[size_t(next_in_)] <= a && occupied_ < R_) {
        const int64_t i = next_in_--;
        // The slot's previous occupant (i + R) has had its backward enqueued.
        be_->wait_for(Backend::Queue::copy, *used_[slot(i)]);
        be_->copy_back(ring_[slot(i)], host(i), bytes_);
        be_->mark(*in_done_[slot(i)], Backend::Queue::copy);
        ++occupied_;
    }
}

void ActOffload::wait(int64_t h) {
    const int64_t i = index(h);
    if (i < 0 || i >= first_resident()) return;
    be_->wait_for(Backend::Queue::compute, *in_done_[slot(i)]);
}

void ActOffload::release(int64_t h) {
    const int64_t i = index(h);
    if (i < 0) return;
    be_->mark(*used_[slot(i)], Backend::Queue::compute);
    --occupied_;
}

}  // namespace loom
