// Loader: epoch orders, the per-rank split of global batches, and the
// background producer (see loader.h for the contract).
//
// The order of epoch e is a Fisher-Yates shuffle whose draw for position i is
// Philox block i of the stream keyed (seed, e, "SHUF"): a pure function of the
// seed and the epoch, identical on every rank, cached for the last two epochs
// (the producer runs ahead into the next epoch while the trainer may still
// ask about the current one).
#include "data/loader.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/check.h"
#include "core/cpu_bind.h"
#include "core/fault_points.h"
#include "core/philox.h"
#include "data/collate.h"

namespace loom {

namespace {

constexpr uint32_t k_shuffle_site = 0x53485546u;  // "SHUF"
constexpr size_t k_cached_orders = 2;

}  // namespace

namespace {

std::shared_ptr<const RowSource> checked_rows(std::shared_ptr<const FeatureSet> data) {
    LOOM_CHECK(data != nullptr, "loader: no feature set");
    for (const Feature& f : data->features)
        LOOM_CHECK(!f.ids.empty() && f.type_ids.size() == f.ids.size(),
                   "loader: a feature has {} ids and {} type ids; every row needs at least one token",
                   f.ids.size(), f.type_ids.size());
    return feature_rows(std::move(data));
}

}  // namespace

Loader::Loader(std::shared_ptr<const FeatureSet> data, LoaderOptions opts)
    : Loader(checked_rows(std::move(data)), std::move(opts)) {}

Loader::Loader(std::shared_ptr<const RowSource> rows, LoaderOptions opts)
    : rows_(std::move(rows)), opts_(std::move(opts)) {
    LOOM_CHECK(rows_ != nullptr, "loader: no rows");
    LOOM_CHECK(opts_.batch_size > 0, "loader: batch_size must be positive, got {}", opts_.batch_size);
    LOOM_CHECK(opts_.dp_size >= 1 && opts_.dp_rank >= 0 && opts_.dp_rank < opts_.dp_size,
               "loader: dp_rank {} is outside dp_size {}", opts_.dp_rank, opts_.dp_size);
    LOOM_CHECK(opts_.pad_to_multiple_of >= 0, "loader: pad_to_multiple_of must be >= 0, got {}",
               opts_.pad_to_multiple_of);
    LOOM_CHECK(opts_.pad_span_batches >= 0, "loader: pad_span_batches must be >= 0, got {}",
               opts_.pad_span_batches);
    opts_.prefetch = std::max(opts_.prefetch, 1);
    n_ = rows_->size();
    global_batch_ = opts_.batch_size * opts_.dp_size;
    LOOM_CHECK(n_ > 0, "loader: {} has no features", rows_->describe());
    LOOM_CHECK(batches_per_epoch() > 0,
               "loader: {} features are fewer than one global batch ({} per device x {} ranks) and "
               "dataloader_drop_last is set, so an epoch would have no batch",
               n_, opts_.batch_size, opts_.dp_size);
    if (rows_->task() == Task::masked_lm) masker_ = std::make_unique<const detail::MlmMasker>(opts_);
}

Loader::~Loader() { stop_producer(); }

int64_t Loader::batches_per_epoch() const {
    return opts_.drop_last ? n_ / global_batch_ : (n_ + global_batch_ - 1) / global_batch_;
}

LoaderPosition Loader::position() const { return pos_; }

double Loader::wait_seconds() const { return wait_s_; }

std::shared_ptr<const std::vector<int64_t>> Loader::epoch_order(int64_t epoch) const {
    {
        std::lock_guard<std::mutex> lk(order_mu_);
        for (const auto& [e, order] : orders_)
            if (e == epoch) return order;
    }
    auto order = std::make_shared<std::vector<int64_t>>(size_t(n_));
    std::iota(order->begin(), order->end(), int64_t(0));
    if (opts_.shuffle) {
        const PhiloxStream stream(opts_.seed, uint64_t(epoch), k_shuffle_site);
        for (int64_t i = n_ - 1; i > 0; --i) {
            const auto r = stream.block(uint64_t(i));
            const uint64_t bits = uint64_t(r[0]) | (uint64_t(r[1]) << 32);
            // NOTE: modulo bias is below n / 2^64, far under anything measurable.
            const int64_t j = int64_t(bits % uint64_t(i + 1));
            std::swap((*order)[size_t(i)], (*order)[size_t(j)]);
        }
    }
    std::lock_guard<std::mutex> lk(order_mu_);
    orders_.emplace_back(epoch, order);
    while (orders_.size() > k_cached_orders) orders_.pop_front();
    return order;
}

Loader::Range Loader::global_rows(int64_t batch) const {
    const int64_t begin = batch * global_batch_;
    return {begin, std::min(n_, begin + global_batch_)};
}

Loader::Range Loader::rank_rows(int64_t batch) const {
    const Range g = global_rows(batch);
    const int64_t n = g.end - g.begin;
    return {g.begin + opts_.dp_rank * n / opts_.dp_size, g.begin + (opts_.dp_rank + 1) * n / opts_.dp_size};
}

int64_t Loader::batch_length(const std::vector<int64_t>& order, int64_t batch, Range mine) const {
    if (mine.end == mine.begin) return 0;
    auto longest_in = [&](Range r, int64_t acc) {
        for (int64_t p = r.begin; p < r.end; ++p)
            acc = std::max(acc, rows_->length(order[size_t(p)]));
        return acc;
    };
    int64_t longest = 0;
    if (opts_.pad_span_batches <= 0) {
        longest = longest_in(mine, 0);
    } else {
        const int64_t first = batch / opts_.pad_span_batches * opts_.pad_span_batches;
        const int64_t last = std::min(batches_per_epoch(), first + opts_.pad_span_batches);
        for (int64_t k = first; k < last; ++k) longest = longest_in(global_rows(k), longest);
    }
    return detail::padded_length(longest, opts_.pad_to_multiple_of);
}

void Loader::make_batch(TokenBatch& out, int64_t epoch, int64_t batch) const {
    fault_point("data");
    const auto order = epoch_order(epoch);
    const Range mine = rank_rows(batch);
    const int64_t T = batch_length(*order, batch, mine);
    detail::collate_rows(out, *rows_, opts_, masker_.get(), order->data() + mine.begin,
                         mine.end - mine.begin, T, epoch);
    out.first_global_sample = mine.begin;
    out.epoch = epoch;
}

int64_t Loader::global_label_count(LoaderPosition from, int64_t n_batches) const {
    const auto order = epoch_order(from.epoch);
    const int64_t last = std::min(batches_per_epoch(), from.batches + std::max<int64_t>(n_batches, 0));
    int64_t count = 0;
    Feature scratch;
    for (int64_t k = std::max<int64_t>(from.batches, 0); k < last; ++k) {
        const Range g = global_rows(k);
        for (int64_t p = g.begin; p < g.end; ++p) {
            const int64_t fi = (*order)[size_t(p)];
            count += detail::row_label_count(rows_->task(), rows_->row(fi, scratch), fi, from.epoch,
                                             masker_.get());
        }
    }
    return count;
}

void Loader::seek(LoaderPosition pos) {
    LOOM_CHECK(pos.epoch >= 0 && pos.batches >= 0 && pos.batches <= batches_per_epoch(),
               "loader: cannot resume at epoch {} batch {}: an epoch has {} batches (of {} features, "
               "{} per global batch); was the checkpoint written with another batch size or data?",
               pos.epoch, pos.batches, batches_per_epoch(), n_, global_batch_);
    stop_producer();
    pos_ = pos;
}

bool Loader::next(TokenBatch& out) {
    if (!producer_.joinable()) start_producer();
    std::unique_lock<std::mutex> lk(mu_);
    if (queue_.empty() && !error_) {
        const auto t0 = std::chrono::steady_clock::now();
        cv_.wait(lk, [&] { return !queue_.empty() || error_; });
        wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (queue_.empty()) std::rethrow_exception(error_);
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    cv_.notify_all();
    if (item.end_of_epoch) {
        pos_ = {pos_.epoch + 1, 0};
        return false;
    }
    ++pos_.batches;
    out = std::move(item.batch);
    return true;
}

void Loader::start_producer() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = false;
        error_ = nullptr;
        queue_.clear();
    }
    producer_ = std::thread([this, from = pos_] {
        cpu_unbind_this_thread();
        produce(from);
    });
}

void Loader::stop_producer() {
    if (!producer_.joinable()) return;
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    producer_.join();
    std::lock_guard<std::mutex> lk(mu_);
    queue_.clear();
    error_ = nullptr;
    stop_ = false;
}

void Loader::produce(LoaderPosition from) {
    const size_t capacity = size_t(opts_.prefetch);
    auto push = [&](Item&& item) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || queue_.size() < capacity; });
        if (stop_) return false;
        queue_.push_back(std::move(item));
        lk.unlock();
        cv_.notify_all();
        return true;
    };
    try {
        const int64_t per_epoch = batches_per_epoch();
        for (int64_t epoch = from.epoch;; ++epoch) {
            for (int64_t k = epoch == from.epoch ? from.batches : 0; k < per_epoch; ++k) {
                Item item;
                make_batch(item.batch, epoch, k);
                if (!push(std::move(item))) return;
            }
            Item end;
            end.end_of_epoch = true;
            if (!push(std::move(end))) return;
        }
    } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        error_ = std::current_exception();
        cv_.notify_all();
    }
}

}  // namespace loom
