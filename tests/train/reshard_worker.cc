// Restores a checkpoint into another strategy and mesh, then saves it again:
// the resharding test compares the two checkpoints tensor by tensor.
//   reshard_worker CHECKPOINT STRATEGY TP OUT_DIR [EP]      (torchrun-style env)
#include <cstdio>
#include <cstdlib>

#include "collective/bootstrap.h"
#include "parallel/checkpoint.h"
#include "parallel/parallelize.h"

using namespace cohort;

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) return 2;
  std::string in = argv[1], out = argv[4];
  auto world = collective::init_from_environment();
  auto config = parallel::checkpoint_model_config(in);
  auto strategy = parse_strategy(argv[2]);
  if (!world || !config || !strategy) return 3;
  auto backend = models::make_cpu_backend();
  parallel::ParallelConfig pc;
  pc.tensor_parallel = std::atoi(argv[3]);
  if (argc == 6) pc.expert_parallel = std::atoi(argv[5]);
  pc.data_parallel.strategy = *strategy;
  auto pm = parallel::parallelize(*config, world->cpu.get(), backend.get(), pc,
                                  [](models::Model& m) { m.init_weights(7); return Status::ok(); });
  if (!pm) {
    std::fprintf(stderr, "%s\n", pm.status().to_string().c_str());
    return 4;
  }
  auto position = parallel::restore_checkpoint(in, *pm);
  if (!position) {
    std::fprintf(stderr, "%s\n", position.status().to_string().c_str());
    return 5;
  }
  auto saved = parallel::save_checkpoint(out, *config, *pm, *position, argv[2], *world->cpu);
  if (!saved) {
    std::fprintf(stderr, "%s\n", saved.status().to_string().c_str());
    return 6;
  }
  return 0;
}
