// collective_bench: nccl-tests-style bandwidth of all_reduce, all_gather and
// reduce_scatter (f32, sum) from 8 B to 1 GiB, measured in one run both by
// calling NCCL directly (collective/nccl/nccl_baseline.h) and through
// cohort's NcclCommunicator, so the two columns are comparable (DESIGN §9:
// cohort ≥ 0.98× raw NCCL at ≥ 64 MB).
//
// Launch, one process per GPU:
//   collective_bench --fork 2                       forks 2 ranks itself (GPU = rank)
//   RANK=.. WORLD_SIZE=.. MASTER_ADDR=.. MASTER_PORT=.. collective_bench   (torchrun-style)
//   under cohort (COHORT_STORE) or mpirun           (init_from_environment)
// Options: --min-bytes N --max-bytes N --iters N --warmup N
//
// Columns follow nccl-tests: size is the whole buffer (all_gather: the
// output, reduce_scatter: the input); algbw = size / time; busbw = algbw ×
// 2(n-1)/n for all_reduce and (n-1)/n for the others. Time is rank 0's mean
// per operation over `iters` back-to-back launches on one stream.
#include <cuda_runtime.h>  // cudaMalloc(T**)
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collective/bootstrap.h"
#include "collective/nccl/nccl_baseline.h"
#include "collective/nccl/nccl_communicator.h"

using namespace cohort::collective;

namespace {

#define BENCH_CHECK(cond, ...)                                              \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "collective_bench %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                    \
      std::fprintf(stderr, "\n");                                           \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)
#define CUDA_OK(call) BENCH_CHECK((call) == cudaSuccess, "%s failed", #call)
#define STATUS_OK(expr)                                                          \
  do {                                                                           \
    const ::cohort::Status bench_status_ = (expr);                               \
    BENCH_CHECK(bench_status_.is_ok(), "%s", bench_status_.to_string().c_str()); \
  } while (0)

struct Args {
  size_t min_bytes = 8;
  size_t max_bytes = size_t{1} << 30;
  int iters = 20;
  int warmup = 5;
  int fork = 0;
};

enum class Op { kAllReduce, kAllGather, kReduceScatter };
const char* op_name(Op op) {
  return op == Op::kAllReduce   ? "all_reduce"
         : op == Op::kAllGather ? "all_gather"
                                : "reduce_scatter";
}

struct Buffers {
  float* send = nullptr;
  float* recv = nullptr;
};

// Launches one operation of `bytes` (nccl-tests' size) on `stream`.
void raw_nccl(Op op, size_t bytes, int n, NcclBaseline& comm, cudaStream_t stream,
              const Buffers& b) {
  size_t count = bytes / sizeof(float);
  switch (op) {
    case Op::kAllReduce:
      STATUS_OK(comm.all_reduce(b.send, b.recv, count, DType::kF32, stream));
      break;
    case Op::kAllGather:
      STATUS_OK(comm.all_gather(b.send, b.recv, count / n, DType::kF32, stream));
      break;
    case Op::kReduceScatter:
      STATUS_OK(comm.reduce_scatter(b.send, b.recv, count / n, DType::kF32, stream));
      break;
  }
}

std::shared_ptr<Work> through_cohort(Op op, size_t bytes, int n, Communicator& comm,
                                     cudaStream_t stream, const Buffers& b) {
  size_t count = bytes / sizeof(float);
  switch (op) {
    case Op::kAllReduce: {
      AllReduceOptions o;
      o.stream = stream;
      return comm.all_reduce_async(b.send, b.recv, count, DType::kF32, o);
    }
    case Op::kAllGather: {
      AllGatherOptions o;
      o.stream = stream;
      return comm.all_gather_async(b.send, b.recv, count / n, DType::kF32, o);
    }
    case Op::kReduceScatter: {
      ReduceScatterOptions o;
      o.stream = stream;
      return comm.reduce_scatter_async(b.send, b.recv, count / n, DType::kF32, o);
    }
  }
  return nullptr;
}

template <typename Launch, typename Finish>
double time_us(int warmup, int iters, Launch&& launch, Finish&& finish, Communicator& cpu) {
  for (int i = 0; i < warmup; ++i) launch();
  finish();
  BENCH_CHECK(cpu.barrier().is_ok(), "barrier failed");
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) launch();
  finish();
  auto us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return us / iters;
}

int run(const Args& a, World& world) {
  int n = world.size, rank = world.rank;
  // Picks the GPU: the only one visible, or LOCAL_RANK's (--fork, mpirun).
  NcclOptions no;
  no.timeout = std::chrono::minutes(5);
  auto cohort_comm = init_nccl_world(world, no);
  BENCH_CHECK(cohort_comm.is_ok(), "%s", cohort_comm.status().to_string().c_str());
  CUDA_OK(cudaSetDevice((*cohort_comm)->cuda_device()));

  // The raw communicator, with its id sent the same way.
  auto raw = NcclBaseline::create(*world.cpu);
  BENCH_CHECK(raw.is_ok(), "%s", raw.status().to_string().c_str());

  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Buffers b;
  size_t max_bytes = a.max_bytes;
  CUDA_OK(cudaMalloc(&b.send, max_bytes));
  CUDA_OK(cudaMalloc(&b.recv, max_bytes));
  CUDA_OK(cudaMemset(b.send, 0, max_bytes));

  if (rank == 0) {
    std::printf("# collective_bench: %d ranks, f32 sum, %d iters (%d warm-up)\n", n, a.iters,
                a.warmup);
    std::printf("# %-14s %12s %12s | %10s %8s %8s | %10s %8s %8s | %6s\n", "op", "size(B)", "count",
                "nccl(us)", "algbw", "busbw", "cohort(us)", "algbw", "busbw", "ratio");
  }
  for (Op op : {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter}) {
    double factor = op == Op::kAllReduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
    for (size_t bytes = a.min_bytes; bytes <= max_bytes; bytes *= 2) {
      if ((bytes / sizeof(float)) % n != 0 || bytes < sizeof(float) * n) continue;
      double t_raw = time_us(
          a.warmup, a.iters, [&] { raw_nccl(op, bytes, n, **raw, stream, b); },
          [&] { CUDA_OK(cudaStreamSynchronize(stream)); }, *world.cpu);
      std::shared_ptr<Work> last;
      double t_cohort = time_us(
          a.warmup, a.iters, [&] { last = through_cohort(op, bytes, n, **cohort_comm, stream, b); },
          [&] {
            BENCH_CHECK(last->wait().is_ok(), "cohort %s failed", op_name(op));
            CUDA_OK(cudaStreamSynchronize(stream));
          },
          *world.cpu);
      if (rank == 0) {
        double alg_raw = bytes / t_raw / 1e3, alg_cohort = bytes / t_cohort / 1e3;  // GB/s
        std::printf("  %-14s %12zu %12zu | %10.2f %8.2f %8.2f | %10.2f %8.2f %8.2f | %6.3f\n",
                    op_name(op), bytes, bytes / sizeof(float), t_raw, alg_raw, alg_raw * factor,
                    t_cohort, alg_cohort, alg_cohort * factor, t_raw / t_cohort);
        std::fflush(stdout);
      }
    }
  }
  raw->reset();
  CUDA_OK(cudaFree(b.send));
  CUDA_OK(cudaFree(b.recv));
  return 0;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    size_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (k == "--min-bytes")
      a.min_bytes = v;
    else if (k == "--max-bytes")
      a.max_bytes = v;
    else if (k == "--iters")
      a.iters = static_cast<int>(v);
    else if (k == "--warmup")
      a.warmup = static_cast<int>(v);
    else if (k == "--fork")
      a.fork = static_cast<int>(v);
    else
      BENCH_CHECK(false, "unknown option %s", k.c_str());
  }
  return a;
}

// --fork N: this process hosts the store and forks N ranks (GPU = rank).
int fork_ranks(const Args& a) {
  auto server = cohort::store::TcpStoreServer::start(
      std::make_shared<cohort::store::MemoryStoreBackend>(), {});
  BENCH_CHECK(server.is_ok(), "%s", server.status().to_string().c_str());
  std::vector<pid_t> pids;
  for (int r = 0; r < a.fork; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      setenv("COHORT_STORE", (*server)->address().c_str(), 1);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(a.fork).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(a.fork).c_str(), 1);
      auto world = init_from_environment();
      BENCH_CHECK(world.is_ok(), "%s", world.status().to_string().c_str());
      std::_Exit(run(a, *world));
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.fork > 0) return fork_ranks(a);
  auto world = init_from_environment();
  BENCH_CHECK(world.is_ok(), "%s", world.status().to_string().c_str());
  return run(a, *world);
}
