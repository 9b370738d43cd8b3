// CudaGraphEngine's served LoRA adapters (CudaEngineOptions::lora): each
// adapter's A and B per (layer, target) in bf16 on the device, found through
// tables indexed by (layer, target, table slot) that the kernels read
// (models/ops/lora_rows.h), so adding or removing an adapter between two
// steps rewrites a table and no captured graph changes. Each row's slot is
// staged with the rows (stage_rows); rows of the base alone, and padding,
// carry -1. The adapters are made (LoraAdapters) for the weights-only model
// the engine loaded from, kept without its buffers (keep_base).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <string>

#include "base/check.h"
#include "base/cuda_check.h"
#include "base/half_float.h"
#include "models/cuda/cublas_api.h"
#include "models/decode/cuda_graph_state.h"

namespace cohort::models::decode {
namespace {

constexpr int kTargets = 7;  // models::kAllLoraTargets
static_assert(kGraphLoraRank <= models::cuda::kLoraMaxRank, "the LoRA kernel takes every rank the engine admits");

size_t table_at(int layer, models::LoraTarget target, int slot) {
  return (static_cast<size_t>(layer) * kTargets + static_cast<size_t>(target)) * kGraphLoraSlots +
         static_cast<size_t>(slot);
}

// The dense form's matrices of (layer, the first target of a group).
size_t dense_entry(int layer, models::LoraTarget first) {
  return static_cast<size_t>(layer) * kTargets + static_cast<size_t>(first);
}

}  // namespace

int lora_dense_decode_rows(std::optional<bool> forced, int hidden, bool side_stream) {
  if (forced) return *forced ? 1 : INT_MAX;
  if (hidden < 4096) return INT_MAX;
  return side_stream ? 1 : 16;
}

void CudaGraphEngine::keep_base(std::unique_ptr<models::Backend> backend, std::unique_ptr<models::Model> model) {
  // Only its shape is needed from now on.
  for (int g = 0; g < model->num_groups(); ++g) model->set_group_buffers(g, nullptr, nullptr);
  model->release_own_buffers();
  base_backend_ = std::move(backend);
  base_ = std::move(model);
}

Status CudaGraphEngine::alloc_lora() {
  if (!options_.lora) return Status::ok();
  const size_t entries = static_cast<size_t>(config_.layers) * kTargets * kGraphLoraSlots;
  COHORT_ASSIGN_OR_RETURN(void* a, device_alloc(entries * sizeof(void*)));
  COHORT_ASSIGN_OR_RETURN(void* b, device_alloc(entries * sizeof(void*)));
  COHORT_ASSIGN_OR_RETURN(void* ranks, device_alloc(kGraphLoraSlots * 4));
  COHORT_ASSIGN_OR_RETURN(void* scales, device_alloc(kGraphLoraSlots * 4));
  COHORT_ASSIGN_OR_RETURN(void* rows, device_alloc(static_cast<size_t>(max_rows_) * 2 * 4));  // and their order
  lora_.a = static_cast<const Bf16**>(a), lora_.b = static_cast<const Bf16**>(b);
  lora_.ranks = static_cast<int32_t*>(ranks), lora_.scales = static_cast<float*>(scales);
  lora_.rows = static_cast<int32_t*>(rows), lora_.order = lora_.rows + max_rows_;
  lora_.host_a.assign(entries, nullptr);
  lora_.host_b.assign(entries, nullptr);
  lora_.host_ranks.assign(kGraphLoraSlots, 0);
  lora_.host_scales.assign(kGraphLoraSlots, 0.0f);
  lora_.memory.assign(kGraphLoraSlots, {});
  lora_.slot_adapter.assign(static_cast<size_t>(options_.slots) + 1, -1);  // and the spare slot
  COHORT_CUDA_CHECK(cudaMallocHost(&lora_.host_rows, static_cast<size_t>(max_rows_) * 2 * 4));
  // Every row starts without an adapter, in row order (a graph captured
  // before any staging reads this).
  std::fill(lora_.host_rows, lora_.host_rows + max_rows_, -1);
  for (int r = 0; r < max_rows_; ++r) lora_.host_rows[max_rows_ + r] = r;
  COHORT_CUDA_CHECK(cudaMemcpyAsync(lora_.rows, lora_.host_rows, static_cast<size_t>(max_rows_) * 2 * 4,
                                    cudaMemcpyHostToDevice, stream_));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (options_.overrides.lora_run_rows >= 0) lora_.run_rows = options_.overrides.lora_run_rows;
  if (lora_.run_rows > 0) {
    COHORT_ASSIGN_OR_RETURN(void* tiles, device_alloc(static_cast<size_t>(max_rows_) * 3 * 4));
    COHORT_ASSIGN_OR_RETURN(void* t, device_alloc(static_cast<size_t>(max_rows_) * models::cuda::kLoraRunScratchStride * 4));
    lora_.run_tiles = static_cast<int32_t*>(tiles), lora_.run_t = static_cast<float*>(t);
    COHORT_CUDA_CHECK(cudaMallocHost(&lora_.host_run_tiles, static_cast<size_t>(max_rows_) * 3 * 4));
  }
  if (options_.overrides.lora_dense) lora_.dense.allowed = *options_.overrides.lora_dense;
  if (lora_.dense.allowed) {
    const size_t width = static_cast<size_t>(max_rows_) * models::cuda::kLoraMaxTargets * models::cuda::kLoraDenseMaxColumns;
    COHORT_ASSIGN_OR_RETURN(void* t, device_alloc(width * 4));
    COHORT_ASSIGN_OR_RETURN(void* masked, device_alloc(width * 2));
    COHORT_ASSIGN_OR_RETURN(void* column, device_alloc(kGraphLoraSlots * 4));
    lora_.dense.t = static_cast<float*>(t), lora_.dense.masked = static_cast<Bf16*>(masked);
    lora_.dense.column = static_cast<int32_t*>(column);
    COHORT_ASSIGN_OR_RETURN(const models::cuda::blas::Api* blas, models::cuda::blas::api());
    cublasHandle_t handle = nullptr;
    if (blas->create(&handle) != CUBLAS_STATUS_SUCCESS) return internal_error("cuBLAS: no handle for the LoRA GEMMs");
    lora_.dense.blas = handle;
    // Decode steps capture its GEMMs into graphs: a workspace of the
    // engine's, so that they allocate nothing.
    constexpr size_t kWorkspace = size_t{32} << 20;
    COHORT_ASSIGN_OR_RETURN(void* workspace, device_alloc(kWorkspace));
    if (blas->set_workspace(handle, workspace, kWorkspace) != CUBLAS_STATUS_SUCCESS) {
      return internal_error("cuBLAS: the LoRA GEMMs' workspace was refused");
    }
    const bool side_stream = options_.overrides.lora_side_stream.value_or(true);
    lora_.dense.decode_rows = lora_dense_decode_rows(options_.overrides.lora_dense_decode, config_.hidden, side_stream);
    if (side_stream) {
      // The highest priority: the shrink's few blocks start beside the
      // projection's rather than after them.
      int least = 0, greatest = 0;
      COHORT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      COHORT_CUDA_CHECK(cudaStreamCreateWithPriority(&lora_.dense.side, cudaStreamNonBlocking, greatest));
      COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&lora_.dense.fork, cudaEventDisableTiming));
      COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&lora_.dense.join, cudaEventDisableTiming));
    }
  }
  lora_.on = true;
  return Status::ok();
}

// Each loaded adapter's columns [column, column + rank) in every layer's
// side-by-side A (rows, per group of targets that share an input: q|k|v,
// o, gate|up, down) and B (columns, per target), zeros where an adapter
// lacks a target; one allocation. Built only while the ranks fit
// kLoraDenseMaxColumns (the GEMMs' extra work grows with them).
void CudaGraphEngine::rebuild_lora_dense() {
  LoraTables::Dense& dense = lora_.dense;
  if (!dense.allowed) return;
  COHORT_CUDA_CHECK_FATAL(cudaStreamSynchronize(stream_));  // no step reads the old matrices
  if (dense.decode_rows != INT_MAX) {
    // Captured decode steps hold the old matrices' addresses and widths:
    // each size is captured again at its next step.
    for (auto& [size, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
  }
  if (dense.memory) COHORT_CUDA_CHECK_FATAL(cudaFree(dense.memory));
  dense.memory = nullptr, dense.columns = 0;
  const size_t entries = static_cast<size_t>(config_.layers) * kTargets;
  dense.a.assign(entries, nullptr), dense.b.assign(entries, nullptr);
  std::vector<int32_t> column(kGraphLoraSlots, 0);
  int columns = 0;
  for (int s = 0; s < kGraphLoraSlots; ++s) {
    column[static_cast<size_t>(s)] = columns;
    columns += lora_.host_ranks[static_cast<size_t>(s)];
  }
  // Whole 16-byte pieces a row for the GEMMs' operands (the padding's
  // columns belong to no adapter: the mask zeroes them).
  columns = (columns + 7) / 8 * 8;
  if (columns == 0 || columns > models::cuda::kLoraDenseMaxColumns) return;
  const int H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim(), I = dims_.intermediate;
  struct Group {
    models::LoraTarget first;
    int in;
    std::vector<int> widths;
  };
  const Group groups[] = {{models::LoraTarget::kQ, H, {Qd, KVd, KVd}},
                          {models::LoraTarget::kO, Qd, {H}},
                          {models::LoraTarget::kGate, H, {I, I}},
                          {models::LoraTarget::kDown, I, {H}}};
  auto present = [&](int l, int target) {
    for (int s = 0; s < kGraphLoraSlots; ++s)
      if (lora_.host_a[table_at(l, models::LoraTarget(target), s)]) return true;
    return false;
  };
  // Where each matrix goes, then one allocation.
  struct Place {
    int layer, target, rows, cols;  // rows × cols bf16; A: [count·C, in], B: [Σ width, count·C]
    const Group* group;
    bool is_a;
    size_t offset;
  };
  std::vector<Place> places;
  size_t bytes = 0;
  for (int l = 0; l < config_.layers; ++l) {
    for (const Group& g : groups) {
      const int first = static_cast<int>(g.first), count = static_cast<int>(g.widths.size());
      bool any = false;
      for (int z = 0; z < count; ++z) any = any || present(l, first + z);
      if (!any) continue;  // a sparse layer's MLP
      places.push_back({l, first, count * columns, g.in, &g, true, bytes});
      bytes += static_cast<size_t>(count) * columns * g.in * 2;
      int outputs = 0;
      for (int width : g.widths) outputs += width;
      places.push_back({l, first, outputs, count * columns, &g, false, bytes});
      bytes += static_cast<size_t>(outputs) * count * columns * 2;
    }
  }
  if (cudaMalloc(&dense.memory, bytes) != cudaSuccess) {
    cudaGetLastError();
    dense.memory = nullptr;
    spdlog::warn("cuda graph engine: no memory for the adapters' dense form ({} MiB); prompts take the LoRA kernels",
                 bytes >> 20);
    return;
  }
  COHORT_CUDA_CHECK_FATAL(cudaMemset(dense.memory, 0, bytes));
  auto* base = static_cast<Bf16*>(dense.memory);
  for (const Place& p : places) {
    Bf16* at = base + p.offset / 2;
    (p.is_a ? dense.a : dense.b)[static_cast<size_t>(p.layer) * kTargets + static_cast<size_t>(p.target)] = at;
    // A: target z's rows at z·C. B: target z's outputs below the ones
    // before it, in its own block of C columns.
    const int count = static_cast<int>(p.group->widths.size());
    size_t output = 0;
    for (int z = 0; z < count; ++z) {
      const int width = p.group->widths[static_cast<size_t>(z)];
      for (int s = 0; s < kGraphLoraSlots; ++s) {
        const int rank = lora_.host_ranks[static_cast<size_t>(s)];
        const size_t entry = table_at(p.layer, models::LoraTarget(p.target + z), s);
        const Bf16* from = p.is_a ? lora_.host_a[entry] : lora_.host_b[entry];
        if (rank == 0 || !from) continue;
        const size_t first = static_cast<size_t>(z) * columns + static_cast<size_t>(column[static_cast<size_t>(s)]);
        if (p.is_a) {
          COHORT_CUDA_CHECK_FATAL(cudaMemcpy(at + first * p.cols, from, static_cast<size_t>(rank) * p.cols * 2,
                                             cudaMemcpyDeviceToDevice));
        } else {
          COHORT_CUDA_CHECK_FATAL(cudaMemcpy2D(at + output * p.cols + first, static_cast<size_t>(p.cols) * 2, from,
                                               static_cast<size_t>(rank) * 2, static_cast<size_t>(rank) * 2,
                                               static_cast<size_t>(width), cudaMemcpyDeviceToDevice));
        }
      }
      output += static_cast<size_t>(width);
    }
  }
  COHORT_CUDA_CHECK_FATAL(cudaMemcpy(dense.column, column.data(), column.size() * 4, cudaMemcpyHostToDevice));
  dense.columns = columns;
}

void CudaGraphEngine::stage_lora_rows(int n, bool gathered) {
  // Each row's adapter table slot, from its sequence slot (the spare
  // slot's padding rows: none).
  for (int r = 0; r < n; ++r) {
    const int seq = host_rows_[max_rows_ + r];
    const int index = seq >= 0 && seq < options_.slots ? lora_.slot_adapter[static_cast<size_t>(seq)] : -1;
    lora_.host_rows[r] = index >= 0 ? lora_.table_of[static_cast<size_t>(index)] : -1;
  }
  // A prompt's rows are consecutive and share its adapter: long runs go to
  // the run kernels, in tiles, and read as rows without one to the per-row
  // kernel. Only prompt steps take runs: they run eagerly, and a captured
  // graph keeps the launches of the step it was captured from.
  lora_.run_tile_count = 0;
  lora_.kernel_rows = -1;
  // A prompt step's rows all take the dense form where it is built, and a
  // decode step's from decode_rows on: its GEMMs need each row's slot and
  // nothing else.
  lora_.dense.step = (gathered || n >= lora_.dense.decode_rows) && lora_.dense.columns > 0;
  if (lora_.dense.step) {
    // And the rows by adapter, which the gate/up activation's blocks take
    // in turn (lora_swiglu_bf16).
    int32_t* order = lora_.host_rows + max_rows_;
    models::lora_rows_by_adapter(order, lora_.host_rows, n, kGraphLoraSlots);
    COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(lora_.rows, lora_.host_rows, static_cast<size_t>(n) * 4,
                                            cudaMemcpyHostToDevice, stream_));
    COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(lora_.order, order, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice,
                                            stream_));
    return;
  }
  if (gathered && lora_.run_rows > 0) {
    constexpr int kTile = models::cuda::kLoraRunTileRows;
    for (int r = 0; r < n;) {
      const int slot = lora_.host_rows[r];
      int end = r + 1;
      while (end < n && lora_.host_rows[end] == slot) ++end;
      if (slot >= 0 && end - r >= lora_.run_rows) {
        for (int first = r; first < end; first += kTile) {
          int32_t* tile = lora_.host_run_tiles + 3 * lora_.run_tile_count++;
          tile[0] = first, tile[1] = std::min(kTile, end - first), tile[2] = slot;
        }
        std::fill(lora_.host_rows + r, lora_.host_rows + end, -1);
      }
      r = end;
    }
    if (lora_.run_tile_count > 0) {
      COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(lora_.run_tiles, lora_.host_run_tiles,
                                              static_cast<size_t>(lora_.run_tile_count) * 3 * 4,
                                              cudaMemcpyHostToDevice, stream_));
    }
  }
  if (gathered) lora_.kernel_rows = static_cast<int>(std::count_if(lora_.host_rows, lora_.host_rows + n,
                                                                   [](int32_t slot) { return slot >= 0; }));
  // The rows by adapter, so that the LoRA kernel's tiles hold one or two
  // adapters, not the several a decode step's rows take in turn.
  int32_t* order = lora_.host_rows + max_rows_;
  models::lora_rows_by_adapter(order, lora_.host_rows, n, kGraphLoraSlots);
  COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(lora_.rows, lora_.host_rows, static_cast<size_t>(n) * 4,
                                          cudaMemcpyHostToDevice, stream_));
  COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(lora_.order, order, static_cast<size_t>(n) * 4,
                                          cudaMemcpyHostToDevice, stream_));
}

void CudaGraphEngine::upload_lora_tables() {
  COHORT_CUDA_CHECK_FATAL(cudaStreamSynchronize(stream_));  // no step reads them while they change
  COHORT_CUDA_CHECK_FATAL(cudaMemcpy(lora_.a, lora_.host_a.data(), lora_.host_a.size() * sizeof(void*),
                                     cudaMemcpyHostToDevice));
  COHORT_CUDA_CHECK_FATAL(cudaMemcpy(lora_.b, lora_.host_b.data(), lora_.host_b.size() * sizeof(void*),
                                     cudaMemcpyHostToDevice));
  COHORT_CUDA_CHECK_FATAL(cudaMemcpy(lora_.ranks, lora_.host_ranks.data(), kGraphLoraSlots * 4,
                                     cudaMemcpyHostToDevice));
  COHORT_CUDA_CHECK_FATAL(cudaMemcpy(lora_.scales, lora_.host_scales.data(), kGraphLoraSlots * 4,
                                     cudaMemcpyHostToDevice));
}

int CudaGraphEngine::add_adapter(std::unique_ptr<models::LoraAdapters> adapters) {
  if (!lora_.on || !adapters) return -1;
  // A step launched ahead may still read the tables and graphs changed below.
  COHORT_CUDA_CHECK_FATAL(cudaStreamSynchronize(stream_));
  const models::LoraConfig& config = adapters->config();
  int slot = -1;
  for (int s = 0; s < kGraphLoraSlots && slot < 0; ++s)
    if (lora_.memory[static_cast<size_t>(s)].empty() && lora_.host_ranks[static_cast<size_t>(s)] == 0) slot = s;
  if (slot < 0 || config.rank > kGraphLoraRank) {
    spdlog::error("cuda graph engine: adapter refused: {}", slot < 0 ? "every table slot is taken"
                                                                    : "rank " + std::to_string(config.rank) +
                                                                          " is above " + std::to_string(kGraphLoraRank));
    return -1;
  }
  std::vector<Bf16> bits;
  for (int l = 0; l < config_.layers; ++l) {
    const int g = adapters->layout().block_group(l);
    const models::ParamGroup& group = adapters->layout().groups[static_cast<size_t>(g)];
    for (models::LoraTarget target : config.targets) {
      for (bool is_a : {true, false}) {
        const models::ParamSpec* spec = group.find(models::peft_tensor_name(l, target, is_a));
        if (!spec) continue;  // a sparse layer's MLP takes none
        const float* values = adapters->params(g) + spec->offset;
        bits.resize(spec->numel);
        for (size_t i = 0; i < spec->numel; ++i) bits[i] = float_to_bf16_bits(values[i]);
        void* p = nullptr;
        COHORT_CUDA_CHECK_FATAL(cudaMalloc(&p, spec->numel * 2));
        COHORT_CUDA_CHECK_FATAL(cudaMemcpy(p, bits.data(), spec->numel * 2, cudaMemcpyHostToDevice));
        lora_.memory[static_cast<size_t>(slot)].push_back(p);
        (is_a ? lora_.host_a : lora_.host_b)[table_at(l, target, slot)] = static_cast<const Bf16*>(p);
      }
    }
  }
  lora_.host_ranks[static_cast<size_t>(slot)] = config.rank;
  lora_.host_scales[static_cast<size_t>(slot)] = config.scale();
  upload_lora_tables();
  rebuild_lora_dense();
  lora_.table_of.push_back(slot);
  return static_cast<int>(lora_.table_of.size()) - 1;
}

void CudaGraphEngine::remove_adapter(int index) {
  COHORT_CHECK(index >= 0 && index < adapters());
  COHORT_CUDA_CHECK_FATAL(cudaStreamSynchronize(stream_));  // a step launched ahead may still run
  const int slot = lora_.table_of[static_cast<size_t>(index)];
  if (slot < 0) return;
  lora_.table_of[static_cast<size_t>(index)] = -1;
  for (int& a : lora_.slot_adapter)
    if (a == index) a = -1;
  for (int l = 0; l < config_.layers; ++l) {
    for (int t = 0; t < kTargets; ++t) {
      lora_.host_a[table_at(l, models::LoraTarget(t), slot)] = nullptr;
      lora_.host_b[table_at(l, models::LoraTarget(t), slot)] = nullptr;
    }
  }
  lora_.host_ranks[static_cast<size_t>(slot)] = 0;
  lora_.host_scales[static_cast<size_t>(slot)] = 0.0f;
  upload_lora_tables();  // synchronises: nothing reads the memory below any more
  rebuild_lora_dense();
  for (void* p : lora_.memory[static_cast<size_t>(slot)]) cudaFree(p);
  lora_.memory[static_cast<size_t>(slot)].clear();
}

void CudaGraphEngine::set_adapter(int slot, int index) {
  COHORT_CHECK(slot >= 0 && slot < options_.slots && index >= -1 && index < adapters());
  if (!lora_.on) return;
  lora_.slot_adapter[static_cast<size_t>(slot)] = index;
}

void CudaGraphEngine::enqueue_lora(int layer, models::LoraTarget target, float* y, int y_stride, const Bf16* x,
                                   int in, int out, int n) {
  enqueue_lora(layer, target, 1, y, y_stride, x, in, {out}, n);
}

void CudaGraphEngine::enqueue_lora(int layer, models::LoraTarget first, int count, float* y, int y_stride,
                                   const Bf16* x, int in, std::initializer_list<int> widths, int n,
                                   const float* in_sumsq) {
  models::cuda::LoraTargets targets;
  targets.count = count;
  targets.table_stride = table_at(0, models::LoraTarget(1), 0) - table_at(0, models::LoraTarget(0), 0);
  int column = 0, z = 0;
  for (int width : widths) targets.width[z] = width, targets.column[z] = column, column += width, ++z;
  COHORT_CHECK(z == count && count <= models::cuda::kLoraMaxTargets);
  const size_t at = table_at(layer, first, 0);
  if (lora_.dense.step) {
    const size_t entry = dense_entry(layer, first);
    const models::cuda::LoraDense dense = lora_dense_at(entry);
    if (!dense.a) return;  // no adapter targets these projections in this layer
    // Where the expand ran beside too, the delta already joined the residual stream.
    if (lora_dense_shrunk(entry, dense, x, in, count, n, in_sumsq)) return;
    models::cuda::lora_dense_expand_bf16(lora_.dense.blas, y, y_stride, dense, n, targets, stream_);
    return;
  }
  if (lora_.run_tile_count > 0) {
    COHORT_CHECK_MSG(!in_sumsq, "a prompt step's projections read a normalised input");
    models::cuda::lora_runs_bf16(y, y_stride, x, lora_.a + at, lora_.b + at, lora_.ranks, lora_.scales,
                                 lora_.run_tiles, lora_.run_tile_count, lora_.run_t, in, targets, stream_);
  }
  const int rows = lora_.kernel_rows >= 0 ? lora_.kernel_rows : n;
  if (rows == 0) return;
  models::cuda::lora_rows_bf16(y, y_stride, x, lora_.a + at, lora_.b + at, lora_.ranks, lora_.scales, lora_.rows,
                               lora_.order, rows, in, targets, stream_, lora_input_norm(in_sumsq));
}

models::cuda::LoraInputNorm CudaGraphEngine::lora_input_norm(const float* in_sumsq) const {
  models::cuda::LoraInputNorm norm;
  norm.sumsq = in_sumsq, norm.eps = config_.rms_eps;
  return norm;
}

models::cuda::LoraDense CudaGraphEngine::lora_dense_at(size_t entry) const {
  models::cuda::LoraDense dense;
  dense.columns = lora_.dense.columns, dense.a = lora_.dense.a[entry], dense.b = lora_.dense.b[entry];
  dense.column = lora_.dense.column, dense.t = lora_.dense.t, dense.masked = lora_.dense.masked;
  return dense;
}

// The fork and join are events on the engine's stream and the side one, so
// a captured decode step holds the shrink as a branch beside the
// projection, and a prompt step runs it beside it. The next projection's
// shrink forks after this one's expand, which is the only reader of the
// scratch (t, masked) it writes.
void CudaGraphEngine::lora_shrink_ahead(int layer, models::LoraTarget first, int count, const Bf16* x, int in, int n,
                                        const float* in_sumsq, float* expand_into, int out) {
  LoraTables::Dense& state = lora_.dense;
  if (!lora_.on || !state.step || !state.side) return;
  const size_t entry = dense_entry(layer, first);
  const models::cuda::LoraDense dense = lora_dense_at(entry);
  if (!dense.a) return;
  COHORT_CHECK_MSG(state.ahead == SIZE_MAX, "a LoRA shrink ran ahead for another projection");
  COHORT_CUDA_CHECK_FATAL(cudaEventRecord(state.fork, stream_));
  COHORT_CUDA_CHECK_FATAL(cudaStreamWaitEvent(state.side, state.fork, 0));
  models::cuda::lora_dense_shrink_bf16(state.blas, x, dense, lora_.ranks, lora_.scales, lora_.rows, n, in, count,
                                       state.side, lora_input_norm(in_sumsq));
  state.ahead_expanded = expand_into != nullptr;
  if (expand_into) {
    COHORT_CHECK_MSG(count == 1, "a LoRA expand beside its projection takes one target");
    models::cuda::LoraTargets targets;
    targets.width[0] = out, targets.column[0] = 0;
    models::cuda::lora_dense_expand_bf16(state.blas, expand_into, out, dense, n, targets, state.side);
  }
  COHORT_CUDA_CHECK_FATAL(cudaEventRecord(state.join, state.side));
  state.ahead = entry;
}

// The shrink and mask of `entry`'s group: joined from the side stream where
// lora_shrink_ahead began them, else run now on the engine's stream. True
// where that expand, too, ran beside (lora_shrink_ahead's expand_into).
bool CudaGraphEngine::lora_dense_shrunk(size_t entry, const models::cuda::LoraDense& dense, const Bf16* x, int in,
                                        int count, int n, const float* in_sumsq) {
  LoraTables::Dense& state = lora_.dense;
  if (state.ahead == entry) {
    state.ahead = SIZE_MAX;
    COHORT_CUDA_CHECK_FATAL(cudaStreamWaitEvent(stream_, state.join, 0));
    return state.ahead_expanded;
  }
  COHORT_CHECK_MSG(state.ahead == SIZE_MAX, "a LoRA shrink ran ahead for another projection");
  models::cuda::lora_dense_shrink_bf16(state.blas, x, dense, lora_.ranks, lora_.scales, lora_.rows, n, in, count,
                                       stream_, lora_input_norm(in_sumsq));
  return false;
}

// The dense form's gate/up expand joined with the activation
// (lora_swiglu_bf16): one pass over gate_up instead of the expand's read
// and write of it and then the activation's read.
bool CudaGraphEngine::lora_dense_swiglu(int layer, int n, const float* in_sumsq) {
  if (!lora_.dense.step) return false;
  const size_t entry = dense_entry(layer, models::LoraTarget::kGate);
  const models::cuda::LoraDense dense = lora_dense_at(entry);
  if (!dense.a) return false;
  lora_dense_shrunk(entry, dense, buf_.xn, config_.hidden, 2, n, in_sumsq);
  models::cuda::lora_swiglu_bf16(buf_.h, buf_.gate_up, dense, lora_.ranks, lora_.rows, lora_.order, n,
                                 dims_.intermediate, stream_);
  return true;
}

}  // namespace cohort::models::decode
