// `loom tokenize`: run a Hugging Face tokenizer.json from the command line.
//
// With --input, each line of a JSONL file is one case in the form of
// tests/data/tokenizers/*/cases.json (text, pair, add_special_tokens,
// truncation, padding; a field that is present, even null, replaces the
// tokenizer's own setting) and each output line holds the encoding fields
// plus `decoded` and `decoded_with_special_tokens`. Lines are encoded on all
// cores and written in input order. Without --input, lines of plain text are
// read from stdin and shown as tokens and ids for a person.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "tokenizer/encoding_json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace loom::cli {
namespace {

namespace tk = loom::tokenizer;
using nlohmann::json;

struct TokenizeOptions {
    std::string tokenizer_path;
    std::string input_path;
    std::string output_path = "-";
    bool no_special_tokens = false;
    int threads = 0;
};

struct Case {
    std::string text;
    std::optional<std::string> pair;
    bool add_special_tokens = true;
    std::optional<tk::TruncationParams> truncation;
    std::optional<tk::PaddingParams> padding;
};

Case parse_case(const std::string& line, size_t line_no, const std::string& path, const tk::Tokenizer& tok,
                bool default_special) {
    const std::string where = fmt::format("{}:{}", path, line_no);
    json j;
    try {
        j = json::parse(line);
    } catch (const json::parse_error& e) {
        throw tk::TokenizerError(fmt::format("{}: invalid JSON: {}", where, e.what()));
    }
    const tk::JsonAt at{j, "", where};
    at.require_object();
    Case c;
    c.text = at.at("text").as_string();
    if (at.find("pair")) c.pair = at.at("pair").as_string();
    c.add_special_tokens = at.find("add_special_tokens") ? at.at("add_special_tokens").as_bool() : default_special;
    c.truncation = j.contains("truncation") ? tk::truncation_from_json(at.at("truncation")) : tok.truncation();
    c.padding = j.contains("padding") ? tk::padding_from_json(at.at("padding")) : tok.padding();
    return c;
}

void run_jsonl(const TokenizeOptions& o, const tk::Tokenizer& tok) {
    std::ifstream in(o.input_path);
    if (!in) throw tk::TokenizerError(o.input_path + ": cannot open file");
    std::vector<Case> cases;
    std::string line;
    size_t line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        cases.push_back(parse_case(line, line_no, o.input_path, tok, !o.no_special_tokens));
    }
    std::vector<std::string> out(cases.size());
    std::vector<std::string> errors(cases.size());
    const int threads = o.threads > 0 ? o.threads : 0;
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads > 0 ? threads : omp_get_max_threads())
    for (size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        try {
            const tk::Encoding e =
                tok.encode_with(c.text, c.pair ? std::optional<std::string_view>(*c.pair) : std::nullopt,
                                c.add_special_tokens, c.truncation, c.padding);
            json j = tk::encoding_to_json(e, c.truncation.has_value());
            j["decoded"] = tok.decode(e.ids, true);
            j["decoded_with_special_tokens"] = tok.decode(e.ids, false);
            out[i] = j.dump(-1, ' ', false, json::error_handler_t::replace);
        } catch (const std::exception& ex) {
            errors[i] = ex.what();
        }
    }
    for (size_t i = 0; i < errors.size(); ++i)
        if (!errors[i].empty()) throw tk::TokenizerError(fmt::format("{}: case {}: {}", o.input_path, i + 1, errors[i]));
    std::ofstream file;
    std::ostream* os = &std::cout;
    if (o.output_path != "-") {
        file.open(o.output_path);
        if (!file) throw tk::TokenizerError(o.output_path + ": cannot write file");
        os = &file;
    }
    for (const std::string& s : out) *os << s << '\n';
    os->flush();
    if (!*os) throw tk::TokenizerError(o.output_path + ": write failed");
}

void run_interactive(const TokenizeOptions& o, const tk::Tokenizer& tok) {
    std::string line;
    while (std::getline(std::cin, line)) {
        const tk::Encoding e = tok.encode(line, !o.no_special_tokens);
        std::string toks;
        for (size_t i = 0; i < e.size(); ++i) toks += fmt::format("{}{}", i ? " | " : "", e.tokens[i]);
        fmt::print("tokens ({}): {}\n", e.size(), toks);
        fmt::print("ids: [{}]\n", fmt::join(e.ids, ", "));
        fmt::print("decoded: {}\n\n", tok.decode(e.ids, true));
    }
}

void run_tokenize(const TokenizeOptions& o) {
    const tk::Tokenizer tok = tk::Tokenizer::from_file(o.tokenizer_path);
    if (!o.input_path.empty()) {
        run_jsonl(o, tok);
    } else {
        run_interactive(o, tok);
    }
}

void setup_tokenize(CLI::App& app) {
    auto opts = std::make_shared<TokenizeOptions>();
    CLI::App* sub = app.add_subcommand(
        "tokenize",
        "Encode text with a Hugging Face tokenizer.json, exactly as HF tokenizers does.\n"
        "\n"
        "Interactive: each line typed on stdin is shown as tokens, ids and the decoded text:\n"
        "  echo 'Hello world' | loom tokenize --tokenizer model/tokenizer.json\n"
        "\n"
        "Batch: each line of --input is a JSON object; only \"text\" is required:\n"
        "  {\"text\": \"Who?\", \"pair\": \"Me.\", \"add_special_tokens\": true,\n"
        "   \"truncation\": {\"max_length\": 16, \"strategy\": \"LongestFirst\", \"stride\": 0, \"direction\": \"Right\"},\n"
        "   \"padding\": {\"strategy\": {\"Fixed\": 16}, \"direction\": \"Right\", \"pad_id\": 0, \"pad_type_id\": 0,\n"
        "               \"pad_token\": \"[PAD]\", \"pad_to_multiple_of\": null}}\n"
        "truncation/padding use tokenizer.json's own format; when present (even null) they replace\n"
        "the file's settings. Each output line holds ids, tokens, type_ids, attention_mask,\n"
        "special_tokens_mask, offsets (code points), offsets_utf8 (bytes), word_ids, sequence_ids,\n"
        "overflowing (when truncating), decoded and decoded_with_special_tokens:\n"
        "  loom tokenize --tokenizer tokenizer.json --input cases.jsonl --output out.jsonl\n"
        "Invalid UTF-8 in the text is replaced by U+FFFD (as Rust's from_utf8_lossy) before encoding.");
    sub->add_option("--tokenizer", opts->tokenizer_path, "the tokenizer.json file")->required()->check(CLI::ExistingFile);
    sub->add_option("--input", opts->input_path, "JSONL file of cases (default: plain text lines from stdin)");
    sub->add_option("--output", opts->output_path, "where to write the JSONL results ('-' = stdout)")->capture_default_str();
    sub->add_flag("--no-special-tokens", opts->no_special_tokens,
                  "do not add the post-processor's special tokens (a case's add_special_tokens wins)");
    sub->add_option("--threads", opts->threads, "threads for --input (0 = all cores)")->capture_default_str();
    sub->callback([opts] { run_tokenize(*opts); });
}

}  // namespace
}  // namespace loom::cli

LOOM_COMMAND(loom::cli::setup_tokenize);
