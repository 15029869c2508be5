// Communicator: collectives and point-to-point messages over one process group.
//
// A Communicator is one rank's handle on a group (the world, or a dp/tp/pp/tie
// group split from it). Implementations: CommMpi (Open MPI, comm_mpi.h) and
// CommLocal (N threads in one process, comm_local.h, for tests without
// mpirun). Nothing here is global: groups are created with split() and passed
// explicitly (ProcessGroups in process_groups.h bundles the usual ones).
//
// Contract shared by every implementation:
// - Every operation is nonblocking and returns a Work handle. The buffers
//   belong to the operation until Work::wait() (or test() == true) returns;
//   reading or writing them before that is a race. Destroying an unfinished
//   Work waits for it.
// - Ranks of a group call the same collectives in the same order with the same
//   count, dtype, op and root (the MPI rule). Point-to-point messages between
//   two ranks with the same tag arrive in the order they were sent.
// - Reductions: sum | avg | max over f32, f64, i32, i64 (avg only on floats:
//   sum, then divide by the group size). max is exact. Sums are not
//   associative in floating point; see CommOptions::fixed_order_reduction.
// - Timeouts: Work::wait() gives up after CommOptions::timeout_s of waiting and
//   reports "rank R timed out after S s in all_reduce(...) on group 'dp'
//   (world ranks [..])". By default it then aborts the whole job (MPI_Abort, or
//   std::abort for threads): a dead or lagging rank must never become a silent
//   hang. With TimeoutAction::throw_error it throws loom::Error instead and
//   the communicator must not be used again (its peers are out of step).
// - group_start()/group_end() bracket operations that must be issued together
//   (NCCL requires it for paired send/recv). Operations inside still return
//   their own Work; group_end() returns one Work covering all of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace loom {

enum class ReduceOp : uint8_t { sum, avg, max };
std::string_view reduce_op_name(ReduceOp op);

enum class TimeoutAction : uint8_t { abort, throw_error };

struct CommOptions {
    // Seconds one Work::wait() may block before the job is declared stuck.
    double timeout_s = 300.0;
    TimeoutAction on_timeout = TimeoutAction::abort;
    // MPI sums may group terms differently per algorithm and rank count. When
    // true, CommMpi sums every element in rank order (0 + 1 + 2 ...), so the
    // result is bitwise the sequential sum and bitwise equal to CommLocal's.
    // Cost: all_reduce becomes an all-to-all plus an all-gather (the same
    // bytes as a ring all-reduce, more latency). CommMpi's reduce_scatter is
    // an all-to-all and a rank-order sum either way, and CommLocal always
    // reduces in rank order, so the flag changes nothing for those.
    bool fixed_order_reduction = false;
    // Seconds a wait polls tightly (yielding) before it naps ~0.5 ms between
    // polls. Open MPI advances transfers only inside its calls, so tight
    // polling suits a rank per core; with more ranks than cores (a pipeline
    // on a small machine) waiting stages must leave the cores to the working
    // ones, so the launcher sets a short spin.
    double spin_s = 1.0;
};

// What a Work reports when it times out; filled by the communicator.
struct WorkInfo {
    std::string what;        // "all_reduce(sum, 1024 x f32)"
    std::string group;       // "dp"
    std::string group_ranks; // "[0, 2]" (world ranks)
    int rank = 0;            // rank in the group
    int world_rank = 0;
    CommOptions options;
};

class Work {
public:
    using Clock = std::chrono::steady_clock;
    virtual ~Work() = default;

    // Blocks until complete. Throws loom::Error if the operation failed (a
    // peer thread died, arguments did not match); on timeout reports and
    // aborts or throws per CommOptions::on_timeout.
    void wait();
    // Nonblocking completion check (also drives progress for MPI).
    virtual bool test() = 0;
    const WorkInfo& info() const { return info_; }

protected:
    explicit Work(WorkInfo info) : info_(std::move(info)) {}
    // true when complete, false when `deadline` passed first.
    virtual bool wait_until(Clock::time_point deadline) = 0;
    // Called once after a timeout, before the report: let go of buffers.
    virtual void abandon() {}
    // TimeoutAction::abort: end every rank of the job.
    [[noreturn]] virtual void abort_job(const std::string& message);
    // The operation a timeout report names (a combined Work names the first
    // unfinished member).
    virtual const WorkInfo& pending_info() const { return info_; }
    friend class WorkGroup;

    WorkInfo info_;
};

using WorkPtr = std::shared_ptr<Work>;

// A Work made of several (group_end, multi-part operations): done when all are.
class WorkGroup final : public Work {
public:
    WorkGroup(WorkInfo info, std::vector<WorkPtr> parts);
    bool test() override;

protected:
    bool wait_until(Clock::time_point deadline) override;
    void abandon() override;
    [[noreturn]] void abort_job(const std::string& message) override;
    const WorkInfo& pending_info() const override;

private:
    std::vector<WorkPtr> parts_;
};

// A Work that is already complete (size-1 groups, empty groups).
WorkPtr work_done(WorkInfo info);

class Communicator {
public:
    virtual ~Communicator() = default;
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    int rank() const { return rank_; }
    int size() const { return int(world_ranks_.size()); }
    const std::string& name() const { return name_; }
    // World rank of each member; index = rank in this group.
    const std::vector<int>& world_ranks() const { return world_ranks_; }
    int world_rank() const { return world_ranks_[size_t(rank_)]; }
    const CommOptions& options() const { return options_; }
    // "dp rank 1 of 2 (world ranks [1, 3])"
    std::string describe() const;

    // In place: every rank ends with op over all ranks' `buf`. buf: (count)
    WorkPtr all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op);
    // send: (size * recv_count), chunk r goes to rank r; recv: (recv_count).
    WorkPtr reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                           ReduceOp op);
    // send: (send_count); recv: (size * send_count) in rank order.
    WorkPtr all_gather(const void* send, void* recv, int64_t send_count, DType dtype);
    // root's buf is copied to every rank's buf. buf: (count); root in group ranks.
    WorkPtr broadcast(void* buf, int64_t count, DType dtype, int root);
    // peer in group ranks; tag in [0, 32767].
    WorkPtr send(const void* buf, int64_t count, DType dtype, int peer, int tag = 0);
    WorkPtr recv(void* buf, int64_t count, DType dtype, int peer, int tag = 0);
    WorkPtr barrier();

    void group_start();
    // The Work of everything issued since the matching group_start().
    WorkPtr group_end();

    // Collective over this communicator, blocking: every rank passes the
    // member list (ranks of THIS group, in the new group's rank order) of the
    // group it belongs to; members of one group pass identical lists and
    // groups do not overlap. A rank that is not in its own list takes part but
    // gets nullptr (e.g. middle pipeline stages and the tie group).
    std::unique_ptr<Communicator> split(const std::vector<int>& ranks, const std::string& name);

    // Typed and Tensor conveniences over the calls above.
    template <typename T>
    WorkPtr all_reduce(std::span<T> buf, ReduceOp op) {
        return all_reduce(buf.data(), int64_t(buf.size()), dtype_of<T>(), op);
    }
    template <typename T>
    WorkPtr all_gather(std::span<const T> send, std::span<T> recv) {
        check_multiple(int64_t(recv.size()), int64_t(send.size()), "all_gather");
        return all_gather(send.data(), recv.data(), int64_t(send.size()), dtype_of<T>());
    }
    template <typename T>
    WorkPtr reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op) {
        check_multiple(int64_t(send.size()), int64_t(recv.size()), "reduce_scatter");
        return reduce_scatter(send.data(), recv.data(), int64_t(recv.size()), dtype_of<T>(), op);
    }
    template <typename T>
    WorkPtr broadcast(std::span<T> buf, int root) {
        return broadcast(buf.data(), int64_t(buf.size()), dtype_of<T>(), root);
    }
    WorkPtr all_reduce(const Tensor& t, ReduceOp op) {
        return all_reduce(t.raw(), t.numel(), t.dtype, op);
    }
    WorkPtr broadcast(const Tensor& t, int root) {
        return broadcast(t.raw(), t.numel(), t.dtype, root);
    }
    WorkPtr send(const Tensor& t, int peer, int tag = 0) {
        return send(t.raw(), t.numel(), t.dtype, peer, tag);
    }
    WorkPtr recv(const Tensor& t, int peer, int tag = 0) {
        return recv(t.raw(), t.numel(), t.dtype, peer, tag);
    }

protected:
    Communicator(int rank, std::vector<int> world_ranks, std::string name, CommOptions options);

    // Implementations; arguments are already validated.
    virtual WorkPtr post_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op,
                                    WorkInfo info) = 0;
    virtual WorkPtr post_reduce_scatter(const void* send, void* recv, int64_t recv_count,
                                        DType dtype, ReduceOp op, WorkInfo info) = 0;
    virtual WorkPtr post_all_gather(const void* send, void* recv, int64_t send_count, DType dtype,
                                    WorkInfo info) = 0;
    virtual WorkPtr post_broadcast(void* buf, int64_t count, DType dtype, int root,
                                   WorkInfo info) = 0;
    virtual WorkPtr post_send(const void* buf, int64_t count, DType dtype, int peer, int tag,
                              WorkInfo info) = 0;
    virtual WorkPtr post_recv(void* buf, int64_t count, DType dtype, int peer, int tag,
                              WorkInfo info) = 0;
    virtual WorkPtr post_barrier(WorkInfo info) = 0;
    virtual std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks,
                                                   const std::string& name) = 0;
    // Called when the outermost group_start()/group_end() pair opens and
    // closes (NCCL must bracket paired send/recv with ncclGroupStart/End).
    // on_group_end runs before the group's Work is formed.
    virtual void on_group_start() {}
    virtual void on_group_end() {}
    // Element types this implementation moves and reduces. CPU communicators:
    // f32, f64, i32, i64; CommNccl and CommLocal add bf16 and f16 (device
    // gradients; CommLocal sums them in fp32, rounding each partial sum).
    virtual bool accepts_dtype(DType d) const {
        return d == DType::f32 || d == DType::f64 || d == DType::i32 || d == DType::i64;
    }

    WorkInfo make_info(std::string what) const;

private:
    WorkPtr track(WorkPtr w);
    void check_buffer(const void* p, int64_t count, DType dtype, const char* op) const;
    void check_peer(int peer, const char* op) const;
    static void check_multiple(int64_t big, int64_t small, const char* op);

    int rank_ = 0;
    std::vector<int> world_ranks_;  // (size)
    std::string name_;
    CommOptions options_;
    int group_depth_ = 0;
    std::vector<WorkPtr> group_parts_;
};

// Element-wise dst = dst op src for `count` elements of dtype (avg adds; the
// caller divides once at the end). Shared by the implementations so CommLocal
// and fixed-order CommMpi round identically.
void comm_reduce_into(void* dst, const void* src, int64_t count, DType dtype, ReduceOp op);
// Divides `count` elements by `n` in place (the avg finish step); float types.
void comm_divide(void* buf, int64_t count, DType dtype, int n);
// "[0, 2, 4]"
std::string comm_format_ranks(const std::vector<int>& ranks);

}  // namespace loom
