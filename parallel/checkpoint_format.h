// Private to parallel/ (checkpoints): the on-disk pieces of a checkpoint and how a piece
// maps back into a global tensor.
//
// A piece is a run of consecutive elements of one rank's tensor-parallel
// slice of one parameter (its "local" tensor), for one of the three tensors a
// parameter has in a checkpoint: the parameter itself and the two AdamW
// moments. Where the slice sits in the global tensor is given by the slice's
// shard dimension (rows, columns or replicated), its first global row or
// column, and its local shape, so any reader can place it whatever mesh or
// strategy wrote it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/param_layout.h"

namespace cohort::parallel {

enum class PieceTensor { kParam = 0, kMoment1 = 1, kMoment2 = 2 };

struct Piece {
  std::string param;
  PieceTensor tensor = PieceTensor::kParam;
  std::string file;          // rank-<R>.bin, relative to the checkpoint folder
  uint64_t file_offset = 0;  // bytes
  uint64_t count = 0;        // floats
  uint64_t local_begin = 0;  // first element within the local slice
  models::ShardDim shard_dim = models::ShardDim::kReplicated;
  int64_t shard_begin = 0;
  std::vector<int64_t> local_shape;
};

// All pieces of a checkpoint, by parameter name.
using PieceIndex = std::map<std::string, std::vector<Piece>>;

Status write_piece_list(const std::string& path, const std::vector<Piece>& pieces);
Result<PieceIndex> read_piece_index(const std::string& checkpoint_dir);

// Assembles the global tensor of `param` (global_shape) from its pieces.
// Errors when some element is not covered by any piece, unless `covered` is
// given: it then gets 1 for each element a piece held, 0 elsewhere (zeros).
Result<std::vector<float>> assemble_global(const std::string& checkpoint_dir, const PieceIndex& index,
                                           const std::string& param, PieceTensor tensor,
                                           const std::vector<int64_t>& global_shape,
                                           std::vector<char>* covered = nullptr);

// Cuts this rank's slice (as `spec` describes it) out of a global tensor.
void slice_local(const std::vector<float>& global, const models::ParamSpec& spec, float* local);

}  // namespace cohort::parallel
