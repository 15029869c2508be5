// CommLocal: threads sharing a rendezvous (see comm_local.h). All shared state
// of one world sits behind one mutex and one condition variable: tests are
// small and correctness matters more than contention here.
#include "comm/comm_local.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "core/check.h"
#include "core/cpu_bind.h"

namespace loom {

namespace {

struct LocalShared {
    std::mutex mu;
    std::condition_variable cv;
    std::string failure;  // non-empty once a rank failed; every waiter throws it
};

// Completion state of one operation as one rank sees it.
struct OpState {
    bool done = false;
    bool abandoned = false;  // a rank timed out on it: never touch its buffers
    std::string error;
};

struct LocalGroup;

struct Post {
    std::string what;  // identical on every rank for a well-formed call
    const void* send = nullptr;
    void* recv = nullptr;
    int64_t count = 0;  // elements per rank (all_reduce: whole buffer)
    DType dtype = DType::f32;
    ReduceOp op = ReduceOp::sum;
    int root = 0;
    std::vector<int> split_ranks;
    enum class Kind { all_reduce, reduce_scatter, all_gather, broadcast, barrier, split } kind =
        Kind::barrier;
};

struct Round : OpState {
    std::vector<Post> posts;     // (size)
    std::vector<bool> arrived;   // (size)
    int n_arrived = 0;
    std::vector<std::shared_ptr<LocalGroup>> split_group;  // (size) nullptr: not a member
    std::vector<int> split_rank;                           // (size)
};

struct Message : OpState {
    const void* send = nullptr;
    void* recv = nullptr;
    int64_t count = 0;
    DType dtype = DType::f32;
    std::shared_ptr<Message> peer;  // the matched other side
};

struct LocalGroup {
    std::shared_ptr<LocalShared> shared;
    int size = 0;
    std::map<uint64_t, std::shared_ptr<Round>> rounds;  // by per-rank call sequence
    using Key = std::tuple<int, int, int>;              // (src, dst, tag)
    std::map<Key, std::deque<std::shared_ptr<Message>>> sends, recvs;
};

class LocalWork final : public Work {
public:
    LocalWork(WorkInfo info, std::shared_ptr<LocalShared> shared, std::shared_ptr<OpState> op)
        : Work(std::move(info)), shared_(std::move(shared)), op_(std::move(op)) {}
    ~LocalWork() override {
        // The buffers must outlive the operation: finish it, but never throw here.
        {
            std::lock_guard<std::mutex> lock(shared_->mu);
            if (op_->done || op_->abandoned || !shared_->failure.empty()) return;
        }
        try {
            wait();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "loom: unfinished %s dropped: %s\n", info_.what.c_str(), e.what());
        }
    }

    bool test() override {
        std::lock_guard<std::mutex> lock(shared_->mu);
        check_locked();
        return op_->done;
    }

protected:
    bool wait_until(Clock::time_point deadline) override {
        std::unique_lock<std::mutex> lock(shared_->mu);
        shared_->cv.wait_until(lock, deadline,
                               [&] { return op_->done || !shared_->failure.empty(); });
        check_locked();
        return op_->done;
    }
    void abandon() override {
        std::lock_guard<std::mutex> lock(shared_->mu);
        op_->abandoned = true;
    }

private:
    void check_locked() const {
        if (op_->done && !op_->error.empty()) throw Error(op_->error);
        if (!op_->done && !shared_->failure.empty())
            throw Error(fmt::format("rank {} stopped in {} on group '{}': {}", info_.world_rank,
                                    info_.what, info_.group, shared_->failure));
    }

    std::shared_ptr<LocalShared> shared_;
    std::shared_ptr<OpState> op_;
};

size_t elem_bytes(DType t) { return dtype_size(t); }

// Performs a round once every rank has posted. Called with the mutex held by
// the last rank to arrive.
void round_execute(Round& rd, int size, const std::shared_ptr<LocalShared>& shared) {
    const Post& p0 = rd.posts[0];
    for (int r = 1; r < size; ++r) {
        if (rd.posts[size_t(r)].what != p0.what) {
            rd.error = fmt::format("collective mismatch: rank 0 called {} but rank {} called {}",
                                   p0.what, r, rd.posts[size_t(r)].what);
            return;
        }
    }
    const size_t bytes = size_t(p0.count) * elem_bytes(p0.dtype);
    switch (p0.kind) {
        case Post::Kind::all_reduce: {
            std::vector<std::byte> acc(bytes);
            if (bytes) std::memcpy(acc.data(), rd.posts[0].recv, bytes);
            for (int r = 1; r < size; ++r)
                comm_reduce_into(acc.data(), rd.posts[size_t(r)].recv, p0.count, p0.dtype, p0.op);
            if (p0.op == ReduceOp::avg) comm_divide(acc.data(), p0.count, p0.dtype, size);
            for (int r = 0; r < size; ++r)
                if (bytes) std::memcpy(rd.posts[size_t(r)].recv, acc.data(), bytes);
            break;
        }
        case Post::Kind::reduce_scatter: {
            // Compute every output first: a rank's recv may alias its send.
            std::vector<std::vector<std::byte>> out(static_cast<size_t>(size), std::vector<std::byte>(bytes));
            for (int r = 0; r < size; ++r) {
                auto chunk = [&](int q) {
                    return static_cast<const std::byte*>(rd.posts[size_t(q)].send) + size_t(r) * bytes;
                };
                if (bytes) std::memcpy(out[size_t(r)].data(), chunk(0), bytes);
                for (int q = 1; q < size; ++q)
                    comm_reduce_into(out[size_t(r)].data(), chunk(q), p0.count, p0.dtype, p0.op);
                if (p0.op == ReduceOp::avg) comm_divide(out[size_t(r)].data(), p0.count, p0.dtype, size);
            }
            for (int r = 0; r < size; ++r)
                if (bytes) std::memcpy(rd.posts[size_t(r)].recv, out[size_t(r)].data(), bytes);
            break;
        }
        case Post::Kind::all_gather:
            // memmove: in place is allowed (send == recv + rank * count).
            for (int r = 0; r < size; ++r)
                for (int q = 0; q < size; ++q)
                    if (bytes)
                        std::memmove(static_cast<std::byte*>(rd.posts[size_t(r)].recv) + size_t(q) * bytes,
                                     rd.posts[size_t(q)].send, bytes);
            break;
        case Post::Kind::broadcast:
            for (int r = 0; r < size; ++r)
                if (r != p0.root && bytes)
                    std::memcpy(rd.posts[size_t(r)].recv, rd.posts[size_t(p0.root)].recv, bytes);
            break;
        case Post::Kind::barrier: break;
        case Post::Kind::split: {
            rd.split_group.assign(size_t(size), nullptr);
            rd.split_rank.assign(size_t(size), -1);
            std::map<std::vector<int>, std::shared_ptr<LocalGroup>> groups;
            for (int r = 0; r < size; ++r) {
                const auto& list = rd.posts[size_t(r)].split_ranks;
                auto self = std::find(list.begin(), list.end(), r);
                if (self == list.end()) continue;
                for (int q : list) {
                    if (rd.posts[size_t(q)].split_ranks != list) {
                        rd.error = fmt::format(
                            "split into '{}': rank {} lists group {} but member rank {} lists {}",
                            p0.what, r, comm_format_ranks(list), q,
                            comm_format_ranks(rd.posts[size_t(q)].split_ranks));
                        return;
                    }
                }
                auto& g = groups[list];
                if (!g) {
                    g = std::make_shared<LocalGroup>();
                    g->shared = shared;
                    g->size = int(list.size());
                }
                rd.split_group[size_t(r)] = g;
                rd.split_rank[size_t(r)] = int(self - list.begin());
            }
            break;
        }
    }
}

class CommLocal final : public Communicator {
public:
    CommLocal(int rank, std::vector<int> world_ranks, std::string name, CommOptions options,
              std::shared_ptr<LocalGroup> group)
        : Communicator(rank, std::move(world_ranks), std::move(name), options),
          group_(std::move(group)) {}

    LocalShared& shared() { return *group_->shared; }

protected:
  // In-process ranks share host memory, which a staged test backend's
  // narrow gradients live in too.
  bool accepts_dtype(DType d) const override {
      return Communicator::accepts_dtype(d) || d == DType::bf16 || d == DType::f16;
  }
    WorkPtr post_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op,
                            WorkInfo info) override {
        Post p;
        p.kind = Post::Kind::all_reduce;
        p.recv = buf;
        p.count = count;
        p.dtype = dtype;
        p.op = op;
        return post_round(std::move(p), std::move(info)).first;
    }
    WorkPtr post_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType dtype,
                                ReduceOp op, WorkInfo info) override {
        Post p;
        p.kind = Post::Kind::reduce_scatter;
        p.send = send;
        p.recv = recv;
        p.count = recv_count;
        p.dtype = dtype;
        p.op = op;
        return post_round(std::move(p), std::move(info)).first;
    }
    WorkPtr post_all_gather(const void* send, void* recv, int64_t send_count, DType dtype,
                            WorkInfo info) override {
        Post p;
        p.kind = Post::Kind::all_gather;
        p.send = send;
        p.recv = recv;
        p.count = send_count;
        p.dtype = dtype;
        return post_round(std::move(p), std::move(info)).first;
    }
    WorkPtr post_broadcast(void* buf, int64_t count, DType dtype, int root,
                           WorkInfo info) override {
        Post p;
        p.kind = Post::Kind::broadcast;
        p.recv = buf;
        p.count = count;
        p.dtype = dtype;
        p.root = root;
        return post_round(std::move(p), std::move(info)).first;
    }
    WorkPtr post_barrier(WorkInfo info) override {
        Post p;
        p.kind = Post::Kind::barrier;
        return post_round(std::move(p), std::move(info)).first;
    }
    WorkPtr post_send(const void* buf, int64_t count, DType dtype, int peer, int tag,
                      WorkInfo info) override {
        auto m = std::make_shared<Message>();
        m->send = buf;
        m->count = count;
        m->dtype = dtype;
        post_message(m, {rank(), peer, tag}, /*is_send=*/true);
        return std::make_shared<LocalWork>(std::move(info), group_->shared, m);
    }
    WorkPtr post_recv(void* buf, int64_t count, DType dtype, int peer, int tag,
                      WorkInfo info) override {
        auto m = std::make_shared<Message>();
        m->recv = buf;
        m->count = count;
        m->dtype = dtype;
        post_message(m, {peer, rank(), tag}, /*is_send=*/false);
        return std::make_shared<LocalWork>(std::move(info), group_->shared, m);
    }

    std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks,
                                           const std::string& name) override {
        Post p;
        p.kind = Post::Kind::split;
        p.split_ranks = ranks;
        auto [work, round] = post_round(std::move(p), make_info(fmt::format("split('{}')", name)));
        work->wait();
        std::shared_ptr<LocalGroup> g;
        int new_rank = -1;
        {
            std::lock_guard<std::mutex> lock(shared().mu);
            g = round->split_group[size_t(rank())];
            new_rank = round->split_rank[size_t(rank())];
        }
        if (!g) return nullptr;
        std::vector<int> world;
        for (int r : ranks) world.push_back(world_ranks()[size_t(r)]);
        return std::make_unique<CommLocal>(new_rank, std::move(world), name, options(), g);
    }

private:
    std::pair<WorkPtr, std::shared_ptr<Round>> post_round(Post p, WorkInfo info) {
        p.what = info.what;
        std::shared_ptr<Round> rd;
        {
            std::lock_guard<std::mutex> lock(shared().mu);
            auto& slot = group_->rounds[next_seq_];
            if (!slot) {
                slot = std::make_shared<Round>();
                slot->posts.resize(size_t(size()));
                slot->arrived.assign(size_t(size()), false);
            }
            rd = slot;
            rd->posts[size_t(rank())] = std::move(p);
            rd->arrived[size_t(rank())] = true;
            if (++rd->n_arrived == size()) {
                if (rd->abandoned)
                    rd->error = fmt::format("{} on group '{}' was abandoned by a rank that timed out",
                                            info.what, name());
                else
                    round_execute(*rd, size(), group_->shared);
                rd->done = true;
                group_->rounds.erase(next_seq_);
                shared().cv.notify_all();
            }
            ++next_seq_;
        }
        return {std::make_shared<LocalWork>(std::move(info), group_->shared, rd), rd};
    }

    void post_message(const std::shared_ptr<Message>& m, LocalGroup::Key key, bool is_send) {
        std::lock_guard<std::mutex> lock(shared().mu);
        auto& other_q = is_send ? group_->recvs[key] : group_->sends[key];
        if (other_q.empty()) {
            (is_send ? group_->sends[key] : group_->recvs[key]).push_back(m);
            return;
        }
        std::shared_ptr<Message> other = other_q.front();
        other_q.pop_front();
        Message& s = is_send ? *m : *other;
        Message& r = is_send ? *other : *m;
        auto [src, dst, tag] = key;
        if (other->abandoned) {
            m->error = fmt::format("message {} -> {} (tag {}) on group '{}': the peer timed out "
                                   "and abandoned it",
                                   src, dst, tag, name());
        } else if (s.count != r.count || s.dtype != r.dtype) {
            std::string e = fmt::format(
                "message {} -> {} (tag {}) on group '{}': sent {} x {}, receive expects {} x {}",
                src, dst, tag, name(), s.count, dtype_name(s.dtype), r.count, dtype_name(r.dtype));
            s.error = e;
            r.error = e;
        } else if (s.count > 0) {
            std::memcpy(r.recv, s.send, size_t(s.count) * elem_bytes(s.dtype));
        }
        m->done = true;
        other->done = true;
        shared().cv.notify_all();
    }

    std::shared_ptr<LocalGroup> group_;
    uint64_t next_seq_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> comm_local_create(int n_ranks,
                                                             const CommOptions& options) {
    LOOM_CHECK(n_ranks >= 1, "comm_local_create: need at least one rank, got {}", n_ranks);
    auto group = std::make_shared<LocalGroup>();
    group->shared = std::make_shared<LocalShared>();
    group->size = n_ranks;
    std::vector<int> world(static_cast<size_t>(n_ranks));
    for (int r = 0; r < n_ranks; ++r) world[size_t(r)] = r;
    std::vector<std::unique_ptr<Communicator>> comms;
    for (int r = 0; r < n_ranks; ++r)
        comms.push_back(std::make_unique<CommLocal>(r, world, "world", options, group));
    return comms;
}

void comm_local_fail(Communicator& comm, const std::string& reason) {
    auto* local = dynamic_cast<CommLocal*>(&comm);
    LOOM_CHECK(local != nullptr, "comm_local_fail: group '{}' is not a CommLocal", comm.name());
    std::lock_guard<std::mutex> lock(local->shared().mu);
    if (local->shared().failure.empty()) local->shared().failure = reason;
    local->shared().cv.notify_all();
}

void comm_local_run(int n_ranks, const std::function<void(Communicator&)>& fn,
                    const CommOptions& options) {
    auto comms = comm_local_create(n_ranks, options);
    std::mutex errors_mu;
    std::vector<std::string> errors;  // in the order ranks failed
    std::vector<std::thread> threads;
    for (int r = 0; r < n_ranks; ++r) {
        threads.emplace_back([&, r] {
            cpu_unbind_this_thread();  // a rank is not the caller's thread 0
            try {
                fn(*comms[size_t(r)]);
            } catch (const std::exception& e) {
                std::string msg = fmt::format("rank {}: {}", r, e.what());
                {
                    std::lock_guard<std::mutex> lock(errors_mu);
                    errors.push_back(msg);
                }
                comm_local_fail(*comms[size_t(r)], msg);
            }
        });
    }
    for (auto& t : threads) t.join();
    if (!errors.empty()) throw Error(errors.front());
}

}  // namespace loom
