// RendezvousStore: namespaced keys and blocked readers.
#include "coordinator/rendezvous_store.h"

#include <charconv>

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
    data[request.keys[0]] = request.value;
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
    current += request.delta;
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
    out.found = data.erase(request.keys[0]) > 0;
    return reply(out);
  }
  if (op == "get" || op == "wait") {
    if (has_all(data, request.keys)) {
      out.found = true;
      if (op == "get") out.value = data[request.keys[0]];
      return reply(out);
    }
    auto timeout = request.timeout_ms > 0 ? std::chrono::milliseconds(request.timeout_ms)
                                          : std::chrono::duration_cast<std::chrono::milliseconds>(
                                                default_timeout_);
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
