// CommMpi: Open MPI implementation of comm.h (see comm_mpi.h for the policy).
//
// A Work is a list of phases; each phase posts nonblocking MPI requests and
// has a finish step run once they complete (divide for avg, the rank-order
// sum of the fixed-order reduction), after which the next phase is posted.
// test() and wait() drive that state machine; wait() also enforces the timeout.
#include "comm/comm_mpi.h"

#include "comm/scratch_pool.h"
#include "core/check.h"

#ifdef LOOM_HAVE_MPI

#include <fmt/format.h>
// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>

#define LOOM_MPI_CHECK(call)                                                        \
    do {                                                                            \
        int loom_mpi_rc_ = (call);                                                  \
        if (loom_mpi_rc_ != MPI_SUCCESS) ::loom::mpi_fail(#call, loom_mpi_rc_);     \
    } while (0)

namespace loom {

[[noreturn]] static void mpi_fail(const char* call, int rc) {
    char text[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    LOOM_FAIL("MPI call failed: {}: {}", call, std::string(text, size_t(len)));
}

namespace {

MPI_Datatype mpi_type(DType t) {
    switch (t) {
        case DType::f32: return MPI_FLOAT;
        case DType::f64: return MPI_DOUBLE;
        case DType::i32: return MPI_INT32_T;
        case DType::i64: return MPI_INT64_T;
        default: LOOM_FAIL("no MPI datatype for {}", dtype_name(t));
    }
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

int mpi_count(int64_t n, const WorkInfo& info) {
    LOOM_CHECK(n <= INT_MAX, "{} on group '{}': {} elements exceed MPI's int count; split the call",
               info.what, info.group, n);
    return int(n);
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
    auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

struct Phase {
    // Posts this phase's requests into `reqs`.
    std::function<void(std::vector<MPI_Request>& reqs)> start;
    // Runs after they completed (statuses in request order).
    std::function<void(const std::vector<MPI_Status>& statuses)> finish;
};

class MpiWork final : public Work {
public:
    // cancellable: a single receive, which MPI_Cancel can withdraw after a
    // timeout (collectives cannot be cancelled).
    MpiWork(WorkInfo info, std::vector<Phase> phases, bool cancellable = false)
        : Work(std::move(info)), phases_(std::move(phases)), cancellable_(cancellable) {
        advance();
    }
    ~MpiWork() override {
        if (done_ || abandoned_) return;
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) return;
        try {
            wait();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "loom: unfinished %s dropped: %s\n", info_.what.c_str(), e.what());
        }
    }

    bool test() override {
        if (abandoned_) return false;
        if (!error_.empty()) throw Error(error_);
        while (!done_) {
            int flag = 0;
            statuses_.resize(reqs_.size());
            if (!reqs_.empty())
                LOOM_MPI_CHECK(MPI_Testall(int(reqs_.size()), reqs_.data(), &flag, statuses_.data()));
            else
                flag = 1;
            if (!flag) return false;
            if (phases_[current_].finish) {
                try {
                    phases_[current_].finish(statuses_);
                } catch (const std::exception& e) {
                    // The requests are complete: nothing to wait for any more.
                    done_ = true;
                    error_ = e.what();
                    throw;
                }
            }
            ++current_;
            advance();
        }
        return true;
    }

protected:
    bool wait_until(Clock::time_point deadline) override {
        // Open MPI's nonblocking collectives advance only inside MPI calls, so
        // poll tightly (yielding the core to oversubscribed peers) for
        // CommOptions::spin_s; after that the wait is a stall, not a transfer,
        // and a ~0.5 ms nap keeps an idle rank from burning a core.
        const auto start = Clock::now();
        const auto spin = std::chrono::duration<double>(info_.options.spin_s);
        while (!test()) {
            const auto now = Clock::now();
            if (now > deadline) return false;
            if (now - start < spin)
                std::this_thread::yield();
            else
                std::this_thread::sleep_for(std::chrono::microseconds(500));
        }
        return true;
    }
    void abandon() override {
        if (cancellable_) {
            // Withdraw the receive so MPI never writes the caller's buffer later.
            for (MPI_Request& r : reqs_) {
                if (r == MPI_REQUEST_NULL) continue;
                MPI_Cancel(&r);
                MPI_Wait(&r, MPI_STATUS_IGNORE);
            }
            abandoned_ = true;
            return;
        }
        // MPI cannot cancel a collective; it may still touch the scratch buffers
        // the phases captured. Keep them alive forever rather than hand freed
        // memory to MPI. NOTE: deliberate leak, only after a timeout.
        abandoned_ = true;
        new std::vector<Phase>(std::move(phases_));
    }
    [[noreturn]] void abort_job(const std::string& message) override {
        std::fprintf(stderr, "loom: fatal: %s; aborting the job\n", message.c_str());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
        std::abort();
    }

private:
    void advance() {
        reqs_.clear();
        if (current_ >= phases_.size()) {
            done_ = true;
            return;
        }
        phases_[current_].start(reqs_);
    }

    std::vector<Phase> phases_;
    size_t current_ = 0;
    std::vector<MPI_Request> reqs_;
    std::vector<MPI_Status> statuses_;
    bool cancellable_ = false;
    std::string error_;  // a finish step failed; reported again by later calls
    bool done_ = false;
    bool abandoned_ = false;
};

// Splits n elements into `parts` contiguous chunks, the first n % parts one
// element longer. Fills counts and displacements (elements).
void chunk_layout(int64_t n, int parts, std::vector<int>& counts, std::vector<int>& displs) {
    counts.assign(size_t(parts), 0);
    displs.assign(size_t(parts), 0);
    int64_t off = 0;
    for (int i = 0; i < parts; ++i) {
        int64_t c = n / parts + (i < n % parts ? 1 : 0);
        counts[size_t(i)] = int(c);
        displs[size_t(i)] = int(off);
        off += c;
    }
}

class CommMpi final : public Communicator {
public:
    CommMpi(MPI_Comm comm, int rank, std::vector<int> world_ranks, std::string name,
            CommOptions options)
        : Communicator(rank, std::move(world_ranks), std::move(name), options), comm_(comm) {
        LOOM_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    }
    ~CommMpi() override {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    }

protected:
    WorkPtr post_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op,
                            WorkInfo info) override {
        const int n = mpi_count(count, info);
        const int size = this->size();
        std::vector<Phase> phases;
        if (!options().fixed_order_reduction || op == ReduceOp::max || size == 1) {
            MPI_Comm c = comm_;
            phases.push_back({[=](std::vector<MPI_Request>& reqs) {
                                  reqs.emplace_back();
                                  LOOM_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, n, mpi_type(dtype),
                                                                mpi_op(op), c, &reqs.back()));
                              },
                              [=](const std::vector<MPI_Status>&) {
                                  if (op == ReduceOp::avg) comm_divide(buf, count, dtype, size);
                              }});
            return std::make_shared<MpiWork>(std::move(info), std::move(phases));
        }
        // Fixed order: all-to-all gives rank r every rank's copy of chunk r; r sums
        // them in rank order; an all-gather spreads the sums.
        auto layout = std::make_shared<std::pair<std::vector<int>, std::vector<int>>>();
        chunk_layout(count, size, layout->first, layout->second);
        const int me = rank();
        const int mine = layout->first[size_t(me)];
        const size_t esize = dtype_size(dtype);
        auto tmp = std::make_shared<std::vector<std::byte>>(size_t(mine) * size_t(size) * esize);
        // Nonblocking collectives read the count arrays until they complete, so
        // they live as long as the Work (shared_ptr captured by the phases).
        auto rlayout = std::make_shared<std::pair<std::vector<int>, std::vector<int>>>();
        rlayout->first.assign(size_t(size), mine);
        for (int q = 0; q < size; ++q) rlayout->second.push_back(q * mine);
        MPI_Comm c = comm_;
        phases.push_back(
            {[=](std::vector<MPI_Request>& reqs) {
                 reqs.emplace_back();
                 LOOM_MPI_CHECK(MPI_Ialltoallv(buf, layout->first.data(), layout->second.data(),
                                               mpi_type(dtype), tmp->data(), rlayout->first.data(),
                                               rlayout->second.data(), mpi_type(dtype), c,
                                               &reqs.back()));
             },
             [=](const std::vector<MPI_Status>&) {
                 std::byte* dst = static_cast<std::byte*>(buf) + size_t(layout->second[size_t(me)]) * esize;
                 const size_t bytes = size_t(mine) * esize;
                 if (bytes) std::memcpy(dst, tmp->data(), bytes);
                 for (int q = 1; q < size; ++q)
                     comm_reduce_into(dst, tmp->data() + size_t(q) * bytes, mine, dtype, op);
                 if (op == ReduceOp::avg) comm_divide(dst, mine, dtype, size);
             }});
        phases.push_back({[=](std::vector<MPI_Request>& reqs) {
                              reqs.emplace_back();
                              LOOM_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf,
                                                             layout->first.data(),
                                                             layout->second.data(), mpi_type(dtype),
                                                             c, &reqs.back()));
                          },
                          nullptr});
        return std::make_shared<MpiWork>(std::move(info), std::move(phases));
    }

    WorkPtr post_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                ReduceOp op, WorkInfo info) override {
        const int n = mpi_count(recv_count * size(), info) / std::max(size(), 1);
        const int size = this->size();
        const size_t esize = dtype_size(dtype);
        const size_t chunk_bytes = size_t(n) * esize;
        // MPI forbids aliased send/recv: stage an overlapping send in scratch.
        auto staged = std::make_shared<std::vector<std::byte>>();
        if (overlaps(send, chunk_bytes * size_t(size), recv, chunk_bytes)) {
            staged->assign(static_cast<const std::byte*>(send),
                           static_cast<const std::byte*>(send) + chunk_bytes * size_t(size));
            send = staged->data();
        }
        // An all-to-all, then each rank sums its chunk's rows in rank order. Open
        // MPI 4.1's MPI_Ireduce_scatter_block (coll/libnbc) reduces the whole
        // buffer onto one rank over a binomial tree and scatters it from there:
        // 3 to 6x slower for 25 MB buckets on 4 ranks (docs/parallelism.md). The
        // exchange moves the same bytes as a ring, and the fixed order makes
        // the sum bitwise CommLocal's. The scratch (one bucket) is taken while
        // the exchange is in flight and reused by the next call.
        MPI_Comm c = comm_;
        std::vector<Phase> phases;
        std::shared_ptr<std::byte[]> tmp = scratch_->take(chunk_bytes * size_t(size));
        phases.push_back({[=](std::vector<MPI_Request>& reqs) {
                              reqs.emplace_back();
                              LOOM_MPI_CHECK(MPI_Ialltoall(send, n, mpi_type(dtype), tmp.get(), n,
                                                           mpi_type(dtype), c, &reqs.back()));
                          },
                          [=](const std::vector<MPI_Status>&) {
                              (void)staged;  // keeps the staged copy alive until done
                              if (chunk_bytes) std::memcpy(recv, tmp.get(), chunk_bytes);
                              for (int q = 1; q < size; ++q)
                                  comm_reduce_into(recv, tmp.get() + size_t(q) * chunk_bytes, n,
                                                   dtype, op);
                              if (op == ReduceOp::avg) comm_divide(recv, n, dtype, size);
                          }});
        return std::make_shared<MpiWork>(std::move(info), std::move(phases));
    }

    WorkPtr post_all_gather(const void* send, void* recv, int64_t send_count, DType dtype,
                            WorkInfo info) override {
        const int n = mpi_count(send_count * size(), info) / std::max(size(), 1);
        const size_t chunk_bytes = size_t(n) * dtype_size(dtype);
        const void* in_place_at = static_cast<std::byte*>(recv) + size_t(rank()) * chunk_bytes;
        const bool in_place = send == in_place_at;
        auto staged = std::make_shared<std::vector<std::byte>>();
        if (!in_place && overlaps(send, chunk_bytes, recv, chunk_bytes * size_t(size()))) {
            staged->assign(static_cast<const std::byte*>(send),
                           static_cast<const std::byte*>(send) + chunk_bytes);
            send = staged->data();
        }
        MPI_Comm c = comm_;
        std::vector<Phase> phases;
        phases.push_back({[=](std::vector<MPI_Request>& reqs) {
                              reqs.emplace_back();
                              LOOM_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n,
                                                            mpi_type(dtype), recv, n,
                                                            mpi_type(dtype), c, &reqs.back()));
                          },
                          [staged](const std::vector<MPI_Status>&) {}});
        return std::make_shared<MpiWork>(std::move(info), std::move(phases));
    }

    WorkPtr post_broadcast(void* buf, int64_t count, DType dtype, int root,
                           WorkInfo info) override {
        const int n = mpi_count(count, info);
        MPI_Comm c = comm_;
        std::vector<Phase> phases;
        phases.push_back({[=](std::vector<MPI_Request>& reqs) {
                              reqs.emplace_back();
                              LOOM_MPI_CHECK(MPI_Ibcast(buf, n, mpi_type(dtype), root, c, &reqs.back()));
                          },
                          nullptr});
        return std::make_shared<MpiWork>(std::move(info), std::move(phases));
    }

    WorkPtr post_send(const void* buf, int64_t count, DType dtype, int peer, int tag,
                      WorkInfo info) override {
        const int n = mpi_count(count, info);
        MPI_Comm c = comm_;
        std::vector<Phase> phases;
        phases.push_back({[=](std::vector<MPI_Request>& reqs) {
                              reqs.emplace_back();
                              LOOM_MPI_CHECK(MPI_Isend(buf, n, mpi_type(dtype), peer, tag, c, &reqs.back()));
                          },
                          nullptr});
        return std::make_shared<MpiWork>(std::move(info), std::move(phases));
    }

    WorkPtr post_recv(void* buf, int64_t count, DType dtype, int peer, int tag,
                      WorkInfo info) override {
        const int n = mpi_count(count, info);
        MPI_Comm c = comm_;
        std::string what = info.what, group = info.group;
        std::vector<Phase> phases;
        phases.push_back(
            {[=](std::vector<MPI_Request>& reqs) {
                 reqs.emplace_back();
                 LOOM_MPI_CHECK(MPI_Irecv(buf, n, mpi_type(dtype), peer, tag, c, &reqs.back()));
             },
             [=](const std::vector<MPI_Status>& st) {
                 int got = 0;
                 MPI_Status s = st.at(0);
                 LOOM_MPI_CHECK(MPI_Get_count(&s, mpi_type(dtype), &got));
                 LOOM_CHECK(got == n, "{} on group '{}': the message held {} elements, expected {}",
                            what, group, got, n);
             }});
        return std::make_shared<MpiWork>(std::move(info), std::move(phases), /*cancellable=*/true);
    }

    WorkPtr post_barrier(WorkInfo info) override {
        MPI_Comm c = comm_;
        std::vector<Phase> phases;
        phases.push_back({[=](std::vector<MPI_Request>& reqs) {
                              reqs.emplace_back();
                              LOOM_MPI_CHECK(MPI_Ibarrier(c, &reqs.back()));
                          },
                          nullptr});
        return std::make_shared<MpiWork>(std::move(info), std::move(phases));
    }

    std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks,
                                           const std::string& name) override {
        // MPI_Comm_split blocks without a timeout: a timed barrier first turns a
        // missing rank into a report instead of a hang.
        post_barrier(make_info(fmt::format("barrier before split('{}')", name)))->wait();
        auto self = std::find(ranks.begin(), ranks.end(), rank());
        const bool member = self != ranks.end();
        const int color = member ? *std::min_element(ranks.begin(), ranks.end()) : MPI_UNDEFINED;
        const int key = member ? int(self - ranks.begin()) : 0;
        MPI_Comm sub = MPI_COMM_NULL;
        LOOM_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
        if (!member) return nullptr;
        std::vector<int> world;
        for (int r : ranks) world.push_back(world_ranks()[size_t(r)]);
        int sub_rank = 0, sub_size = 0;
        LOOM_MPI_CHECK(MPI_Comm_rank(sub, &sub_rank));
        LOOM_MPI_CHECK(MPI_Comm_size(sub, &sub_size));
        auto comm = std::make_unique<CommMpi>(sub, sub_rank, world, name, options());
        // Members must have passed identical lists; a wrong list shows up as a
        // size mismatch or a different list on some member.
        int64_t my_size = int64_t(ranks.size());
        std::vector<int64_t> sizes(static_cast<size_t>(sub_size));
        comm->all_gather(&my_size, sizes.data(), 1, DType::i64)->wait();
        for (int q = 0; q < sub_size; ++q)
            LOOM_CHECK(sizes[size_t(q)] == my_size && sub_size == int(ranks.size()),
                       "split of group '{}' into '{}': rank {} lists {} but the group formed has "
                       "{} members (member {} lists {} ranks); members must pass identical lists",
                       this->name(), name, rank(), comm_format_ranks(ranks), sub_size, q,
                       sizes[size_t(q)]);
        std::vector<int64_t> mine(ranks.begin(), ranks.end());
        std::vector<int64_t> all(mine.size() * size_t(sub_size));
        comm->all_gather(mine.data(), all.data(), int64_t(mine.size()), DType::i64)->wait();
        for (int q = 0; q < sub_size; ++q)
            LOOM_CHECK(std::equal(mine.begin(), mine.end(), all.begin() + q * int64_t(mine.size())),
                       "split of group '{}' into '{}': member {} passed a different list than "
                       "{}",
                       this->name(), name, q, comm_format_ranks(ranks));
        LOOM_ASSERT(sub_rank == key, "split '{}': MPI rank {} != list position {}", name, sub_rank,
                    key);
        return comm;
    }

private:
    MPI_Comm comm_ = MPI_COMM_NULL;
    std::shared_ptr<ScratchPool> scratch_ = std::make_shared<ScratchPool>();
};

}  // namespace

MpiSession::MpiSession() {
    int initialized = 0;
    LOOM_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
        int provided = 0;
        LOOM_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
        owns_ = true;
    }
    LOOM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
    LOOM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
}

MpiSession::~MpiSession() {
    if (!owns_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    // Finalize synchronises with peers; while an error unwinds, exit without it
    // so mpirun sees a failed rank instead of a hang.
    if (!finalized && std::uncaught_exceptions() == 0) MPI_Finalize();
}

bool MpiSession::available() { return true; }

std::unique_ptr<Communicator> comm_mpi_world(const CommOptions& options) {
    int initialized = 0;
    LOOM_MPI_CHECK(MPI_Initialized(&initialized));
    LOOM_CHECK(initialized, "comm_mpi_world: MPI is not initialised (create an MpiSession first)");
    MPI_Comm world = MPI_COMM_NULL;
    LOOM_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));
    int rank = 0, size = 0;
    LOOM_MPI_CHECK(MPI_Comm_rank(world, &rank));
    LOOM_MPI_CHECK(MPI_Comm_size(world, &size));
    std::vector<int> ranks(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) ranks[size_t(r)] = r;
    return std::make_unique<CommMpi>(world, rank, std::move(ranks), "world", options);
}

}  // namespace loom

#else  // !LOOM_HAVE_MPI

namespace loom {

MpiSession::MpiSession() { LOOM_FAIL("this Loom was built without MPI (LOOM_MPI=OFF)"); }
MpiSession::~MpiSession() = default;
bool MpiSession::available() { return false; }
std::unique_ptr<Communicator> comm_mpi_world(const CommOptions&) {
    LOOM_FAIL("this Loom was built without MPI (LOOM_MPI=OFF)");
}

}  // namespace loom

#endif  // LOOM_HAVE_MPI
