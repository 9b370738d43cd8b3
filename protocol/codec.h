// The versioned envelope every control-plane message travels in.
//
// Encoding: JSON (nlohmann). Control messages are small and rare (a launch
// order per node per attempt, a heartbeat per node per half second), so the
// microseconds JSON costs are far below the control plane's one-second aims,
// while a human-readable wire format makes `--json` output, debugging with
// a packet capture and mixing protocol versions straightforward. A binary
// schema would save bytes nobody is short of and add a code generator.
//
//   {"v": 2, "type": "submit", "id": 7, "body": {...}}
//
// `v` is the protocol version: a peer rejects any other major version with an
// error reply. `id` pairs a reply with its request (0 for one-way messages).
// Fields added with a default keep the version; a change an older peer
// would misread raises it. Version 2: a job travels once, as its resolved
// file (SubmitJob and LaunchOrder `job_toml`), no longer also as fields.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "protocol/messages_json.h"

namespace cohort::protocol {

constexpr int kProtocolVersion = 2;
// Largest message a daemon accepts. A job's resolved TOML and a batch of log
// lines fit with room to spare; anything larger is refused with an error.
constexpr size_t kMaxMessageBytes = 8u << 20;

struct Envelope {
  int version = kProtocolVersion;
  std::string type;
  uint64_t id = 0;
  nlohmann::json body = nlohmann::json::object();
};

std::string encode_envelope(const Envelope& envelope);

template <typename T>
std::string encode(const T& message, uint64_t id = 0) {
  Envelope e;
  e.type = T::kType;
  e.id = id;
  e.body = message;
  return encode_envelope(e);
}

// Checks size, JSON syntax, version and envelope fields. It does not know
// which types exist: the receiver answers unknown types.
Result<Envelope> decode(std::string_view bytes, size_t max_bytes = kMaxMessageBytes);

// The body as a typed message; an error names the type and the bad field.
template <typename T>
Result<T> body_as(const Envelope& e) {
  if (e.type != T::kType) {
    return invalid_argument("expected a '" + std::string(T::kType) + "' message, got '" + e.type + "'");
  }
  try {
    return e.body.get<T>();
  } catch (const std::exception& ex) {
    return invalid_argument("bad '" + e.type + "' message: " + ex.what());
  }
}

// An error reply naming the failure, and back.
std::string encode_error(const Status& status, uint64_t id);
Status error_status(const ErrorReply& reply);

}  // namespace cohort::protocol
