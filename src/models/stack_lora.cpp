// StackModel's LoRA set-up: which linears get adapters, which rows stay
// trainable, and the workspace the adapters share (nn/lora.h).
//
// PEFT's semantics: target_modules name HF linears (full name, or its last
// components after a '.'); everything but the adapters and modules_to_save
// is frozen. A target that names no linear of the blocks is an error, as is
// a modules_to_save entry that names no parameter: a misspelt name would
// otherwise train nothing, or train the wrong rows, silently.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/check.h"
#include "models/stack_model.h"

namespace loom {

namespace {

// "model.layers.0.self_attn.q_proj" -> "q_proj".
std::string last_component(const std::string& m) {
    const size_t dot = m.rfind('.');
    return dot == std::string::npos ? m : m.substr(dot + 1);
}

// The module a parameter belongs to: its name less the last component.
std::string module_of(const std::string& param) {
    const size_t dot = param.rfind('.');
    return dot == std::string::npos ? "" : param.substr(0, dot);
}

std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

}  // namespace

void StackModel::apply_lora() {
    const LoraSpec& spec = config_.lora;
    if (!spec.active()) return;
    std::set<std::string> hit;
    std::vector<std::string> linears;  // the blocks' linears by last component, once each
    for (TransformerBlock& b : blocks_) {
        const std::vector<Linear*> ls = block_linears(b);
        for (size_t slot = 0; slot < ls.size(); ++slot) {
            Linear* l = ls[slot];
            if (!l->weight.defined()) continue;
            for (const std::string& m : lora_module_names(table_, *l)) {
                const std::string s = last_component(m);
                if (std::find(linears.begin(), linears.end(), s) == linears.end())
                    linears.push_back(s);
            }
            for (const std::string& m : lora_attach(table_, *l, spec, uint32_t(slot)))
                for (const std::string& t : spec.target_modules)
                    if (lora_name_matches(m, t)) hit.insert(t);
        }
    }
    for (const std::string& t : spec.target_modules)
        LOOM_CHECK(hit.count(t) > 0,
                   "peft.target_modules: '{}' names no linear layer of {}'s transformer blocks "
                   "(they are: {}; {})",
                   t, config_.architecture, joined(linears), config_.source);
    std::set<std::string> saved;
    for (int i = 0; i < table_.size(); ++i) {
        const ParamRow& r = table_.row(i);
        if (r.adapter) continue;
        bool keep = false;
        for (const std::string& m : spec.modules_to_save) {
            bool match = lora_name_matches(module_of(r.name), m);
            for (const std::string& alias : r.tied)
                match = match || lora_name_matches(module_of(alias), m);
            if (match) {
                saved.insert(m);
                keep = true;
            }
        }
        table_.set_trainable(i, keep);
    }
    for (const std::string& m : spec.modules_to_save)
        LOOM_CHECK(saved.count(m) > 0,
                   "peft.modules_to_save: '{}' names no module of {} (e.g. the classifier "
                   "head: score for Llama, classifier for BERT; {})",
                   m, config_.architecture, config_.source);
    table_.group_trainable();
}

// Where a block's gradients start: its trainable rows' lowest offset (under
// LoRA the frozen base lies below every adapter, so a block's adapters are
// what its backward finishes), else its rows'.
int64_t StackModel::block_grads_begin(const TransformerBlock& k) const {
    std::vector<const ParamRef*> refs = {&k.ln1.weight, &k.ln1.bias, &k.ln2.weight, &k.ln2.bias};
    for (const Linear* l : {&k.attn.qkv, &k.attn.proj, &k.mlp.fc, &k.mlp.proj}) {
        refs.push_back(&l->weight);
        refs.push_back(&l->bias);
        for (const LoraAdapter& a : l->lora) {
            refs.push_back(&a.A);
            refs.push_back(&a.B);
        }
    }
    int64_t all = table_.flat_numel(), trainable = all;
    for (const ParamRef* r : refs) {
        if (!r->defined() || !table_.row(r->row).local) continue;
        const ParamRow& row = table_.row(r->row);
        all = std::min(all, row.offset);
        if (row.trainable) trainable = std::min(trainable, row.offset);
    }
    return trainable < table_.flat_numel() ? trainable : all;
}

int64_t StackModel::lora_work_elems_for(int64_t N) const {
    int64_t n = 0;
    for (const TransformerBlock& b : blocks_)
        for (const Linear* l : {&b.attn.qkv, &b.attn.proj, &b.mlp.fc, &b.mlp.proj})
            n = std::max(n, lora_work_elems(*l, N));
    return n;
}

}  // namespace loom
