// check_lockstep: a decode engine wrapped so that every rank of a
// tensor-parallel group checks it makes the same calls as its peers.
#pragma once

#include <memory>

#include "collective/communicator.h"
#include "models/decode/engine.h"

namespace cohort::infer {

// Wraps `engine` so that before each call every rank of the tensor-parallel
// group `tp` (a CPU communicator) checks, with one small all-gather, that its
// peers make the same call: kind, slots, tokens, and whether logits are
// wanted. A mismatch is fatal on every rank, naming the ranks and the call.
// ModelEngine would survive an asymmetric call sequence (its logits gather
// runs either way) where the CUDA engine hangs, so the tests run CPU ranks
// with this (COHORT_INFER_CHECK_LOCKSTEP=1, engine_setup.cc) to catch it.
std::unique_ptr<models::decode::InferenceEngine> check_lockstep(
    std::unique_ptr<models::decode::InferenceEngine> engine, collective::Communicator* tp);

}  // namespace cohort::infer
