// RendezvousStore: namespaced keys and blocked readers.
#include "coordinator/rendezvous_store.h"

#include <algorithm>
#include <charconv>

#include "protocol/limits.h"

namespace cohort::coordinator {
namespace {

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

}  // namespace

bool RendezvousStore::has_all(const std::map<std::string, std::string>& data,
                              const std::vector<std::string>& keys) const {
  for (const auto& k : keys) {
    if (!data.count(k)) return false;
  }
  return true;
}

void RendezvousStore::handle(const protocol::StoreRequest& request, Reply reply) {
  if (request.job_id.empty()) return reply(invalid_argument("store request names no job"));
  if (request.keys.size() > protocol::kMaxStoreKeysPerRequest)
    return reply(invalid_argument("store: more than " + std::to_string(protocol::kMaxStoreKeysPerRequest) +
                                  " keys in one request"));
  for (const auto& k : request.keys) {
    if (k.size() > protocol::kMaxStoreKeyBytes)
      return reply(invalid_argument("store: a key of " + std::to_string(k.size()) + " bytes; at most " +
                                    std::to_string(protocol::kMaxStoreKeyBytes)));
  }
  if (request.value.size() > protocol::kMaxStoreValueBytes)
    return reply(invalid_argument("store: a value of " + std::to_string(request.value.size()) +
                                  " bytes; at most " + std::to_string(protocol::kMaxStoreValueBytes)));
  std::string ns = namespace_of(request.job_id, request.attempt);
  auto& data = data_[ns];
  const auto& op = request.op;
  bool needs_key = op == "set" || op == "get" || op == "add" || op == "delete";
  if (needs_key && request.keys.size() != 1) {
    return reply(invalid_argument("store '" + op + "' takes exactly one key"));
  }
  if ((op == "wait" || op == "check") && request.keys.empty()) {
    return reply(invalid_argument("store '" + op + "' needs at least one key"));
  }
  protocol::StoreReply out;
  if (op == "set") {
    const std::string& key = request.keys[0];
    size_t& bytes = bytes_[ns];
    auto it = data.find(key);
    size_t old_size = it == data.end() ? 0 : key.size() + it->second.size();
    size_t new_size = key.size() + request.value.size();
    if (bytes - old_size + new_size > protocol::kMaxStoreBytesPerAttempt)
      return reply(invalid_argument("store: the attempt's keys would exceed " +
                                    std::to_string(protocol::kMaxStoreBytesPerAttempt) + " bytes"));
    bytes = bytes - old_size + new_size;
    data[key] = request.value;
    reply(out);
    return wake(ns);
  }
  if (op == "add") {
    int64_t current = 0;
    auto it = data.find(request.keys[0]);
    if (it != data.end()) {
      const std::string& text = it->second;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
      if (ec != std::errc() || end != text.data() + text.size()) {
        return reply(invalid_argument("store key '" + request.keys[0] + "' holds no integer"));
      }
    }
    // Overflow is an error, not a wrap (INT64_MAX added twice became negative).
    if (__builtin_add_overflow(current, request.delta, &current)) {
      return reply(invalid_argument("store add on '" + request.keys[0] + "' overflows a 64-bit integer"));
    }
    data[request.keys[0]] = std::to_string(current);
    out.value = std::to_string(current);
    out.found = true;
    reply(out);
    return wake(ns);
  }
  if (op == "check") {
    out.found = has_all(data, request.keys);
    return reply(out);
  }
  if (op == "delete") {
    auto it = data.find(request.keys[0]);
    out.found = it != data.end();
    if (out.found) {
      bytes_[ns] -= it->first.size() + it->second.size();
      data.erase(it);
    }
    return reply(out);
  }
  if (op == "get" || op == "wait") {
    if (has_all(data, request.keys)) {
      out.found = true;
      if (op == "get") out.value = data[request.keys[0]];
      return reply(out);
    }
    // Clamped, so that now + timeout cannot overflow (INT64_MAX ms timed out at once).
    constexpr int64_t kMaxTimeoutMs = int64_t(7) * 24 * 3600 * 1000;
    auto timeout = request.timeout_ms > 0
                       ? std::chrono::milliseconds(std::min(request.timeout_ms, kMaxTimeoutMs))
                       : std::chrono::duration_cast<std::chrono::milliseconds>(default_timeout_);
    size_t blocked = 0;
    for (const auto& w : waiters_) blocked += w.ns == ns ? 1 : 0;
    if (blocked >= kMaxWaitersPerNamespace)
      return reply(invalid_argument("store: " + std::to_string(blocked) + " requests of this attempt are blocked already"));
    waiters_.push_back({ns, request.keys, op == "get", clock_.now() + timeout, std::move(reply)});
    return;
  }
  reply(invalid_argument("unknown store operation '" + op +
                         "' (set, get, add, wait, check, delete)"));
}

void RendezvousStore::wake(const std::string& ns) {
  const auto& data = data_[ns];
  std::vector<Waiter> ready;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->ns == ns && has_all(data, it->keys)) {
      ready.push_back(std::move(*it));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& w : ready) {
    protocol::StoreReply out;
    out.found = true;
    if (w.want_value) out.value = data.at(w.keys[0]);
    w.reply(out);
  }
}

void RendezvousStore::expire() {
  auto now = clock_.now();
  std::vector<Waiter> late;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->deadline <= now) {
      late.push_back(std::move(*it));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& w : late) {
    w.reply(timeout_error("store keys not set in time: " + join_keys(w.keys)));
  }
}

void RendezvousStore::drop_namespace(const std::string& name) {
  data_.erase(name);
  bytes_.erase(name);
  std::vector<Waiter> dropped;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->ns == name) {
      dropped.push_back(std::move(*it));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& w : dropped) w.reply(aborted("the job attempt ended"));
}

}  // namespace cohort::coordinator
