// Reads the parameter files parallel_worker writes (one per tp slice) back
// into global tensors by Hugging Face name.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "models/param_layout.h"

namespace cohort::testing {

// Places each rank's tp slice of every parameter into the global tensor.
inline void read_params(const std::filesystem::path& file, std::map<std::string, std::vector<float>>* out) {
  std::ifstream in(file, std::ios::binary);
  ASSERT_TRUE(in) << file;
  std::string name;
  while (in >> name) {
    int dim, rank_count;
    int64_t begin;
    size_t numel;
    in >> dim >> begin >> rank_count;
    std::vector<int64_t> shape(rank_count), global(rank_count);
    for (auto& d : shape) in >> d;
    for (auto& d : global) in >> d;
    in >> numel;
    in.get();
    std::vector<float> local(numel);
    in.read(reinterpret_cast<char*>(local.data()), std::streamsize(numel * sizeof(float)));
    in.get();
    size_t global_numel = 1;
    for (auto d : global) global_numel *= size_t(d);
    auto& dst = (*out)[name];
    dst.resize(global_numel);
    size_t cols = rank_count > 1 ? size_t(global[1]) : 1;
    size_t local_rows = size_t(shape[0]), local_cols = rank_count > 1 ? size_t(shape[1]) : 1;
    for (size_t r = 0; r < local_rows; ++r)
      for (size_t c = 0; c < local_cols; ++c) {
        size_t gr = r, gc = c;
        if (dim == int(models::ShardDim::kRows)) gr += size_t(begin);
        if (dim == int(models::ShardDim::kCols)) gc += size_t(begin);
        dst[gr * cols + gc] = local[r * local_cols + c];
      }
  }
}


inline double max_param_difference(const std::map<std::string, std::vector<float>>& a,
                                   const std::map<std::string, std::vector<float>>& b) {
  double worst = 0;
  for (const auto& [name, values] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != values.size()) return 1e30;
    for (size_t i = 0; i < values.size(); ++i) worst = std::max(worst, double(std::abs(values[i] - it->second[i])));
  }
  return a.size() == b.size() ? worst : 1e30;
}

}  // namespace cohort::testing
