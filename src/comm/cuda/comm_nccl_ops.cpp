// CommNccl: posting the collectives and point-to-point operations (the set-up,
// groups and split are in comm_nccl.cpp).
#include "comm/cuda/comm_nccl.h"

#if defined(LOOM_HAVE_NCCL)

#include "comm/cuda/comm_nccl_internal.h"

namespace loom {

using namespace nccl_detail;

// --- posting -------------------------------------------------------------------

template <typename F>
WorkPtr CommNccl::enqueue(WorkInfo info, F&& call) {
    LOOM_CHECK(!shared_->aborted(),
               "{} on group '{}': the NCCL communicator was aborted ({}); it cannot be used again",
               info.what, info.group, shared_->reason);
    DeviceGuard guard(device_);
    auto op = std::make_shared<NcclOp>(shared_);
    std::vector<void*> staged;
    try {
        LOOM_CUDA_CHECK(cudaEventRecord(streams_->ready, compute_stream_));
        LOOM_CUDA_CHECK(cudaStreamWaitEvent(streams_->comm, streams_->ready, 0));
        const ncclResult_t r = call(shared_->comm, streams_->comm, staged);
        if (nccl_failed(r)) LOOM_FAIL("{}", nccl_reason(r, shared_->comm));
        if (!in_group_) {
            LOOM_CUDA_CHECK(cudaEventRecord(op->done, streams_->comm));
            op->recorded = true;
        }
    } catch (const std::exception& e) {
        // This rank did not join the operation, so its peers are out of step:
        // end the communicator rather than let them wait out the timeout.
        const std::string msg = fmt::format(
            "rank {} ({} rank {}): NCCL {} on group '{}' (world ranks {}) could not be issued: {}; "
            "communicator aborted",
            info.world_rank, info.group, info.rank, info.what, info.group, info.group_ranks,
            e.what());
        if (in_group_) {
            // Aborting now would free the communicator under NCCL's open
            // group; on_group_end closes the group first, then aborts.
            group_staged_.insert(group_staged_.end(), staged.begin(), staged.end());
            if (group_error_.empty()) group_error_ = msg;
        } else {
            release(staged);
            shared_->abort(msg);
        }
        throw Error(msg);
    }
    if (in_group_) {
        group_ops_.push_back(op);
        group_staged_.insert(group_staged_.end(), staged.begin(), staged.end());
    } else {
        release(staged);
    }
    return std::make_shared<NcclWork>(std::move(info), std::move(op));
}

const void* CommNccl::stage(const void* src, size_t bytes, std::vector<void*>& staged) {
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMallocAsync(&p, bytes, streams_->comm));
    staged.push_back(p);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(p, src, bytes, cudaMemcpyDeviceToDevice, streams_->comm));
    return p;
}

// Stream-ordered: each free takes effect after everything already queued on
// the comm stream, i.e. after the NCCL call that reads the copy.
void CommNccl::release(std::vector<void*>& staged) {
    for (void* p : staged) (void)cudaFreeAsync(p, streams_->comm);
    staged.clear();
}

void CommNccl::check_device_buffer(const void* p, const WorkInfo& info, const char* which) const {
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        LOOM_FAIL("{} on group '{}': cannot inspect the {}buffer: {}", info.what, info.group, which,
                  cudaGetErrorString(e));
    }
    LOOM_CHECK(a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged,
               "{} on group '{}': the {}buffer is host memory; CommNccl moves device buffers "
               "(CPU tensors go through CommMpi)",
               info.what, info.group, which);
    LOOM_CHECK(a.type == cudaMemoryTypeManaged || a.device == device_,
               "{} on group '{}': the {}buffer is on CUDA device {}, this communicator drives "
               "device {}",
               info.what, info.group, which, a.device, device_);
}

WorkPtr CommNccl::post_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op,
                                  WorkInfo info) {
    if (count == 0) return work_done(std::move(info));
    check_device_buffer(buf, info, "");
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>&) {
        return ncclAllReduce(buf, buf, size_t(count), nccl_type(dtype), nccl_op(op), c, s);
    });
}

WorkPtr CommNccl::post_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                      ReduceOp op, WorkInfo info) {
    if (recv_count == 0) return work_done(std::move(info));
    check_device_buffer(send, info, "send ");
    check_device_buffer(recv, info, "receive ");
    const size_t chunk = size_t(recv_count) * dtype_size(dtype);
    const size_t total = chunk * size_t(size());
    // NCCL's in-place form has recv at this rank's chunk of send; any other
    // overlap would be overwritten before it is read, so send is copied first.
    const bool in_place = recv == static_cast<const std::byte*>(send) + size_t(rank()) * chunk;
    const bool staging = !in_place && overlaps(send, total, recv, chunk);
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>& staged) {
        const void* src = staging ? stage(send, total, staged) : send;
        return ncclReduceScatter(src, recv, size_t(recv_count), nccl_type(dtype), nccl_op(op), c,
                                 s);
    });
}

WorkPtr CommNccl::post_all_gather(const void* send, void* recv, int64_t send_count, DType dtype,
                                  WorkInfo info) {
    if (send_count == 0) return work_done(std::move(info));
    check_device_buffer(send, info, "send ");
    check_device_buffer(recv, info, "receive ");
    const size_t chunk = size_t(send_count) * dtype_size(dtype);
    const size_t total = chunk * size_t(size());
    // In place when send is this rank's slot of recv (NCCL's form); see above.
    const bool in_place = send == static_cast<const std::byte*>(recv) + size_t(rank()) * chunk;
    const bool staging = !in_place && overlaps(send, chunk, recv, total);
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>& staged) {
        const void* src = staging ? stage(send, chunk, staged) : send;
        return ncclAllGather(src, recv, size_t(send_count), nccl_type(dtype), c, s);
    });
}

WorkPtr CommNccl::post_broadcast(void* buf, int64_t count, DType dtype, int root, WorkInfo info) {
    if (count == 0) return work_done(std::move(info));
    check_device_buffer(buf, info, "");
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>&) {
        return ncclBroadcast(buf, buf, size_t(count), nccl_type(dtype), root, c, s);
    });
}

// NOTE: `tag` is not sent: NCCL matches messages between two ranks in the
// order they were posted (see comm_nccl.h).
WorkPtr CommNccl::post_send(const void* buf, int64_t count, DType dtype, int peer, int /*tag*/,
                            WorkInfo info) {
    LOOM_CHECK(peer != rank() || in_group_,
               "{} on group '{}': a send to self must sit between group_start() and group_end() "
               "with its receive (NCCL queues both on one stream)",
               info.what, info.group);
    if (count == 0) return work_done(std::move(info));
    check_device_buffer(buf, info, "");
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>&) {
        return ncclSend(buf, size_t(count), nccl_type(dtype), peer, c, s);
    });
}

WorkPtr CommNccl::post_recv(void* buf, int64_t count, DType dtype, int peer, int /*tag*/,
                            WorkInfo info) {
    LOOM_CHECK(peer != rank() || in_group_,
               "{} on group '{}': a receive from self must sit between group_start() and "
               "group_end() with its send (NCCL queues both on one stream)",
               info.what, info.group);
    if (count == 0) return work_done(std::move(info));
    check_device_buffer(buf, info, "");
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>&) {
        return ncclRecv(buf, size_t(count), nccl_type(dtype), peer, c, s);
    });
}

// A reduction completes on a rank only once every rank has contributed, so
// its completion is the barrier. It is ordered after compute like any other
// operation.
WorkPtr CommNccl::post_barrier(WorkInfo info) {
    int32_t* word = streams_->barrier_word;
    return enqueue(std::move(info), [&](ncclComm_t c, cudaStream_t s, std::vector<void*>&) {
        return ncclAllReduce(word, word, 1, ncclInt32, ncclMax, c, s);
    });
}

}  // namespace loom

#endif  // LOOM_HAVE_NCCL
