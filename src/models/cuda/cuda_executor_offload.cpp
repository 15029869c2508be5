// CudaExecutor: activation offloading, the copy-stream choreography.
//
// The inputs of checkpointed applications (hidden states h = a for
// checkpointed a) live in a ring of R = min(horizon + 1, count) device slots.
// Forward: before the ring slot is written again, the compute stream waits
// for the copy-out of its previous occupant; once the application reading h
// is enqueued, the copy stream (ordered after it by an event) copies h to
// pinned host memory. Backward walks down: before application a, copies in
// the next offloaded inputs (highest first) while fewer than R are on the
// device and not yet consumed, each after the compute stream has finished the
// backward of the slot's previous occupant; the compute stream waits for a
// copy-in only right before the recompute that reads it. So at most R kept
// inputs occupy device memory, and the copies overlap the compute of the
// layers above (SMP's activation_loading_horizon).
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "models/cuda/cuda_executor.h"

namespace loom {

namespace {

cudaStream_t stream_of(void* s) {
    return static_cast<cudaStream_t>(s);
}
cudaEvent_t event_of(void* e) {
    return static_cast<cudaEvent_t>(e);
}

void* new_event() {
    cudaEvent_t e = nullptr;
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
}

}  // namespace

template <typename T>
void CudaExecutor<T>::offload_setup() {
    const size_t need = offloaded_.size() * size_t(N_ * C_) * sizeof(T);
    if (need > host_bytes_) {
        if (host_) LOOM_CUDA_CHECK(cudaFreeHost(host_));
        host_ = nullptr;
        void* p = nullptr;
        LOOM_CUDA_CHECK(cudaMallocHost(&p, need));
        host_ = static_cast<T*>(p);
        host_bytes_ = need;
    }
    if (!copy_stream_) {
        cudaStream_t s = nullptr;
        LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        copy_stream_ = s;
        fwd_event_ = new_event();
    }
    // Fresh events per plan: a never-recorded event is complete, so the first
    // waits on each slot pass at once.
    for (auto* v : {&d2h_done_, &h2d_done_, &bwd_done_}) {
        for (void* e : *v) LOOM_CUDA_CHECK(cudaEventDestroy(event_of(e)));
        v->assign(ring_.size(), nullptr);
        for (void*& e : *v) e = new_event();
    }
}

template <typename T>
void CudaExecutor<T>::offload_release() {
    if (copy_stream_) (void)cudaStreamSynchronize(stream_of(copy_stream_));
    for (auto* v : {&d2h_done_, &h2d_done_, &bwd_done_}) {
        for (void* e : *v) (void)cudaEventDestroy(event_of(e));
        v->clear();
    }
    if (fwd_event_) (void)cudaEventDestroy(event_of(fwd_event_));
    if (copy_stream_) (void)cudaStreamDestroy(stream_of(copy_stream_));
    if (host_) (void)cudaFreeHost(host_);
    fwd_event_ = copy_stream_ = nullptr;
    host_ = nullptr;
    host_bytes_ = 0;
}

template <typename T>
void CudaExecutor<T>::before_write_hidden(int64_t h) {
    const int64_t i = off_index_.empty() ? -1 : off_index_[size_t(h)];
    if (i < 0) return;
    const size_t slot = size_t(i) % ring_.size();
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream(), event_of(d2h_done_[slot]), 0));
}

template <typename T>
void CudaExecutor<T>::after_read_hidden(int64_t h) {
    const int64_t i = off_index_.empty() ? -1 : off_index_[size_t(h)];
    if (i < 0) return;
    const size_t slot = size_t(i) % ring_.size();
    const size_t bytes = size_t(N_ * C_) * sizeof(T);
    LOOM_CUDA_CHECK(cudaEventRecord(event_of(fwd_event_), ctx_.stream()));
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream_of(copy_stream_), event_of(fwd_event_), 0));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(host_ + i * N_ * C_, hidden_at(h), bytes,
                                    cudaMemcpyDeviceToHost, stream_of(copy_stream_)));
    LOOM_CUDA_CHECK(cudaEventRecord(event_of(d2h_done_[slot]), stream_of(copy_stream_)));
}

template <typename T>
void CudaExecutor<T>::prefetch_for(int64_t app) {
    if (offloaded_.empty()) return;
    const int64_t R = int64_t(ring_.size());
    const size_t bytes = size_t(N_ * C_) * sizeof(T);
    // Inputs at or below `app`, highest first, while the ring has room.
    while (next_prefetch_ >= 0 && offloaded_[size_t(next_prefetch_)] <= app && outstanding_ < R) {
        const int64_t i = next_prefetch_--;
        const size_t slot = size_t(i % R);
        // The slot's previous occupant (i + R) finished its backward.
        LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream_of(copy_stream_), event_of(bwd_done_[slot]), 0));
        LOOM_CUDA_CHECK(cudaMemcpyAsync(ring_[slot], host_ + i * N_ * C_, bytes,
                                        cudaMemcpyHostToDevice, stream_of(copy_stream_)));
        LOOM_CUDA_CHECK(cudaEventRecord(event_of(h2d_done_[slot]), stream_of(copy_stream_)));
        ++outstanding_;
    }
}

template <typename T>
void CudaExecutor<T>::wait_hidden(int64_t h) {
    const int64_t i = off_index_.empty() ? -1 : off_index_[size_t(h)];
    if (i < 0) return;
    const size_t slot = size_t(i) % ring_.size();
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream(), event_of(h2d_done_[slot]), 0));
}

template <typename T>
void CudaExecutor<T>::release_hidden(int64_t h) {
    const int64_t i = off_index_.empty() ? -1 : off_index_[size_t(h)];
    if (i < 0) return;
    const size_t slot = size_t(i) % ring_.size();
    LOOM_CUDA_CHECK(cudaEventRecord(event_of(bwd_done_[slot]), ctx_.stream()));
    --outstanding_;
}

#define LOOM_INSTANTIATE(T)                                      \
    template void CudaExecutor<T>::offload_setup();              \
    template void CudaExecutor<T>::offload_release();            \
    template void CudaExecutor<T>::before_write_hidden(int64_t); \
    template void CudaExecutor<T>::after_read_hidden(int64_t);   \
    template void CudaExecutor<T>::prefetch_for(int64_t);        \
    template void CudaExecutor<T>::wait_hidden(int64_t);         \
    template void CudaExecutor<T>::release_hidden(int64_t);
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(__nv_bfloat16)
LOOM_INSTANTIATE(__half)
#undef LOOM_INSTANTIATE

}  // namespace loom
