// StackModel's outputs: the module view, hidden states and named outputs of
// the last forward (views of its activation arena).
#include <string>

#include "core/check.h"
#include "models/stack_model.h"

namespace loom {

StackView StackModel::view() const {
    StackView v;
    v.blocks = &blocks_;
    v.schedule = &schedule_;
    v.apps_per_layer = apps_per_layer_;
    v.final_norm = final_norm_.weight.defined() ? &final_norm_ : nullptr;
    v.embeddings = embeddings_view();
    if (head_) v.head = head_->view();
    return v;
}

int StackModel::num_hidden_states() const {
    if (!placement_.part.whole()) return 0;  // a pipeline stage outputs no hidden states
    return int(int64_t(schedule_.size()) / apps_per_layer_) + 1;
}

Tensor StackModel::hidden_state(int i) const {
    LOOM_CHECK(i >= 0 && i < num_hidden_states(), "hidden state {} out of range [0, {})", i,
               num_hidden_states());
    LOOM_CHECK(planned_B_ > 0, "hidden_state before any forward");
    LOOM_CHECK(!(last_rows_on_ && i == num_hidden_states() - 1),
               "hidden state {}: the last layer ran only at the rows the head reads "
               "(LogitsScope::labelled_positions); use all_positions for hidden states",
               i);
    const int64_t C = config_.hidden_size;
    const std::string name = "hidden_states." + std::to_string(i);
    // HF: GPT-2's last hidden state has ln_f applied.
    if (i == num_hidden_states() - 1 && final_norm_.weight.defined())
        return arena_.view(final_, Shape{B_, T_, C}, name);
    const int64_t h = int64_t(i) * apps_per_layer_;
    LOOM_CHECK(!offload_.offloaded(h),
               "hidden state {}: activation offloading moved it to host memory after forward",
               i);
    return arena_.view(hidden_at(h), Shape{B_, T_, C}, name);
}

std::map<std::string, Tensor> StackModel::outputs() const {
    std::map<std::string, Tensor> out;
    if (head_ && placement_.part.head) head_->outputs(arena_, out);
    // A last layer run at the head's rows only has no whole output to offer.
    const int n = num_hidden_states() - (last_rows_on_ && num_hidden_states() > 0 ? 1 : 0);
    for (int i = 0; i < n; ++i)
        if (!offload_.offloaded(int64_t(i) * apps_per_layer_))
            out["hidden_states." + std::to_string(i)] = hidden_state(i);
    return out;
}

}  // namespace loom
