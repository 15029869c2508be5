// The in-memory RowSource over a FeatureSet (row_source.h).
#include "data/row_source.h"

#include "core/check.h"

namespace loom {

namespace {

class FeatureRows : public RowSource {
  public:
    explicit FeatureRows(std::shared_ptr<const FeatureSet> data) : data_(std::move(data)) {
        LOOM_CHECK(data_ != nullptr, "loader: no feature set");
        for (const Feature& f : data_->features) tokens_ += int64_t(f.ids.size());
    }
    Task task() const override { return data_->task; }
    int64_t size() const override { return int64_t(data_->features.size()); }
    int64_t length(int64_t i) const override {
        return int64_t(data_->features[size_t(i)].ids.size());
    }
    int64_t total_tokens() const override { return tokens_; }
    const Feature& row(int64_t i, Feature&) const override { return data_->features[size_t(i)]; }
    std::string describe() const override {
        return fmt::format("the {} data set", task_name(data_->task));
    }

  private:
    std::shared_ptr<const FeatureSet> data_;
    int64_t tokens_ = 0;
};

}  // namespace

std::shared_ptr<const RowSource> feature_rows(std::shared_ptr<const FeatureSet> data) {
    return std::make_shared<const FeatureRows>(std::move(data));
}

}  // namespace loom
