// GlooSelfMailbox: sends a GlooCommunicator addresses to its own rank. Gloo
// has no pair to itself, so they are matched here by tag, in posting order,
// and copied in memory, as NCCL and MPI do for a self-send.
#pragma once

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "collective/gloo/gloo_op_queue.h"

namespace cohort::collective {

class GlooSelfMailbox {
 public:
  std::shared_ptr<GlooWork> send(const void* buf, size_t bytes, uint32_t tag) {
    return post(const_cast<void*>(buf), bytes, tag, /*is_send=*/true);
  }
  std::shared_ptr<GlooWork> recv(void* buf, size_t bytes, uint32_t tag) {
    return post(buf, bytes, tag, /*is_send=*/false);
  }

 private:
  struct Pending {
    void* buf;
    size_t bytes;
    std::shared_ptr<GlooWork> work;
  };

  std::shared_ptr<GlooWork> post(void* buf, size_t bytes, uint32_t tag, bool is_send) {
    auto work = std::make_shared<GlooWork>();
    std::lock_guard lock(mu_);
    auto& other = is_send ? recvs_[tag] : sends_[tag];
    if (other.empty()) {
      (is_send ? sends_[tag] : recvs_[tag]).push_back({buf, bytes, work});
      return work;
    }
    Pending peer = other.front();
    other.pop_front();
    if (peer.bytes != bytes) {
      Status s =
          invalid_argument("send to self of " + std::to_string(is_send ? bytes : peer.bytes) +
                           " bytes met a recv of " + std::to_string(is_send ? peer.bytes : bytes));
      peer.work->complete(s);
      work->complete(s);
      return work;
    }
    if (bytes > 0) std::memcpy(is_send ? peer.buf : buf, is_send ? buf : peer.buf, bytes);
    peer.work->complete(Status::ok());
    work->complete(Status::ok());
    return work;
  }

  std::mutex mu_;
  std::map<uint32_t, std::deque<Pending>> sends_;  // GUARDED_BY(mu_)
  std::map<uint32_t, std::deque<Pending>> recvs_;  // GUARDED_BY(mu_)
};

}  // namespace cohort::collective
