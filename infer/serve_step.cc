// StepInput encoding and sharing (see serve_step.h).
#include "infer/serve_step.h"

#include "infer/structured_output.h"

#include <spdlog/spdlog.h>

#include <cstring>

namespace cohort::infer {
namespace {

int64_t float_bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bits_float(int64_t v) {
  const uint32_t u = static_cast<uint32_t>(v);
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Reads the flat form front to back; every read is bounds-checked.
struct Reader {
  const std::vector<int64_t>& d;
  size_t at = 0;
  bool ok = true;
  int64_t next() {
    if (at >= d.size()) return ok = false, 0;
    return d[at++];
  }
  size_t count() {
    const int64_t n = next();
    if (n < 0 || static_cast<size_t>(n) > d.size() - std::min(at, d.size())) return ok = false, 0;
    return static_cast<size_t>(n);
  }
};

}  // namespace

static std::shared_ptr<const StopCondition> make_stop(const SequenceRequest& r, const text::Tokenizer* tokenizer,
                                               const std::vector<int32_t>& eos, Status* status) {
  jobs::InferSection stops;
  stops.stop_strings = r.stop_strings;
  for (int32_t id : r.stop_ids) stops.stop_tokens.push_back(id);
  auto stop = StopCondition::create(stops, tokenizer, eos);
  if (!stop.is_ok()) {
    *status = stop.status();
    return nullptr;
  }
  return std::make_shared<const StopCondition>(std::move(*stop));
}

std::vector<int64_t> encode_step_input(const StepInput& in) {
  std::vector<int64_t> d = {in.stop ? 1 : 0, static_cast<int64_t>(in.cancels.size())};
  d.insert(d.end(), in.cancels.begin(), in.cancels.end());
  d.push_back(static_cast<int64_t>(in.arrivals.size()));
  for (const SequenceRequest& r : in.arrivals) {
    d.insert(d.end(), {r.id, r.max_new_tokens, float_bits(r.sampling.temperature), r.sampling.top_k,
                       float_bits(r.sampling.top_p), static_cast<int64_t>(r.sampling.seed),
                       static_cast<int64_t>(r.sampler_stream), r.logprobs ? 1 : 0,
                       float_bits(r.sampling.presence_penalty), float_bits(r.sampling.frequency_penalty),
                       float_bits(r.sampling.repetition_penalty), r.sampling.min_tokens, r.adapter});
    d.push_back(static_cast<int64_t>(r.prompt.size()));
    d.insert(d.end(), r.prompt.begin(), r.prompt.end());
    d.push_back(static_cast<int64_t>(r.stop_ids.size()));
    d.insert(d.end(), r.stop_ids.begin(), r.stop_ids.end());
    d.push_back(static_cast<int64_t>(r.stop_strings.size()));
    for (const std::string& s : r.stop_strings) {
      d.push_back(static_cast<int64_t>(s.size()));
      for (unsigned char c : s) d.push_back(c);
    }
    d.push_back(static_cast<int64_t>(r.constraint.size()));
    for (unsigned char c : r.constraint) d.push_back(c);
  }
  d.push_back(static_cast<int64_t>(in.adapter_changes.size()));
  for (const AdapterChange& c : in.adapter_changes) {
    d.insert(d.end(), {c.load ? 1 : 0, c.index, c.ticket});
    for (const std::string* text : {&c.name, &c.folder}) {
      d.push_back(static_cast<int64_t>(text->size()));
      for (unsigned char ch : *text) d.push_back(ch);
    }
  }
  d.push_back(in.prompt_cap);
  return d;
}

Result<StepInput> decode_step_input(const std::vector<int64_t>& data, const text::Tokenizer* tokenizer,
                                    const std::vector<int32_t>& eos) {
  Reader r{data};
  StepInput in;
  in.stop = r.next() != 0;
  for (size_t i = 0, n = r.count(); i < n && r.ok; ++i) in.cancels.push_back(r.next());
  for (size_t i = 0, n = r.count(); i < n && r.ok; ++i) {
    SequenceRequest q;
    q.id = r.next();
    q.max_new_tokens = static_cast<int>(r.next());
    q.sampling.temperature = bits_float(r.next());
    q.sampling.top_k = static_cast<int>(r.next());
    q.sampling.top_p = bits_float(r.next());
    q.sampling.seed = static_cast<uint64_t>(r.next());
    q.sampler_stream = static_cast<uint64_t>(r.next());
    q.logprobs = r.next() != 0;
    q.sampling.presence_penalty = bits_float(r.next());
    q.sampling.frequency_penalty = bits_float(r.next());
    q.sampling.repetition_penalty = bits_float(r.next());
    q.sampling.min_tokens = static_cast<int>(r.next());
    q.adapter = static_cast<int>(r.next());
    for (size_t j = 0, m = r.count(); j < m && r.ok; ++j) q.prompt.push_back(static_cast<int32_t>(r.next()));
    for (size_t j = 0, m = r.count(); j < m && r.ok; ++j) q.stop_ids.push_back(static_cast<int32_t>(r.next()));
    for (size_t j = 0, m = r.count(); j < m && r.ok; ++j) {
      std::string s;
      for (size_t k = 0, len = r.count(); k < len && r.ok; ++k) s.push_back(static_cast<char>(r.next()));
      q.stop_strings.push_back(std::move(s));
    }
    for (size_t k = 0, len = r.count(); k < len && r.ok; ++k) q.constraint.push_back(static_cast<char>(r.next()));
    Status status = Status::ok();
    q.stop = make_stop(q, tokenizer, eos, &status);
    if (!status.is_ok()) return status;
    in.arrivals.push_back(std::move(q));
  }
  for (size_t i = 0, n = r.count(); i < n && r.ok; ++i) {
    AdapterChange c;
    c.load = r.next() != 0;
    c.index = static_cast<int>(r.next());
    c.ticket = r.next();
    for (std::string* text : {&c.name, &c.folder}) {
      for (size_t k = 0, len = r.count(); k < len && r.ok; ++k) text->push_back(static_cast<char>(r.next()));
    }
    in.adapter_changes.push_back(std::move(c));
  }
  in.prompt_cap = r.next();
  if (r.ok && in.prompt_cap < 1) return internal_error("a malformed step input from rank 0 (prompt cap)");
  if (!r.ok || r.at != data.size()) return internal_error("a malformed step input from rank 0");
  return in;
}

Status broadcast_step_input(collective::Communicator& comm, StepInput* input, const text::Tokenizer* tokenizer,
                            const std::vector<int32_t>& eos) {
  std::vector<int64_t> data;
  if (comm.rank() == 0) data = encode_step_input(*input);
  int64_t size = static_cast<int64_t>(data.size());
  COHORT_RETURN_IF_ERROR(comm.broadcast(&size, 1, collective::DType::kI64));
  data.resize(static_cast<size_t>(size));
  COHORT_RETURN_IF_ERROR(comm.broadcast(data.data(), data.size(), collective::DType::kI64));
  if (comm.rank() == 0) return Status::ok();
  COHORT_ASSIGN_OR_RETURN(*input, decode_step_input(data, tokenizer, eos));
  return Status::ok();
}

void apply_step_input(StepInput& input, Scheduler& scheduler, const text::Tokenizer* tokenizer,
                      const std::vector<int32_t>& eos, std::vector<TokenEvent>* rejected,
                      const std::shared_ptr<const text::TokenVocabulary>& vocabulary) {
  for (int64_t id : input.cancels) {
    spdlog::debug("serve: cancelling request {}", id);
    scheduler.cancel(id);
  }
  for (SequenceRequest& r : input.arrivals) {
    const int64_t id = r.id;
    Status status = Status::ok();
    if (!r.stop) r.stop = make_stop(r, tokenizer, eos, &status);
    if (status.is_ok() && !r.guide && !r.constraint.empty()) {
      // The other ranks hold their sequences to the same grammar, so they
      // pick the same tokens.
      auto grammar = compile_constraint(r.constraint);
      if (!grammar.is_ok() || !vocabulary) {
        status = grammar.is_ok() ? failed_precondition("structured output without a vocabulary") : grammar.status();
      } else {
        r.guide = std::make_shared<text::TokenConstraint>(*grammar, vocabulary);
      }
    }
    if (status.is_ok()) status = scheduler.add(std::move(r));
    if (!status.is_ok()) {
      spdlog::error("serve: request {} refused by the scheduler: {}", id, status.message());
      rejected->push_back(TokenEvent{id, -1, 0, true, "error", {}});
    }
  }
}

}  // namespace cohort::infer
