// The process's place in its MPI job and once-per-job error reports (see
// mpi_job.h).
#include "parallel/mpi_job.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#ifdef LOOM_HAVE_MPI
// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace loom {

namespace {

// What the launcher published before MPI_Init; -1 when nothing did.
int launcher_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
        const char* s = std::getenv(name);
        if (!s || !*s) continue;
        char* end = nullptr;
        const long r = std::strtol(s, &end, 10);
        if (*end == '\0' && r >= 0) return int(r);
    }
    return -1;
}

#ifdef LOOM_HAVE_MPI

// MPI guarantees tags up to 32767; Loom's own messages use duplicated
// communicators, so this tag on MPI_COMM_WORLD is reserved for error reports.
constexpr int k_error_tag = 0x4c45;

// FNV-1a: equal messages, equal fingerprints (collisions only cost a line).
uint64_t fingerprint(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

bool mpi_live() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized && !finalized;
}

// A failure while reporting an error (a peer already gone) must not abort
// the process before it prints: MPI calls return their error instead.
void errors_return() {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

// Polls `done` every millisecond until it says yes or wait_s passed.
template <class Done>
bool poll_for(double wait_s, Done done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
    while (!done()) {
        if (std::chrono::steady_clock::now() >= until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

#endif

}  // namespace

#ifdef LOOM_HAVE_MPI

int job_rank() {
    if (!mpi_live()) return launcher_rank();
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

int mpi_ranks_on_host() {
    if (!mpi_live()) return 1;
    MPI_Comm local = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    int n = 1;
    MPI_Comm_size(local, &n);
    MPI_Comm_free(&local);
    return n;
}

void announce_error(const std::string& message, double wait_s) {
    if (!mpi_live()) return;
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != 0 || size < 2) return;
    errors_return();
    // Static: a send still pending when this returns keeps a valid buffer.
    static uint64_t fp = 0;
    fp = fingerprint(message);
    std::vector<MPI_Request> reqs(size_t(size - 1), MPI_REQUEST_NULL);
    for (int r = 1; r < size; ++r)
        MPI_Isend(&fp, 1, MPI_UINT64_T, r, k_error_tag, MPI_COMM_WORLD, &reqs[size_t(r - 1)]);
    // Sends to ranks that never call MPI again stay pending; the job is
    // ending, so they are left behind after wait_s.
    poll_for(wait_s, [&] {
        int done = 0;
        const int rc = MPI_Testall(int(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
        return done != 0 || rc != MPI_SUCCESS;
    });
}

bool same_error_on_rank0(const std::string& message, double wait_s) {
    if (!mpi_live()) return false;
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0 || size < 2) return false;
    errors_return();
    uint64_t got = 0;
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Irecv(&got, 1, MPI_UINT64_T, 0, k_error_tag, MPI_COMM_WORLD, &req) != MPI_SUCCESS)
        return false;
    MPI_Status status;
    bool failed = false;
    const bool arrived = poll_for(wait_s, [&] {
        int flag = 0;
        failed = MPI_Test(&req, &flag, &status) != MPI_SUCCESS;
        return flag != 0 || failed;
    });
    if (failed) return false;
    if (!arrived) {
        // Withdraw the receive; if rank 0's report matched it meanwhile, the
        // wait completes it instead and it still counts.
        MPI_Cancel(&req);
        MPI_Wait(&req, &status);
        int cancelled = 0;
        MPI_Test_cancelled(&status, &cancelled);
        if (cancelled) return false;
    }
    return got == fingerprint(message);
}

#else  // !LOOM_HAVE_MPI

int job_rank() {
    return launcher_rank();
}
int mpi_ranks_on_host() {
    return 1;
}
void announce_error(const std::string&, double) {}
bool same_error_on_rank0(const std::string&, double) {
    return false;
}

#endif

}  // namespace loom
