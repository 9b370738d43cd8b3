// MpiCommunicator: CPU collectives over MPI, for workers launched by mpirun
// or srun (rank and size come from MPI itself).
//
// Every operation is posted at once as a non-blocking MPI call (MPI_I*), in
// issue order, and wait() drives MPI's progress by polling MPI_Test until the
// operation completes or its timeout passes. MPI cannot cancel a collective,
// so a timed-out communicator is broken for good (later operations fail at
// once); the process should report the error and exit.
//
// bf16 and f16 reductions use MPI user operations over 16-bit words with
// cohort's element arithmetic (types.h); f32, i32, i64 and u8 use MPI's own.
//
// MPI is initialised on first use (MPI_THREAD_MULTIPLE requested; with less,
// cohort serialises its MPI calls) and finalised at process exit.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective/communicator.h"

namespace cohort::collective {

struct MpiOptions {
  std::string name = "world";
  Milliseconds timeout{std::chrono::minutes(10)};
};

// True when the environment looks like an MPI launch (Open MPI's mpirun,
// or PMI/PMIx, which srun --mpi=pmix/pmi2 provides).
bool launched_by_mpi();

class MpiCommunicator final : public Communicator {
 public:
  // MPI_COMM_WORLD (duplicated, so cohort's traffic stays apart from the
  // application's own MPI use).
  static Result<std::unique_ptr<MpiCommunicator>> create_world(const MpiOptions& options);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return options_.name; }
  Device device() const override { return Device::kCpu; }
  Milliseconds timeout() const override { return options_.timeout; }

  std::shared_ptr<Work> all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                         const AllReduceOptions& options) override;
  std::shared_ptr<Work> reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                             DType dtype,
                                             const ReduceScatterOptions& options) override;
  std::shared_ptr<Work> all_gather_async(const void* send, void* recv, size_t send_count,
                                         DType dtype, const AllGatherOptions& options) override;
  std::shared_ptr<Work> all_gather_v_async(const void* send, void* recv,
                                           const std::vector<size_t>& counts, DType dtype,
                                           const AllGatherOptions& options) override;
  std::shared_ptr<Work> all_to_all_v_async(const void* send, const std::vector<size_t>& send_counts,
                                           void* recv, const std::vector<size_t>& recv_counts,
                                           DType dtype, const AllToAllOptions& options) override;
  std::shared_ptr<Work> broadcast_async(void* buf, size_t count, DType dtype,
                                        const BroadcastOptions& options) override;
  std::shared_ptr<Work> send_async(const void* buf, size_t count, DType dtype, int peer,
                                   const SendRecvOptions& options) override;
  std::shared_ptr<Work> recv_async(void* buf, size_t count, DType dtype, int peer,
                                   const SendRecvOptions& options) override;
  std::shared_ptr<Work> barrier_async(const BarrierOptions& options) override;
  // MPI_Comm_create_group: collective over the members only. It has no
  // timeout of its own; a missing member blocks it.
  Result<std::unique_ptr<Communicator>> split(const std::vector<int>& ranks,
                                              const SplitOptions& options) override;

  struct State;  // the MPI_Comm and the broken flag, shared with pending Work

 private:
  Status check_point_to_point(const std::string& op, int peer, const void* buf, size_t count,
                              uint32_t tag) const;
  MpiCommunicator(std::shared_ptr<State> state, int rank, int size, MpiOptions options)
      : state_(std::move(state)), rank_(rank), size_(size), options_(std::move(options)) {}

  std::shared_ptr<State> state_;
  int rank_;
  int size_;
  MpiOptions options_;
  std::map<std::vector<int>, int> split_counts_;  // issuing thread only
};

}  // namespace cohort::collective
