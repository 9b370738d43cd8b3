// libFuzzer: raw HTTP requests against the coordinator's HTTP API
// (coordinator/http_api.h), over a real loopback connection on the fuzzer's
// own io_context: the bytes are written, the write side is shut, and the
// server's answer is read to the end.
//
// The sources are fakes with the shapes a live coordinator hands over: a
// running training job with plotted figures and ranks, a failed job with a
// root cause over two attempts, a queued one; an alive node with GPU samples
// and a lost one; log lines with markup and invalid UTF-8. With the token
// configured, POSTs and the cookie reach the cancel path too.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "coordinator/http_api.h"

namespace {

namespace asio = boost::asio;
namespace coord = cohort::coordinator;
namespace proto = cohort::protocol;
using asio::ip::tcp;

constexpr int64_t kNowMs = 1'790'000'000'000;  // 2026-09

coord::TrainingSeries training_series() {
  coord::TrainingSeries t(64);  // small, so the fuzzer also sees thinned streams
  for (int64_t step = 1; step <= 100; ++step) {
    proto::MetricRow row{step, double(kNowMs) / 1000 + double(step), {{"loss", 8.0 / double(step)}, {"lr", 3e-4}}};
    if (step % 10 == 0) row.values["eval_loss"] = 9.0 / double(step);
    if (step % 3 == 0) row.values["tokens_per_s"] = 1e5 + double(step);
    row.values["mfu"] = 0.41;
    t.add(row);
  }
  return t;
}

proto::AttemptInfo attempt(int number, const std::string& state, bool failed) {
  proto::AttemptInfo a;
  a.number = number;
  a.state = state;
  a.nodes = {"n1", "n2"};
  a.world_size = 4;
  a.started_ms = kNowMs - 60'000 * (3 - number);
  a.ended_ms = failed ? a.started_ms + 30'000 : 0;
  a.reason = failed ? "rank 2 exited with code 3" : "";
  a.has_root_cause = failed;
  a.root_cause = {2, "n2", 3, 0, "exited with code 3", {"Traceback <b>&amp;", "\xff\xfe bad utf-8"}};
  return a;
}

struct Fakes {
  coord::TrainingSeries train = training_series();
  coord::TrainingSeries none;
  std::vector<coord::JobView> jobs;
  std::vector<proto::NodeInfo> nodes;
  std::vector<proto::LogLine> lines;

  Fakes() {
    coord::JobView running;
    running.info = {"job-1", "llama <script>", "train", "running", 0, 2, 2, 2, 1, 0, "/out/j1", "", kNowMs - 90'000};
    running.info.attempts = {attempt(0, "running", false)};
    running.info.events = {{kNowMs - 90'000, "submitted"}, {kNowMs - 80'000, "attempt 0 started"}};
    running.attempt = 0;
    running.ranks = {{0, "n1", 0, "running", ""}, {1, "n1", 1, "running", ""},
                     {2, "n2", 0, "exited", "exit 0"}, {3, "n2", 1, "unconfirmed", ""}};
    running.total_steps = 1000;
    running.training = &train;
    coord::JobView failed;
    failed.info = {"job-2", "cmd", "command", "failed", 5, 1, 2, 1, 1, 1, "/out/j2", "alice", kNowMs - 300'000, kNowMs - 200'000,
                   "rank 2 exited with code 3"};
    failed.info.has_root_cause = true;
    failed.info.root_cause = attempt(1, "failed", true).root_cause;
    failed.info.attempts = {attempt(0, "failed", true), attempt(1, "failed", true)};
    failed.attempt = 1;
    failed.training = &none;
    coord::JobView queued;
    queued.info = {"job-3", "waiting", "infer", "queued", 0, 1, 1, 8, 0, 0, "/out/j3", "", kNowMs - 1000};
    queued.info.message = "needs 8 GPUs on a node; the largest free has 2";
    queued.training = &none;
    jobs = {running, failed, queued};

    proto::NodeInfo alive{"n1", "10.0.0.1", "alive", {}, {}, 0, 120, {"job-1"}};
    alive.gpus = {{0, "GPU-a", "0000:01:00.0", "NVIDIA H200", 141ull << 30}, {1, "GPU-b", "0000:02:00.0", "NVIDIA H200", 141ull << 30}};
    alive.gpu_samples = {{0, 0.97, 80ull << 30}, {1, 0.0, 0}};
    proto::NodeInfo lost{"n2", "10.0.0.2", "lost", {{0, "GPU-c", "", "fake", 1 << 30}}, {}, 1, 45'000, {}};
    nodes = {alive, lost};

    for (uint64_t seq = 1; seq <= 300; ++seq) {
      int rank = int(seq % 4);
      std::string text = "step " + std::to_string(seq) + " <i>loss</i> & more";
      if (seq % 50 == 0) text = "\xc3\x28 invalid \xff";
      if (seq % 77 == 0) text = std::string(2000, 'x');
      lines.push_back({seq, 0, rank, text});
    }
  }

  std::optional<coord::JobView> job(const std::string& id_or_name) const {
    for (const auto& j : jobs) {
      if (j.info.id == id_or_name || j.info.name == id_or_name) return j;
    }
    return std::nullopt;
  }

  // The coordinator's paging: ranks and attempts filtered, after_seq, then
  // the newest `tail` or the first max_lines.
  cohort::Result<proto::LogReply> logs(const proto::LogQuery& q, size_t tail) const {
    auto j = job(q.job_id);
    if (!j) return cohort::not_found("no job '" + q.job_id + "'");
    if (j->info.id == "job-3") return cohort::permission_denied("log lines hidden");
    proto::LogReply out;
    for (const auto& line : lines) {
      if (line.seq <= q.after_seq || (q.rank >= 0 && line.rank != q.rank) || (q.attempt >= 0 && line.attempt != q.attempt)) continue;
      out.lines.push_back(line);
      out.last_seq = line.seq;
    }
    if (tail > 0 && out.lines.size() > tail) out.lines.erase(out.lines.begin(), out.lines.end() - long(tail));
    if (tail == 0 && q.max_lines > 0 && out.lines.size() > size_t(q.max_lines)) out.lines.resize(size_t(q.max_lines));
    out.job_finished = j->info.state == "failed";
    out.job_state = j->info.state;
    return out;
  }

  coord::HttpSources sources() {
    coord::HttpSources s;
    s.jobs = [this] { return jobs; };
    s.job = [this](const std::string& id) { return job(id); };
    s.nodes = [this] { return nodes; };
    s.logs = [this](const proto::LogQuery& q, size_t tail) { return logs(q, tail); };
    s.cancel = [this](const std::string& id) {
      auto j = job(id);
      if (!j) return cohort::not_found("no job '" + id + "'");
      return j->info.state == "running" ? cohort::Status::ok() : cohort::failed_precondition("already finished");
    };
    return s;
  }
};

struct Server {
  asio::io_context io;
  Fakes fakes;
  std::unique_ptr<coord::HttpApi> api;
  Server() {
    auto started = coord::HttpApi::start(io, "127.0.0.1:0", fakes.sources(), "token");
    if (started) api = std::move(*started);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Server* server = new Server();  // lives for the whole run
  if (!server->api) return 0;
  tcp::socket socket(server->io);
  boost::system::error_code ec;
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), uint16_t(server->api->port())), ec);
  if (ec) return 0;
  std::string request(reinterpret_cast<const char*>(data), size);
  std::string reply(1 << 16, '\0');
  asio::async_write(socket, asio::buffer(request), [&](boost::system::error_code, size_t) {
    boost::system::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
  });
  bool done = false;
  std::function<void()> read_more;
  read_more = [&] {
    socket.async_read_some(asio::buffer(reply), [&](boost::system::error_code e, size_t) {
      if (e) {
        done = true;  // the server answered and closed (or gave up)
      } else {
        read_more();
      }
    });
  };
  read_more();
  asio::steady_timer guard(server->io, std::chrono::seconds(5));
  guard.async_wait([&](boost::system::error_code e) {
    if (!e) done = true;
  });
  // The server's accept stays pending for ever, so run handlers one by one
  // until this exchange is over.
  while (!done && server->io.run_one()) {
  }
  guard.cancel();
  socket.close();
  while (server->io.poll_one()) {  // the server's side of the closed connection
  }
  return 0;
}
