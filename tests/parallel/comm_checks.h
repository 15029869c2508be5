// Collective checks shared by the CommLocal tests (threads) and the CommMpi
// tests (mpirun): every rank runs the same function on its communicator and
// compares against values computed independently from the rank formulas, so
// both implementations are held to the same expectations.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "comm/comm.h"
#include "core/philox.h"
#include "parallel/process_groups.h"
#include "parallel/topology.h"

namespace loom::testing {

// A value every rank can compute for any rank: distinct per (rank, index).
inline double rank_value(int rank, int64_t i) { return 0.25 * (rank + 1) + 1e-3 * double(i % 997); }

inline bool close_rel(double got, double want, double rel) {
    return std::fabs(got - want) <= rel * std::max(1.0, std::fabs(want));
}

template <typename T>
void check_all_reduce_typed(Communicator& c, int64_t n, ReduceOp op) {
    const int size = c.size();
    std::vector<T> buf(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = T(rank_value(c.rank(), i) * 4);  // ints: exact
    c.all_reduce(std::span<T>(buf), op)->wait();
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i) {
        double want = op == ReduceOp::max ? -1e300 : 0.0;
        for (int r = 0; r < size; ++r) {
            double v = double(T(rank_value(r, i) * 4));
            want = op == ReduceOp::max ? std::max(want, v) : want + v;
        }
        if (op == ReduceOp::avg) want /= size;
        if (!close_rel(double(buf[size_t(i)]), want, 1e-6)) {
            ADD_FAILURE() << c.describe() << " all_reduce(" << reduce_op_name(op) << ") elem " << i
                          << ": got " << double(buf[size_t(i)]) << " want " << want;
            ++bad;
        }
    }
}

inline void check_all_reduce(Communicator& c) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000)}) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
            check_all_reduce_typed<float>(c, n, op);
            check_all_reduce_typed<double>(c, n, op);
        }
        check_all_reduce_typed<int64_t>(c, n, ReduceOp::sum);
        check_all_reduce_typed<int64_t>(c, n, ReduceOp::max);
        check_all_reduce_typed<int32_t>(c, n, ReduceOp::sum);
    }
    // Large enough that MPI switches to its pipelined algorithms.
    check_all_reduce_typed<float>(c, (1 << 20) + 3, ReduceOp::sum);
}

inline void check_reduce_scatter(Communicator& c) {
    const int size = c.size();
    for (int64_t chunk : {int64_t(1), int64_t(5), int64_t(4096)}) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
            std::vector<float> send(size_t(chunk * size)), recv(size_t(chunk), -1.0f);
            for (int64_t i = 0; i < chunk * size; ++i) send[size_t(i)] = float(rank_value(c.rank(), i));
            c.reduce_scatter(std::span<const float>(send), std::span<float>(recv), op)->wait();
            for (int64_t j = 0; j < chunk; ++j) {
                const int64_t i = c.rank() * chunk + j;  // this rank's chunk of the global vector
                double want = op == ReduceOp::max ? -1e300 : 0.0;
                for (int r = 0; r < size; ++r) {
                    double v = double(float(rank_value(r, i)));
                    want = op == ReduceOp::max ? std::max(want, v) : want + v;
                }
                if (op == ReduceOp::avg) want /= size;
                if (!close_rel(recv[size_t(j)], want, 1e-6)) {
                    ADD_FAILURE() << c.describe() << " reduce_scatter(" << reduce_op_name(op)
                                  << ") chunk " << chunk << " elem " << j << ": got "
                                  << recv[size_t(j)] << " want " << want;
                    break;
                }
            }
        }
    }
}

inline void check_all_gather(Communicator& c) {
    const int size = c.size();
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(10000)}) {
        std::vector<double> send(static_cast<size_t>(n)), recv(size_t(n * size), -1.0);
        for (int64_t i = 0; i < n; ++i) send[size_t(i)] = rank_value(c.rank(), i);
        c.all_gather(std::span<const double>(send), std::span<double>(recv))->wait();
        for (int r = 0; r < size; ++r)
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(recv[size_t(r * n + i)], rank_value(r, i))
                    << c.describe() << " all_gather from rank " << r << " elem " << i;
        // In place: this rank's piece already sits at its slot of recv.
        std::vector<int64_t> inplace(size_t(n * size), -7);
        for (int64_t i = 0; i < n; ++i) inplace[size_t(c.rank() * n + i)] = 1000 * c.rank() + i;
        c.all_gather(inplace.data() + c.rank() * n, inplace.data(), n, DType::i64)->wait();
        for (int r = 0; r < size; ++r)
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(inplace[size_t(r * n + i)], 1000 * r + i) << c.describe() << " in place";
    }
}

inline void check_broadcast(Communicator& c) {
    for (int root = 0; root < c.size(); ++root) {
        std::vector<float> buf(777);
        for (size_t i = 0; i < buf.size(); ++i)
            buf[i] = c.rank() == root ? float(rank_value(root, int64_t(i))) : -1.0f;
        c.broadcast(std::span<float>(buf), root)->wait();
        for (size_t i = 0; i < buf.size(); ++i)
            ASSERT_EQ(buf[i], float(rank_value(root, int64_t(i))))
                << c.describe() << " broadcast root " << root << " elem " << i;
    }
}

inline void check_send_recv(Communicator& c) {
    const int n = c.size();
    const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
    // A ring, issued as one group (each rank sends and receives at once).
    std::vector<float> out(100), in(100, -1.0f);
    for (size_t i = 0; i < out.size(); ++i) out[i] = float(rank_value(c.rank(), int64_t(i)));
    c.group_start();
    c.send(out.data(), 100, DType::f32, next, 3);
    c.recv(in.data(), 100, DType::f32, prev, 3);
    c.group_end()->wait();
    for (size_t i = 0; i < in.size(); ++i)
        ASSERT_EQ(in[i], float(rank_value(prev, int64_t(i)))) << c.describe() << " ring elem " << i;
    // Same tag twice: arrives in order. Different tags: matched by tag.
    std::vector<int64_t> a = {c.rank() * 10 + 1}, b = {c.rank() * 10 + 2}, t = {c.rank() * 10 + 3};
    std::vector<int64_t> ra(1), rb(1), rt(1);
    auto w1 = c.recv(rt.data(), 1, DType::i64, prev, 9);  // tag 9, sent last
    auto w2 = c.recv(ra.data(), 1, DType::i64, prev, 8);
    auto w3 = c.recv(rb.data(), 1, DType::i64, prev, 8);
    auto s1 = c.send(a.data(), 1, DType::i64, next, 8);
    auto s2 = c.send(b.data(), 1, DType::i64, next, 8);
    auto s3 = c.send(t.data(), 1, DType::i64, next, 9);
    for (auto& w : {w1, w2, w3, s1, s2, s3}) w->wait();
    EXPECT_EQ(ra[0], prev * 10 + 1) << c.describe();
    EXPECT_EQ(rb[0], prev * 10 + 2) << c.describe();
    EXPECT_EQ(rt[0], prev * 10 + 3) << c.describe();
    // test() polls to completion without wait().
    int64_t x = c.rank(), y = -1;
    auto rs = c.recv(&y, 1, DType::i64, prev, 1);
    auto ss = c.send(&x, 1, DType::i64, next, 1);
    while (!(rs->test() && ss->test())) {
    }
    EXPECT_EQ(y, prev);
}

// Groups split from the world along a topology: each group's all_reduce of the
// world rank equals the sum of its members' world ranks.
inline void check_groups(Communicator& world, const TopologyConfig& cfg) {
    Topology topo(cfg, world.size(), world.rank());
    ProcessGroups g = process_groups_create(world, topo);
    struct Item {
        Communicator* comm;
        std::vector<Axis> axes;
    };
    for (const Item& it : {Item{g.dp.get(), {Axis::dp}}, Item{g.tp.get(), {Axis::tp}},
                           Item{g.pp.get(), {Axis::pp}}, Item{g.mp.get(), {Axis::tp, Axis::pp}}}) {
        ASSERT_NE(it.comm, nullptr);
        std::vector<int> members = topo.group_ranks(it.axes);
        EXPECT_EQ(it.comm->world_ranks(), members) << topo.to_string();
        int64_t v = world.rank();
        it.comm->all_reduce(std::span<int64_t>(&v, 1), ReduceOp::sum)->wait();
        EXPECT_EQ(v, std::accumulate(members.begin(), members.end(), int64_t(0)))
            << it.comm->describe();
    }
    EXPECT_EQ(g.pp->rank(), topo.pp_rank());
    EXPECT_EQ(g.tp->rank(), topo.tp_rank());
    EXPECT_EQ(g.tie != nullptr, topo.in_tie_group()) << topo.to_string();
    if (g.tie) {
        EXPECT_EQ(g.tie->world_ranks(), topo.tie_group());
        int64_t v = 1;
        g.tie->all_reduce(std::span<int64_t>(&v, 1), ReduceOp::sum)->wait();
        EXPECT_EQ(v, int64_t(topo.tie_group().size()));
    }
    // Pipeline neighbours over the pp group: pass the stage index forward.
    if (topo.pp_size() > 1) {
        int64_t mine = topo.pp_rank(), got = -1;
        const int next = (topo.pp_rank() + 1) % topo.pp_size();
        const int prev = (topo.pp_rank() + topo.pp_size() - 1) % topo.pp_size();
        g.pp->group_start();
        g.pp->send(&mine, 1, DType::i64, next, 0);
        g.pp->recv(&got, 1, DType::i64, prev, 0);
        g.pp->group_end()->wait();
        EXPECT_EQ(got, prev);
        EXPECT_EQ(g.pp->world_ranks()[size_t(prev)], topo.pp_prev());
    }
}

// reduce_scatter: each chunk bitwise the sum in rank order over values of
// many magnitudes (where grouping changes the result), and `send` left as it
// was. CommLocal and CommMpi reduce-scatter this way whatever the options.
inline void check_reduce_scatter_rank_order(Communicator& c) {
    auto value = [](int r, int64_t i) {
        auto u = philox4x32({uint32_t(i), uint32_t(r), 7, 0}, PhiloxKey{4321, 0});
        float mant = float(u[0] >> 8) / float(1u << 24) - 0.5f;
        return std::ldexp(mant, int(u[1] % 40) - 20);
    };
    const int64_t chunk = 333;
    std::vector<float> send(size_t(chunk * c.size())), recv(static_cast<size_t>(chunk));
    for (int64_t i = 0; i < chunk * c.size(); ++i) send[size_t(i)] = value(c.rank(), i);
    const std::vector<float> before = send;
    c.reduce_scatter(std::span<const float>(send), std::span<float>(recv), ReduceOp::sum)->wait();
    int mismatches = 0;
    for (int64_t j = 0; j < chunk; ++j) {
        const int64_t i = c.rank() * chunk + j;
        float want = value(0, i);
        for (int r = 1; r < c.size(); ++r) want += value(r, i);
        if (std::memcmp(&want, &recv[size_t(j)], 4) != 0) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0) << c.describe() << " reduce_scatter differs from the rank-order sum";
    EXPECT_EQ(std::memcmp(before.data(), send.data(), before.size() * 4), 0)
        << c.describe() << " reduce_scatter changed its send buffer";
}

// Fixed-order sums: bitwise equal to the sequential sum in rank order, for
// values spread over many magnitudes (where grouping changes the result).
inline void check_fixed_order(Communicator& c) {
    const int64_t n = 10007;  // not a multiple of any rank count: uneven chunks
    auto value = [](int r, int64_t i) {
        auto u = philox4x32({uint32_t(i), uint32_t(r), 0, 0}, PhiloxKey{1234, 0});
        float mant = float(u[0] >> 8) / float(1u << 24) - 0.5f;
        return std::ldexp(mant, int(u[1] % 40) - 20);
    };
    std::vector<float> buf(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = value(c.rank(), i);
    c.all_reduce(std::span<float>(buf), ReduceOp::sum)->wait();
    std::vector<float> avg(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) avg[size_t(i)] = value(c.rank(), i);
    c.all_reduce(std::span<float>(avg), ReduceOp::avg)->wait();
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
        float want = value(0, i);
        for (int r = 1; r < c.size(); ++r) want += value(r, i);
        if (std::memcmp(&want, &buf[size_t(i)], 4) != 0) ++mismatches;
        float want_avg = want / float(c.size());
        if (std::memcmp(&want_avg, &avg[size_t(i)], 4) != 0) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0) << c.describe() << " fixed-order sum differs from the sequential sum";

    check_reduce_scatter_rank_order(c);
}

inline void check_all(Communicator& c) {
    check_all_reduce(c);
    check_reduce_scatter(c);
    check_all_gather(c);
    check_broadcast(c);
    check_send_recv(c);
    c.barrier()->wait();
}

}  // namespace loom::testing
