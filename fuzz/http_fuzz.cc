// libFuzzer: raw HTTP requests against the coordinator's HTTP API, over a
// real loopback connection on the fuzzer's own io_context: the bytes are
// written, the write side is shut, and the server's answer is read to the
// end (coordinator/http_api.h).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "coordinator/http_api.h"

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

struct Server {
  asio::io_context io;
  std::unique_ptr<cohort::coordinator::HttpApi> api;
  Server() {
    cohort::protocol::JobInfo job;
    job.id = "job-1";
    job.name = "fuzz";
    job.state = "running";
    job.has_root_cause = true;
    job.root_cause.last_lines = {"line"};
    cohort::protocol::NodeInfo node;
    node.name = "n1";
    node.gpus = {{0, "uuid", "0000:01:00.0", "fake", 1 << 30}};
    cohort::coordinator::HttpSources sources{
        [job] { return std::vector<cohort::protocol::JobInfo>{job}; },
        [node] { return std::vector<cohort::protocol::NodeInfo>{node}; },
        [](const std::string& id) { return id == "job-1" ? cohort::Status::ok() : cohort::not_found("no job"); }};
    auto started = cohort::coordinator::HttpApi::start(io, "127.0.0.1:0", std::move(sources), "token");
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
