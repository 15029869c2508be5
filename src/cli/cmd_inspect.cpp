// `loom inspect FILE.safetensors [--stats] [--filter TEXT]`: lists a
// checkpoint's tensors (name, dtype, shape, bytes) in file order, and with
// --stats their min / max / mean and any NaN or Inf, so a user can look at a
// checkpoint or a saved batch without Python. A corrupt file fails with the
// reader's message (file, tensor, expected vs found) and exit status 1.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "cli/command.h"
#include "io/safetensors.h"

namespace loom::cli {

namespace {

struct InspectOptions {
    std::string file;
    std::string filter;
    bool stats = false;
};

struct Stats {
    double min = INFINITY, max = -INFINITY, sum = 0;
    int64_t finite = 0, nan = 0, inf = 0;
};

Stats tensor_stats(const Tensor& t) {
    Stats s;
    // Widen once to f64: every Loom dtype converts, and inspect is not hot.
    Tensor w = t.to(DType::f64);
    const double* v = w.data<double>();
    for (int64_t i = 0; i < w.numel(); ++i) {
        if (std::isnan(v[i])) {
            ++s.nan;
        } else if (std::isinf(v[i])) {
            ++s.inf;
        } else {
            s.min = std::min(s.min, v[i]);
            s.max = std::max(s.max, v[i]);
            s.sum += v[i];
            ++s.finite;
        }
    }
    return s;
}

std::string stats_columns(const Tensor& t) {
    if (t.numel() == 0) return fmt::format("{:>13} {:>13} {:>13}", "-", "-", "-");
    Stats s = tensor_stats(t);
    std::string out = s.finite ? fmt::format("{:>13.6g} {:>13.6g} {:>13.6g}", s.min, s.max,
                                             s.sum / double(s.finite))
                               : fmt::format("{:>13} {:>13} {:>13}", "-", "-", "-");
    if (s.nan) out += fmt::format("  nan={}", s.nan);
    if (s.inf) out += fmt::format("  inf={}", s.inf);
    return out;
}

void run_inspect(const InspectOptions& o) {
    SafetensorsFile f = SafetensorsFile::open(o.file);
    std::vector<std::string> shown;
    for (const std::string& name : f.names())
        if (o.filter.empty() || name.find(o.filter) != std::string::npos) shown.push_back(name);

    size_t name_w = 4;
    for (const auto& n : shown) name_w = std::max(name_w, n.size());
    fmt::print("{}: {} tensors, {} bytes of tensor data\n", o.file, f.names().size(),
               f.data_bytes());
    for (const auto& [k, v] : f.metadata()) fmt::print("metadata {} = {}\n", k, v);
    if (!o.filter.empty()) fmt::print("{} tensors match '{}'\n", shown.size(), o.filter);
    if (shown.empty()) return;

    std::string head =
        fmt::format("{:<{}}  {:<5} {:<20} {:>12}", "name", name_w, "dtype", "shape", "elements");
    if (o.stats) head += fmt::format(" {:>13} {:>13} {:>13}", "min", "max", "mean");
    fmt::print("{}\n", head);

    int64_t total = 0;
    for (const std::string& name : shown) {
        Tensor t = f.get(name);
        total += t.numel();
        std::string line =
            fmt::format("{:<{}}  {:<5} {:<20} {:>12}", name, name_w,
                        dtype_safetensors_name(t.dtype), t.shape.to_string(), t.numel());
        if (o.stats) line += " " + stats_columns(t);
        fmt::print("{}\n", line);
    }
    fmt::print("total: {} elements in {} tensors\n", total, shown.size());
}

void setup_inspect(CLI::App& app) {
    auto opts = std::make_shared<InspectOptions>();
    CLI::App* sub = app.add_subcommand(
        "inspect", "List the tensors of a .safetensors file (name, dtype, shape, elements)");
    sub->add_option("file", opts->file, "the .safetensors file")->required();
    sub->add_flag("--stats", opts->stats, "also print min, max, mean and NaN/Inf counts");
    sub->add_option("--filter", opts->filter, "only tensors whose name contains this text");
    sub->callback([opts] { run_inspect(*opts); });
}

}  // namespace

LOOM_COMMAND(setup_inspect);

}  // namespace loom::cli
