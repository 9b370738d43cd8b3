// libFuzzer: a checkpoint's piece index (rank-N.json: which file holds which
// slice of which parameter), as a resuming or resharding worker reads it.
// The input is written as rank-0.json of a folder in /dev/shm.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "parallel/checkpoint_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = "/dev/shm/cohort-fuzz-checkpoint-" + std::to_string(::getpid());
  static bool made = std::filesystem::create_directories(dir) || true;
  (void)made;
  FILE* f = std::fopen((dir + "/rank-0.json").c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto index = cohort::parallel::read_piece_index(dir);
  (void)index;
  return 0;
}
