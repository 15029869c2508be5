// Communicator base: argument checks, group_start/group_end bookkeeping, the
// timeout report, and the element-wise reduction every implementation shares.
#include "comm/comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/check.h"

namespace loom {

std::string_view reduce_op_name(ReduceOp op) {
    switch (op) {
        case ReduceOp::sum: return "sum";
        case ReduceOp::avg: return "avg";
        case ReduceOp::max: return "max";
    }
    return "?";
}

std::string comm_format_ranks(const std::vector<int>& ranks) {
    return fmt::format("[{}]", fmt::join(ranks, ", "));
}

// --- Work --------------------------------------------------------------------

void Work::wait() {
    const double timeout_s = info_.options.timeout_s;
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(timeout_s));
    if (wait_until(deadline)) return;
    double waited = std::chrono::duration<double>(Clock::now() - start).count();
    const WorkInfo& p = pending_info();
    std::string message = fmt::format(
        "rank {} ({} rank {}) timed out after {:.1f} s waiting in {} on group '{}' (world ranks "
        "{}): another rank skipped this call, failed or is stuck (timeout {} s)",
        p.world_rank, p.group, p.rank, waited, p.what, p.group, p.group_ranks, timeout_s);
    abandon();
    if (info_.options.on_timeout == TimeoutAction::throw_error) throw Error(message);
    abort_job(message);
}

void Work::abort_job(const std::string& message) {
    std::fprintf(stderr, "loom: fatal: %s; aborting\n", message.c_str());
    std::fflush(stderr);
    std::abort();
}

WorkGroup::WorkGroup(WorkInfo info, std::vector<WorkPtr> parts)
    : Work(std::move(info)), parts_(std::move(parts)) {}

bool WorkGroup::test() {
    bool all = true;
    for (auto& p : parts_) all = p->test() && all;  // test every part: drives progress
    return all;
}

bool WorkGroup::wait_until(Clock::time_point deadline) {
    for (auto& p : parts_)
        if (!p->wait_until(deadline)) return false;
    return true;
}

void WorkGroup::abandon() {
    for (auto& p : parts_) p->abandon();
}

void WorkGroup::abort_job(const std::string& message) {
    if (!parts_.empty()) parts_.front()->abort_job(message);
    Work::abort_job(message);
}

const WorkInfo& WorkGroup::pending_info() const {
    for (auto& p : parts_)
        if (!p->test()) return p->pending_info();
    return info_;
}

namespace {
class WorkDone final : public Work {
public:
    explicit WorkDone(WorkInfo info) : Work(std::move(info)) {}
    bool test() override { return true; }

protected:
    bool wait_until(Clock::time_point) override { return true; }
};
}  // namespace

WorkPtr work_done(WorkInfo info) { return std::make_shared<WorkDone>(std::move(info)); }

// --- Communicator ----------------------------------------------------------

Communicator::Communicator(int rank, std::vector<int> world_ranks, std::string name,
                           CommOptions options)
    : rank_(rank), world_ranks_(std::move(world_ranks)), name_(std::move(name)),
      options_(options) {
    LOOM_ASSERT(rank_ >= 0 && rank_ < int(world_ranks_.size()), "communicator '{}': rank {} of {}",
                name_, rank_, world_ranks_.size());
    LOOM_CHECK(options_.timeout_s > 0, "communicator '{}': timeout must be > 0 s, got {}", name_,
               options_.timeout_s);
}

std::string Communicator::describe() const {
    return fmt::format("{} rank {} of {} (world ranks {})", name_, rank_, size(),
                       comm_format_ranks(world_ranks_));
}

WorkInfo Communicator::make_info(std::string what) const {
    WorkInfo info;
    info.what = std::move(what);
    info.group = name_;
    info.group_ranks = comm_format_ranks(world_ranks_);
    info.rank = rank_;
    info.world_rank = world_rank();
    info.options = options_;
    return info;
}

void Communicator::check_buffer(const void* p, int64_t count, DType dtype, const char* op) const {
    LOOM_CHECK(count >= 0, "{} on group '{}': negative element count {}", op, name_, count);
    LOOM_CHECK(count == 0 || p != nullptr, "{} on group '{}': null buffer for {} elements", op,
               name_, count);
    LOOM_CHECK(accepts_dtype(dtype),
               "{} on group '{}': dtype {} is not supported (f32, f64, i32, i64{})", op, name_,
               dtype_name(dtype), accepts_dtype(DType::bf16) ? ", bf16, f16" : "");
}

void Communicator::check_peer(int peer, const char* op) const {
    LOOM_CHECK(peer >= 0 && peer < size(), "{} on group '{}': peer {} outside group of {}", op,
               name_, peer, size());
}

void Communicator::check_multiple(int64_t big, int64_t small, const char* op) {
    LOOM_CHECK(small > 0 ? big % small == 0 : big == 0,
               "{}: buffer of {} elements is not a multiple of {}", op, big, small);
}

static void check_op(ReduceOp op, DType dtype, const std::string& group, const char* what) {
    LOOM_CHECK(op != ReduceOp::avg || dtype == DType::f32 || dtype == DType::f64,
               "{} on group '{}': avg needs a floating-point buffer, got {}", what, group,
               dtype_name(dtype));
}

WorkPtr Communicator::track(WorkPtr w) {
    if (group_depth_ > 0) group_parts_.push_back(w);
    return w;
}

WorkPtr Communicator::all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
    check_buffer(buf, count, dtype, "all_reduce");
    check_op(op, dtype, name_, "all_reduce");
    auto info = make_info(fmt::format("all_reduce({}, {} x {})", reduce_op_name(op), count,
                                      dtype_name(dtype)));
    return track(post_all_reduce(buf, count, dtype, op, std::move(info)));
}

WorkPtr Communicator::reduce_scatter(const void* send, void* recv, int64_t recv_count,
                                     DType dtype, ReduceOp op) {
    check_buffer(send, recv_count * size(), dtype, "reduce_scatter");
    check_buffer(recv, recv_count, dtype, "reduce_scatter");
    check_op(op, dtype, name_, "reduce_scatter");
    auto info = make_info(fmt::format("reduce_scatter({}, {} x {} per rank)", reduce_op_name(op),
                                      recv_count, dtype_name(dtype)));
    return track(post_reduce_scatter(send, recv, recv_count, dtype, op, std::move(info)));
}

WorkPtr Communicator::all_gather(const void* send, void* recv, int64_t send_count, DType dtype) {
    check_buffer(send, send_count, dtype, "all_gather");
    check_buffer(recv, send_count * size(), dtype, "all_gather");
    auto info =
        make_info(fmt::format("all_gather({} x {} per rank)", send_count, dtype_name(dtype)));
    return track(post_all_gather(send, recv, send_count, dtype, std::move(info)));
}

WorkPtr Communicator::broadcast(void* buf, int64_t count, DType dtype, int root) {
    check_buffer(buf, count, dtype, "broadcast");
    check_peer(root, "broadcast root");
    auto info = make_info(
        fmt::format("broadcast(root {}, {} x {})", root, count, dtype_name(dtype)));
    return track(post_broadcast(buf, count, dtype, root, std::move(info)));
}

WorkPtr Communicator::send(const void* buf, int64_t count, DType dtype, int peer, int tag) {
    check_buffer(buf, count, dtype, "send");
    check_peer(peer, "send");
    LOOM_CHECK(tag >= 0 && tag <= 32767, "send on group '{}': tag {} outside [0, 32767]", name_,
               tag);
    auto info = make_info(fmt::format("send(to {}, tag {}, {} x {})", peer, tag, count,
                                      dtype_name(dtype)));
    return track(post_send(buf, count, dtype, peer, tag, std::move(info)));
}

WorkPtr Communicator::recv(void* buf, int64_t count, DType dtype, int peer, int tag) {
    check_buffer(buf, count, dtype, "recv");
    check_peer(peer, "recv");
    LOOM_CHECK(tag >= 0 && tag <= 32767, "recv on group '{}': tag {} outside [0, 32767]", name_,
               tag);
    auto info = make_info(fmt::format("recv(from {}, tag {}, {} x {})", peer, tag, count,
                                      dtype_name(dtype)));
    return track(post_recv(buf, count, dtype, peer, tag, std::move(info)));
}

WorkPtr Communicator::barrier() { return track(post_barrier(make_info("barrier"))); }

void Communicator::group_start() {
    if (group_depth_++ == 0) on_group_start();
}

WorkPtr Communicator::group_end() {
    LOOM_CHECK(group_depth_ > 0, "group_end on group '{}' without group_start", name_);
    if (--group_depth_ > 0) return work_done(make_info("nested group"));
    on_group_end();
    std::vector<WorkPtr> parts;
    parts.swap(group_parts_);
    auto info = make_info(fmt::format("group of {} operations", parts.size()));
    return std::make_shared<WorkGroup>(std::move(info), std::move(parts));
}

std::unique_ptr<Communicator> Communicator::split(const std::vector<int>& ranks,
                                                  const std::string& name) {
    LOOM_CHECK(group_depth_ == 0, "split of group '{}' inside group_start/group_end", name_);
    std::vector<int> seen = ranks;
    std::sort(seen.begin(), seen.end());
    for (size_t i = 0; i < seen.size(); ++i) {
        LOOM_CHECK(seen[i] >= 0 && seen[i] < size(),
                   "split of group '{}' into '{}': rank {} outside group of {}", name_, name,
                   seen[i], size());
        LOOM_CHECK(i == 0 || seen[i] != seen[i - 1],
                   "split of group '{}' into '{}': rank {} listed twice", name_, name, seen[i]);
    }
    return do_split(ranks, name);
}

// --- element-wise reduction --------------------------------------------------

namespace {
template <typename T>
void reduce_typed(T* dst, const T* src, int64_t n, ReduceOp op) {
    if (op == ReduceOp::max) {
        for (int64_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
    } else {
        for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    }
}
// bf16 and f16 by value: widened, combined in fp32, rounded back.
template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void reduce_narrow(void* dst_v, const void* src_v, int64_t n, ReduceOp op) {
    uint16_t* dst = static_cast<uint16_t*>(dst_v);
    const uint16_t* src = static_cast<const uint16_t*>(src_v);
    for (int64_t i = 0; i < n; ++i) {
        const float a = Load(dst[i]), b = Load(src[i]);
        dst[i] = Store(op == ReduceOp::max ? std::max(a, b) : a + b);
    }
}
}  // namespace

void comm_reduce_into(void* dst, const void* src, int64_t count, DType dtype, ReduceOp op) {
    switch (dtype) {
        case DType::f32:
            reduce_typed(static_cast<float*>(dst), static_cast<const float*>(src), count, op);
            return;
        case DType::f64:
            reduce_typed(static_cast<double*>(dst), static_cast<const double*>(src), count, op);
            return;
        case DType::i32:
            reduce_typed(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count, op);
            return;
        case DType::i64:
            reduce_typed(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), count, op);
            return;
        case DType::bf16:
            reduce_narrow<bf16_to_f32, f32_to_bf16>(dst, src, count, op);
            return;
        case DType::f16:
            reduce_narrow<f16_to_f32, f32_to_f16>(dst, src, count, op);
            return;
        default: LOOM_FAIL("reduction over dtype {} is not supported", dtype_name(dtype));
    }
}

void comm_divide(void* buf, int64_t count, DType dtype, int n) {
    if (dtype == DType::f32) {
        float* p = static_cast<float*>(buf);
        for (int64_t i = 0; i < count; ++i) p[i] /= float(n);
    } else if (dtype == DType::f64) {
        double* p = static_cast<double*>(buf);
        for (int64_t i = 0; i < count; ++i) p[i] /= double(n);
    } else if (dtype == DType::bf16 || dtype == DType::f16) {
        uint16_t* p = static_cast<uint16_t*>(buf);
        const bool bf = dtype == DType::bf16;
        for (int64_t i = 0; i < count; ++i) {
            const float x = (bf ? bf16_to_f32(p[i]) : f16_to_f32(p[i])) / float(n);
            p[i] = bf ? f32_to_bf16(x) : f32_to_f16(x);
        }
    } else {
        LOOM_FAIL("avg over dtype {} is not supported", dtype_name(dtype));
    }
}

}  // namespace loom
