// collective_worker: one rank of the collective tests, run as a real process
// (by collective_test through a store for Gloo, or by mpirun for MPI).
//
//   collective_worker --backend gloo|mpi --mode matrix [--big N]
//   collective_worker --backend gloo|mpi --mode kill|hang --victim R --timeout-ms T
//   collective_worker --backend nccl ...   (CUDA builds: NCCL over the Gloo
//                                           world, buffers in GPU memory)
//
// matrix: every operation × dtype × count {0, 1, 7, N} on the world, then
// splits and a send/recv ring; prints one FAIL line per wrong result and
// exits 1 if there was any. kill: rank R kills itself with SIGKILL after a
// first all_reduce; hang: rank R stops calling collectives. The others keep
// calling all_reduce with timeout T and report how long they took to fail
// (exit 3 when they failed within T plus slack, 1 otherwise).
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "collective/bootstrap.h"
#include "tests/collective/collective_check.h"
#include "tests/collective/collective_matrix.h"

#ifdef COHORT_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "collective/nccl/nccl_communicator.h"
#endif

using namespace cohort::collective;

namespace {

struct Args {
  std::string backend = "gloo";
  std::string mode = "matrix";
  size_t big = 0;
  int victim = -1;
  int timeout_ms = 3000;
  int slack_ms = 2000;  // how far past the timeout a failure may surface
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--backend")
      a.backend = v;
    else if (k == "--mode")
      a.mode = v;
    else if (k == "--big")
      a.big = std::stoull(v);
    else if (k == "--victim")
      a.victim = std::stoi(v);
    else if (k == "--timeout-ms")
      a.timeout_ms = std::stoi(v);
    else if (k == "--slack-ms")
      a.slack_ms = std::stoi(v);
  }
  return a;
}

// Survivors of a dead (kill) or silent (hang) peer: each all_reduce must fail
// within the timeout, with an error that names the operation and the group.
int run_fault(Communicator& world, const Args& a, cohort::collective::testing::Memory* memory) {
  cohort::collective::testing::HostMemory host;
  if (memory == nullptr) memory = &host;
  void* x = memory->alloc(4);
  void* buf = memory->alloc(4096);  // 1024 floats; their values do not matter
  int32_t one = 1;
  memory->upload(x, &one, 4);
  if (!world.all_reduce(x, 1, DType::kI32).is_ok()) {
    std::printf("FAIL rank %d: first all_reduce failed\n", world.rank());
    return 1;
  }
  if (world.rank() == a.victim) {
    std::fflush(stdout);
    if (a.mode == "kill") ::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(a.timeout_ms * 4));
    return 0;
  }
  AllReduceOptions o;
  o.timeout = std::chrono::milliseconds(a.timeout_ms);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    auto s = world.all_reduce(buf, 1024, DType::kF32, o);
    if (!s.is_ok()) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - start)
                    .count();
      std::printf("SURVIVOR rank %d failed after %lld ms: %s\n", world.rank(),
                  static_cast<long long>(ms), s.to_string().c_str());
      std::fflush(stdout);
      // No orderly exit: MPI_Finalize would wait for the lost peer.
      ::_exit(ms <= a.timeout_ms + a.slack_ms ? 3 : 1);
    }
  }
  std::printf("FAIL rank %d: every all_reduce succeeded despite the lost peer\n", world.rank());
  return 1;
}

#ifdef COHORT_HAVE_NCCL
// Device buffers for the matrix; a failed CUDA call ends the worker, since
// every later check would be meaningless.
class CudaMemory final : public cohort::collective::testing::Memory {
 public:
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    must(cudaMalloc(&p, bytes + 1), "cudaMalloc");
    return p;
  }
  void release(void* p) override { must(cudaFree(p), "cudaFree"); }
  void upload(void* dst, const void* host, size_t bytes) override {
    must(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  // The default stream waits for the communicator (ordered by events).
  void download(void* host, const void* src, size_t bytes) override {
    must(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }

 private:
  static void must(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return;
    std::printf("FAIL: %s: %s\n", what, cudaGetErrorString(e));
    std::fflush(stdout);
    std::_Exit(1);
  }
};

// An all-reduce issued with `overlap` on a stream of the caller's: the
// caller's stream reads the reduced values once wait_on_stream ordered it,
// without the host having waited.
int check_overlap(Communicator& comm) {
  const size_t n = size_t(1) << 24;  // 64 MiB: long enough to still be running when read is queued
  cudaStream_t stream;
  float* buffer = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&buffer), n * sizeof(float)) != cudaSuccess) {
    std::printf("FAIL: overlap: CUDA set-up\n");
    return 1;
  }
  std::vector<float> host(n, float(comm.rank() + 1));
  cudaMemcpy(buffer, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  AllReduceOptions options;
  options.stream = stream;
  options.overlap = true;
  auto work = comm.all_reduce_async(buffer, buffer, n, DType::kF32, options);
  cohort::Status ordered = work->wait_on_stream(stream);
  cudaMemcpyAsync(host.data(), buffer, n * sizeof(float), cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  const float want = float(comm.size() * (comm.size() + 1) / 2);
  size_t wrong = 0;
  for (float v : host) wrong += v != want;
  cohort::Status done = work->wait();
  cudaFree(buffer);
  cudaStreamDestroy(stream);
  if (!ordered.is_ok() || !done.is_ok() || wrong) {
    std::printf("FAIL: overlap: %zu of %zu values wrong (%s / %s)\n", wrong, n, ordered.to_string().c_str(),
                done.to_string().c_str());
    return 1;
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  WorldOptions wo;
  wo.backend = a.backend == "mpi" ? CpuBackend::kMpi : CpuBackend::kGloo;
  if (a.backend == "nccl" && std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr)
    wo.backend = CpuBackend::kMpi;
  wo.timeout = std::chrono::seconds(60);
  auto world = init_from_environment(wo);
  if (!world.is_ok()) {
    std::printf("FAIL: init_from_environment: %s\n", world.status().to_string().c_str());
    return 1;
  }
  std::shared_ptr<Communicator> chosen = world->cpu;
  cohort::collective::testing::Memory* memory = nullptr;
#ifdef COHORT_HAVE_NCCL
  CudaMemory cuda;
  if (a.backend == "nccl") {
    NcclOptions no;
    no.timeout = std::chrono::seconds(60);
    auto nccl = init_nccl_world(*world, no);
    if (!nccl.is_ok()) {
      std::printf("FAIL: NcclCommunicator::create: %s\n", nccl.status().to_string().c_str());
      return 1;
    }
    chosen = std::move(*nccl);
    memory = &cuda;
  }
#else
  if (a.backend == "nccl") {
    std::printf("FAIL: this build has no NCCL backend\n");
    return 1;
  }
#endif
  Communicator& comm = *chosen;
  if (a.mode == "kill" || a.mode == "hang") return run_fault(comm, a, memory);
  int failures = cohort::collective::testing::run_matrix(comm, a.big, memory, a.backend != "nccl");
#ifdef COHORT_HAVE_NCCL
  if (a.backend == "nccl") failures += check_overlap(comm);
#endif
  std::printf("%s rank %d of %d (%s): %d failures\n", failures ? "FAILED" : "PASSED", comm.rank(),
              comm.size(), launch_name(world->launch), failures);
  std::fflush(stdout);
  return failures ? 1 : 0;
}
