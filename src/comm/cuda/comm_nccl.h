// CommNccl: the Communicator over NCCL, for device (GPU) buffers.
//
// Streams (llm.c's compute/NCCL overlap): each CommNccl owns a high-priority,
// non-blocking communication stream. An operation (1) records an event on the
// caller's compute stream and makes the comm stream wait for it, so the
// collective sees everything compute queued before the call, (2) enqueues the
// NCCL call on the comm stream, (3) records a completion event there. The host
// never blocks to post. Work::test() is cudaEventQuery on that event plus
// ncclCommGetAsyncError; Work::wait() polls both until CommOptions::timeout_s,
// and on an NCCL error or a timeout aborts the communicator (ncclCommAbort) and
// reports per the Work contract in comm.h. For the compute stream to use a
// result without a host block, call make_compute_wait() (or make_stream_wait()
// for one Work): gradient buckets reduce while backward carries on, and the
// optimizer's stream waits only where it reads them. The Works must still be
// waited or tested (before the step ends, say): that is where errors and
// timeouts surface.
//
// Contract differences from CPU communicators, all forced by NCCL:
// - Buffers are device memory on this communicator's device (or managed
//   memory); a host pointer throws. Counts are the same on every rank and are
//   not checked against each other (a mismatch hangs until the timeout).
// - send/recv ignore the tag: NCCL matches point-to-point messages between a
//   pair of ranks by the order they were posted, whatever the tag. The
//   ordering rule of comm.h (same tag => same order) therefore holds, but a
//   program must also post receives in the order its peer posts the matching
//   sends across tags. Paired send/recv (and any send to self) must sit
//   between group_start() and group_end(); a send to self outside one throws,
//   since it would wait for a receive queued behind it on the same stream.
// - Operations issued inside group_start()/group_end() start at group_end():
//   waiting on one of them earlier throws.
// - Sums are NCCL's (ring or tree order; ncclAvg pre-scales each term by
//   1/size): deterministic for a fixed NCCL_ALGO/NCCL_PROTO and rank count,
//   but not rank order, so CommOptions::fixed_order_reduction is refused.
// - Element types add bf16 and f16 (avg remains f32/f64 only, the comm.h rule).
//
// Threads: one thread drives a CommNccl and its Works (as with CommMpi); one
// process may hold several CommNccl on different devices, one thread each.
//
// Lifetime: Works keep the NCCL communicator alive. Destroying a CommNccl
// waits (bounded by timeout_s, then aborts) for the operations queued on its
// stream. Groups split() from a CommNccl are independent NCCL communicators
// (ncclCommSplit, NCCL >= 2.18) on the same device and compute stream.
#pragma once

#if defined(LOOM_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace loom {

struct NcclShared;   // the NCCL handle and an event pool, shared with Works
struct NcclOp;       // one operation's completion event
struct CommStreams;  // comm stream, ordering events, barrier word

class CommNccl final : public Communicator {
  public:
    // Joins the NCCL communicator of `id` as `rank` of world_ranks.size() ranks
    // (collective: every rank calls it, each with its own device, from its own
    // process or thread). world_ranks and name are for messages, as in comm.h.
    // compute_stream must belong to `device`; nullptr is the legacy default
    // stream.
    CommNccl(const ncclUniqueId& id, int rank, std::vector<int> world_ranks, std::string name,
             int device, cudaStream_t compute_stream, const CommOptions& options = {});

    // Builds the device twin of a CPU group (CommMpi in a job, CommLocal in
    // tests): rank 0 makes the unique id and broadcasts its bytes over
    // `cpu_group`; rank, world ranks and name are the CPU group's. Collective
    // over cpu_group. A bad device on any rank throws on every rank instead of
    // hanging the others in ncclCommInitRank.
    static std::unique_ptr<CommNccl> from_mpi(Communicator& cpu_group, int device,
                                              cudaStream_t compute_stream,
                                              const CommOptions& options);
    // As above with the CPU group's timeouts (its fixed_order_reduction is
    // dropped: it is about CPU sums).
    static std::unique_ptr<CommNccl> from_mpi(Communicator& cpu_group, int device,
                                              cudaStream_t compute_stream = nullptr);

    ~CommNccl() override;

    int device() const { return device_; }
    cudaStream_t comm_stream() const;
    cudaStream_t compute_stream() const { return compute_stream_; }
    // Later operations order themselves after work queued on `stream` (a
    // stream of this communicator's device).
    void set_compute_stream(cudaStream_t stream);

    // Makes `stream` (default: the compute stream) wait, on the device, for
    // every operation issued so far. Not inside group_start()/group_end().
    void make_compute_wait();
    void make_compute_wait(cudaStream_t stream);
    // The same for one Work of this communicator (a group's Work, or one from
    // elsewhere, waits for everything issued so far).
    void make_stream_wait(const Work& work, cudaStream_t stream);

    // Aborts the NCCL communicator: queued operations end, their Works throw,
    // later calls throw. For a rank that gives up on its peers.
    void abort();
    bool aborted() const;
    // The raw handle (nullptr once aborted), for calls Loom does not wrap.
    ncclComm_t nccl_comm() const;

  protected:
    WorkPtr post_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op,
                            WorkInfo info) override;
    WorkPtr post_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                ReduceOp op, WorkInfo info) override;
    WorkPtr post_all_gather(const void* send, void* recv, int64_t send_count, DType dtype,
                            WorkInfo info) override;
    WorkPtr post_broadcast(void* buf, int64_t count, DType dtype, int root, WorkInfo info) override;
    WorkPtr post_send(const void* buf, int64_t count, DType dtype, int peer, int tag,
                      WorkInfo info) override;
    WorkPtr post_recv(void* buf, int64_t count, DType dtype, int peer, int tag,
                      WorkInfo info) override;
    WorkPtr post_barrier(WorkInfo info) override;
    std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks,
                                           const std::string& name) override;
    void on_group_start() override;
    void on_group_end() override;
    bool accepts_dtype(DType d) const override;

  private:
    struct SplitTag {};
    CommNccl(SplitTag, std::shared_ptr<NcclShared> shared, int rank, std::vector<int> world_ranks,
             std::string name, int device, cudaStream_t compute_stream, const CommOptions& options);
    void init_streams();

    // Orders the comm stream after compute, runs `call` (which enqueues the
    // NCCL call and may stage inputs), records completion.
    template <typename F>
    WorkPtr enqueue(WorkInfo info, F&& call);
    // A stream-ordered device copy of `bytes` at `src`, freed after the
    // operation is enqueued (at group_end inside a group).
    const void* stage(const void* src, size_t bytes, std::vector<void*>& staged);
    void release(std::vector<void*>& staged);
    void check_device_buffer(const void* p, const WorkInfo& info, const char* which) const;
    std::vector<int64_t> gather_to_host(const std::vector<int64_t>& mine);
    void drain_for_destruction() noexcept;

    std::shared_ptr<NcclShared> shared_;
    int device_ = 0;
    cudaStream_t compute_stream_ = nullptr;
    std::unique_ptr<CommStreams> streams_;
    bool in_group_ = false;
    std::vector<std::shared_ptr<NcclOp>> group_ops_;  // recorded at group_end
    std::vector<void*> group_staged_;                 // freed at group_end
    std::string group_error_;  // an operation of the open group failed to enqueue
};

}  // namespace loom

#endif  // LOOM_HAVE_NCCL
