// ServeHttp: the OpenAI-compatible HTTP front of kind = "serve", on rank 0.
// Boost.Beast on its own io_context thread; the generation loop
// (serve_job.cc) runs on another and talks to it through GenerationQueue
// (requests in, cancellations) and deliver() (the tokens of each step).
//
//   POST /v1/completions, /v1/chat/completions   stream: true as server-sent events
//   GET  /v1/models, /health, /metrics
//
// Errors are OpenAI-style JSON ({"error": {message, type, param, code}}):
// 400 naming the field, 401 without the API key (when one is set), 404, 405,
// 413 for a body over max_body_bytes, 429 when running + waiting requests
// reach max_live, 503 while loading or draining. Bounded per client: the
// body, the header (16 KiB), the time to its first byte (10 s) and to the
// whole request (30 s), and what is buffered for a reader that does not keep
// up (at most one chunk per token of its max_tokens). Connections are capped
// (max_connections, max_connections_per_address); at a cap, the connection
// that has waited longest for its request is closed to make room
// (base/connection_slots.h), so slow clients never keep /health out. When
// every slot has a request under way a new connection gets 503 and is closed.
// A client that disconnects has its request cancelled (its slot is free at
// the next step). Nothing a client sends can throw out of a handler.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "infer/serve/openai_api.h"
#include "infer/scheduler.h"
#include "infer/serve_step.h"
#include "infer/serve/serve_metrics.h"
#include "text/token_constraint.h"
#include "text/tokenizer.h"

namespace cohort::infer {

// The generation loop as the HTTP thread sees it. Thread-safe.
class GenerationQueue {
 public:
  virtual ~GenerationQueue() = default;
  virtual void submit(SequenceRequest request) = 0;
  virtual void cancel(int64_t id) = 0;
  virtual LoopGauges gauges() const = 0;
  // Loads or unloads a LoRA adapter on every rank between two steps, then
  // calls `done` (on the loop's thread) with the outcome. A loop that takes
  // none refuses at once.
  virtual void change_adapter(AdapterChange change, std::function<void(Status)> done) {
    (void)change;
    done(failed_precondition("this server loads no adapters at run time"));
  }
};

enum class ServeState {
  kLoading,   // HTTP is up, the model is not: completions get 503
  kReady,
  kDraining,  // SIGTERM: running requests finish, new ones get 503
};

struct ServeHttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string api_key;               // "": no key needed
  int max_connections = 256;
  int max_connections_per_address = 128;
  int max_body_bytes = 1 << 20;
  int max_live = 80;                 // running + waiting requests before 429
  // Threads that render and tokenize prompts (infer/serve/prompt_workers.h), and
  // the requests that may wait for one before 503.
  int prompt_threads = 2;
  int max_pending_prompts = 256;
  ApiDefaults defaults;
  std::shared_ptr<text::Tokenizer> tokenizer;  // may be null (token-id prompts only)
  std::vector<int32_t> eos;          // stop ids every request gets
  // The tokenizer's vocabulary as structured output matches it (null:
  // requests for JSON output or forced tool calls get 400).
  std::shared_ptr<const text::TokenVocabulary> vocabulary;
};

class ServeHttp {
 public:
  // Binds and starts the HTTP thread; errors when the address cannot be bound.
  static Result<std::unique_ptr<ServeHttp>> start(ServeHttpOptions options, GenerationQueue* queue,
                                                  ServeMetrics* metrics);
  virtual ~ServeHttp() = default;
  virtual int port() const = 0;
  virtual void set_state(ServeState state) = 0;
  // The tokens of one step (any thread; handled on the HTTP thread).
  virtual void deliver(std::vector<TokenEvent> events) = 0;
  // Accepted requests not yet finished (any thread).
  virtual int live() const = 0;
  // Cancels every accepted request (any thread): the end of a drain that
  // ran out of time. Streams end with [DONE], others get 500.
  virtual void cancel_all() = 0;
  // Connections with a response under way (any thread): after the last
  // request finished, its final bytes may still be on their way out. Idle
  // connections (no request yet, or a client's spare keep-alive socket) do
  // not count.
  virtual int responding() const = 0;
};

}  // namespace cohort::infer
