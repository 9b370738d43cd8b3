// Envelope encoding and decoding, and base64 for store values.
#include "protocol/codec.h"

#include <array>
#include <string_view>

#include "protocol/input_log.h"

namespace cohort::protocol {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(n >> s) & 63]);
  }
  if (size_t rest = bytes.size() - i; rest > 0) {
    uint32_t n = uint8_t(bytes[i]) << 16;
    if (rest == 2) n |= uint8_t(bytes[i + 1]) << 8;
    out.push_back(kAlphabet[(n >> 18) & 63]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

bool base64_decode(const std::string& text, std::string* bytes) {
  std::array<int, 256> value;
  value.fill(-1);
  for (int i = 0; i < 64; ++i) value[uint8_t(kAlphabet[i])] = i;
  if (text.size() % 4 != 0) return false;
  bytes->clear();
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t n = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
        n <<= 6;
        continue;
      }
      if (pad > 0 || value[uint8_t(c)] < 0) return false;
      n = (n << 6) | uint32_t(value[uint8_t(c)]);
    }
    bytes->push_back(char((n >> 16) & 255));
    if (pad < 2) bytes->push_back(char((n >> 8) & 255));
    if (pad < 1) bytes->push_back(char(n & 255));
  }
  return true;
}

void to_json(nlohmann::json& j, const StoreRequest& m) {
  j = {{"job_id", m.job_id},         {"attempt", m.attempt}, {"op", m.op},
       {"keys", m.keys},             {"value", base64_encode(m.value)},
       {"delta", m.delta},           {"timeout_ms", m.timeout_ms}, {"token", m.token}};
}

void from_json(const nlohmann::json& j, StoreRequest& m) {
  m.job_id = j.value("job_id", std::string());
  m.attempt = j.value("attempt", 0);
  m.op = j.value("op", std::string());
  m.keys = j.value("keys", std::vector<std::string>());
  if (!base64_decode(j.value("value", std::string()), &m.value)) {
    throw std::invalid_argument("store value is not base64");
  }
  m.delta = j.value("delta", int64_t{0});
  m.timeout_ms = j.value("timeout_ms", int64_t{0});
  m.token = j.value("token", std::string());
}

void to_json(nlohmann::json& j, const StoreReply& m) {
  j = {{"value", base64_encode(m.value)}, {"found", m.found}};
}

void from_json(const nlohmann::json& j, StoreReply& m) {
  if (!base64_decode(j.value("value", std::string()), &m.value)) {
    throw std::invalid_argument("store value is not base64");
  }
  m.found = j.value("found", false);
}

std::string encode_envelope(const Envelope& e) {
  nlohmann::json j = {{"v", e.version}, {"type", e.type}, {"id", e.id}, {"body", e.body}};
  // Worker output may hold invalid UTF-8; replace it rather than fail the send.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// The message fields that hold a double (messages.h); every other number is
// an integer field. MetricRow's `values` map holds doubles under any key.
bool is_double_field(std::string_view key) {
  static constexpr std::string_view kDoubleFields[] = {"loss", "tokens_per_s", "eta_s",
                                                       "gpu_hours", "utilization", "time"};
  for (std::string_view name : kDoubleFields) if (key == name) return true;
  return false;
}

// Converting a float to an integer field is undefined behaviour when it is
// out of the field's range (a fuzzer sent "delta": 4.4e51, then
// "master_port": 29e11, and -1.0 into an unsigned field is no better), so a
// float is accepted only where the message holds a double.
bool has_float_in_integer_field(const nlohmann::json& j, bool doubles_here, int depth = 0) {
  if (depth > 64) return true;  // deeper than any message: refused as well
  if (j.is_number_float()) return !doubles_here;
  if (j.is_object()) {
    for (const auto& [key, item] : j.items()) {
      if (key == "values" && item.is_object()) {
        for (const auto& value : item) {
          if (has_float_in_integer_field(value, /*doubles_here=*/true, depth + 2)) return true;
        }
      } else if (has_float_in_integer_field(item, is_double_field(key), depth + 1)) {
        return true;
      }
    }
  } else if (j.is_array()) {
    for (const auto& item : j) if (has_float_in_integer_field(item, doubles_here, depth + 1)) return true;
  }
  return false;
}

}  // namespace

Result<Envelope> decode(std::string_view bytes, size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    return invalid_argument("message of " + std::to_string(bytes.size()) +
                            " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("message is not valid JSON");
  if (!j.is_object()) return invalid_argument("message is not a JSON object");
  if (has_float_in_integer_field(j, /*doubles_here=*/false)) {
    return invalid_argument("message holds a fractional number where an integer belongs");
  }
  auto v = j.find("v");
  if (v == j.end() || !v->is_number_integer()) return invalid_argument("message has no version 'v'");
  // Compared as a JSON number: get<int>() truncated 4294967297 to 1.
  if (*v != kProtocolVersion) {
    return invalid_argument("protocol version " + shorten(v->dump(), 24) +
                            " is not supported (this build speaks " +
                            std::to_string(kProtocolVersion) + ")");
  }
  auto type = j.find("type");
  if (type == j.end() || !type->is_string()) return invalid_argument("message has no 'type'");
  Envelope e;
  e.version = kProtocolVersion;
  e.type = type->get<std::string>();
  if (auto id = j.find("id"); id != j.end()) {
    if (!id->is_number_unsigned() && !id->is_number_integer()) {
      return invalid_argument("message 'id' is not a number");
    }
    e.id = id->get<uint64_t>();
  }
  if (auto body = j.find("body"); body != j.end()) {
    if (!body->is_object()) return invalid_argument("message 'body' is not an object");
    e.body = std::move(*body);
  }
  return e;
}

std::string encode_error(const Status& status, uint64_t id) {
  ErrorReply reply{status_code_name(status.code()), status.message()};
  return encode(reply, id);
}

Status error_status(const ErrorReply& reply) {
  for (int c = 1; c <= int(StatusCode::kIo); ++c) {
    if (reply.code == status_code_name(StatusCode(c))) return Status(StatusCode(c), reply.message);
  }
  return Status(StatusCode::kInternal, reply.code + ": " + reply.message);
}

}  // namespace cohort::protocol
