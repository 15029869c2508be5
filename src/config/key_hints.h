// What an "unknown key" error suggests.
//
// Job files are often written from memory of another tool (HF example
// scripts, SageMaker estimators, Megatron, torchrun), and edit distance alone
// then points at unrelated keys ('epochs' is 5 edits from 'optim'). So the
// hint is, in order: the section where that exact key is accepted; a curated
// synonym ('epochs' -> hyperparameters.num_train_epochs), possibly in
// another section; a key within a few edits, scaled to the key's length; and
// otherwise the whole list of a small section, or nothing.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace loom::config {

// "; did you mean 'num_train_epochs'?", "; it belongs under 'data'", ... or
// "" when nothing plausible is known. `section` is the dotted path of the map
// being read ("" = top level), `valid` its keys, `key_homes` key -> section
// for keys accepted elsewhere.
std::string unknown_key_hint(std::string_view key, const std::string& section,
                             const std::vector<std::string_view>& valid,
                             const std::map<std::string, std::string>& key_homes);

// The curated synonym's target for `key` (a dotted path, or "" with only an
// explanation), for tests and docs; empty when the table has no entry.
std::string synonym_target(std::string_view key);

}  // namespace loom::config
