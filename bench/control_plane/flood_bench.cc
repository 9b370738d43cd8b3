// A bounded adversarial flood on loopback against a real `cohort
// coordinator` and `cohort agent` (issue 19), with their RSS, peak RSS and
// thread counts before, after each phase and after a settle time:
//   garbage frames, frames over the message cap, unknown types of 8 MB,
//   unanswered queries from a peer that never reads, forged log floods and
//   heartbeats, slow HTTP connections, and on the agent's store port frames
//   that announce 256 MiB and hundreds of idle connections.
//
//   flood_bench [--bin build/bin] [--settle 12]
// Prints a Markdown table for bench/RESULTS.md.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    ::dup2(STDOUT_FILENO, STDERR_FILENO);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// kB from /proc/PID/status.
long status_field(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::strtol(line.c_str() + std::strlen(field), nullptr, 10);
  }
  return -1;
}

struct Sample {
  std::string when;
  long coord_rss, coord_hwm, coord_threads, agent_rss, agent_hwm, agent_threads;
};

Sample sample(const std::string& when, pid_t coordinator, pid_t agent) {
  return {when,
          status_field(coordinator, "VmRSS:"),
          status_field(coordinator, "VmHWM:"),
          status_field(coordinator, "Threads:"),
          status_field(agent, "VmRSS:"),
          status_field(agent, "VmHWM:"),
          status_field(agent, "Threads:")};
}

// Written by hand, as a hostile peer would; "v" is protocol/codec.h's kProtocolVersion.
std::string envelope(const std::string& type, const std::string& body, int id = 0) {
  return R"({"v":2,"type":")" + type + R"(","id":)" + std::to_string(id) + R"(,"body":)" + body +
         "}";
}

zmq::socket_t dealer(zmq::context_t& ctx, const std::string& endpoint) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  s.connect(endpoint);
  return s;
}

void send_all(zmq::socket_t& s, const std::string& payload, int times) {
  for (int i = 0; i < times; ++i) s.send(zmq::buffer(payload), zmq::send_flags::none);
}

// Receives and drops whatever comes for `d`.
void drain(zmq::socket_t& s, std::chrono::milliseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 50ms);
    zmq::message_t m;
    while (s.recv(m, zmq::recv_flags::dontwait)) {
    }
  }
}

int tcp_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin = "build/bin";
  int settle = 12;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--bin") bin = argv[i + 1];
    if (std::string(argv[i]) == "--settle") settle = std::atoi(argv[i + 1]);
  }
  std::string cohort = fs::absolute(bin + "/cohort").string();
  char templ[] = "/tmp/cohort-flood-XXXXXX";
  std::string dir = ::mkdtemp(templ);
  int port = free_port(), http = free_port();
  std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  pid_t coordinator = spawn({cohort, "coordinator", "--listen", endpoint, "--state-dir", dir + "/state",
                             "--http", "127.0.0.1:" + std::to_string(http)},
                            dir + "/coordinator.log");
  std::this_thread::sleep_for(1s);
  pid_t agent = spawn({cohort, "agent", "--coordinator", endpoint, "--name", "flood-node", "--fake-gpus", "2"},
                      dir + "/agent.log");
  std::this_thread::sleep_for(2s);
  // A job whose worker tells us the agent's store port.
  std::string store_file = dir + "/store.txt";
  std::ofstream(dir + "/job.toml") << "[job]\nname = \"flood\"\nkind = \"command\"\noutput_dir = \"" << dir
                                   << "/out\"\n[command]\nargv = [\"sh\", \"-c\", \"echo $COHORT_STORE > " << store_file
                                   << "; sleep 120\"]\n";
  std::string submit = cohort + " submit " + dir + "/job.toml --coordinator " + endpoint + " > /dev/null";
  if (std::system(submit.c_str()) != 0) std::fprintf(stderr, "submit failed\n");
  for (int i = 0; i < 50 && !fs::exists(store_file); ++i) std::this_thread::sleep_for(100ms);
  std::this_thread::sleep_for(1s);

  std::vector<Sample> samples;
  samples.push_back(sample("start (1 job running)", coordinator, agent));
  zmq::context_t ctx(1);
  std::mt19937 rng(19);
  {
    auto s = dealer(ctx, endpoint);
    std::string junk(1024, '\0');
    for (int i = 0; i < 20000; ++i) {
      for (auto& c : junk) c = char(rng());
      s.send(zmq::buffer(junk), zmq::send_flags::none);
    }
    drain(s, 2s);
  }
  samples.push_back(sample("20,000 garbage frames of 1 KiB", coordinator, agent));
  {
    auto s = dealer(ctx, endpoint);
    send_all(s, std::string((8 << 20) + 100, 'x'), 20);
    send_all(s, envelope(std::string(8 << 20, 'u'), "{}").substr(0, 8 << 20), 20);
    drain(s, 3s);
    auto big = dealer(ctx, endpoint);
    send_all(big, std::string(40 << 20, 'y'), 5);
    std::this_thread::sleep_for(2s);
  }
  samples.push_back(sample("20 frames over the 8 MiB cap, 20 unknown types of 8 MB, 5 of 40 MiB", coordinator, agent));
  {
    auto s = dealer(ctx, endpoint);
    send_all(s, envelope("job_query", "{}"), 3000);  // never reads a reply
    std::this_thread::sleep_for(3s);
  }
  samples.push_back(sample("3,000 job queries never read", coordinator, agent));
  {
    auto s = dealer(ctx, endpoint);
    std::string line(5 << 20, 'l');
    std::string batch = envelope("log_batch", R"({"job_id":"job-1","lines":[{"attempt":0,"rank":0,"text":")" + line + R"("}]})");
    send_all(s, batch, 60);
    send_all(s, envelope("heartbeat", R"({"node":"flood-node","running":[]})"), 1000);
    drain(s, 3s);
  }
  samples.push_back(sample("60 forged log batches of 5 MiB, 1,000 forged heartbeats", coordinator, agent));
  std::vector<int> slow;
  for (int i = 0; i < 200; ++i) {
    int fd = tcp_connect(http);
    if (fd < 0) continue;
    const char* partial = "GET /api/jobs HTTP/1.1\r\nHost: x\r\n";
    [[maybe_unused]] auto n = ::send(fd, partial, std::strlen(partial), MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(3s);
  samples.push_back(sample("200 slow HTTP connections held open", coordinator, agent));
  for (int fd : slow) ::close(fd);

  std::string store;
  std::ifstream(store_file) >> store;
  int store_port = store.empty() ? 0 : std::atoi(store.substr(store.rfind(':') + 1).c_str());
  std::vector<int> idle;
  if (store_port > 0) {
    for (int i = 0; i < 8; ++i) {
      int fd = tcp_connect(store_port);
      if (fd < 0) continue;
      uint32_t n = 256u << 20;
      [[maybe_unused]] auto w = ::send(fd, &n, 4, MSG_NOSIGNAL);
      std::string chunk(1 << 20, 'z');
      [[maybe_unused]] auto w2 = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      idle.push_back(fd);
    }
    for (int i = 0; i < 500; ++i) {
      int fd = tcp_connect(store_port);
      if (fd >= 0) idle.push_back(fd);
    }
    std::this_thread::sleep_for(3s);
  }
  samples.push_back(sample(store_port > 0 ? "store port: 8 frames announcing 256 MiB, 500 idle connections"
                                          : "store port: not found",
                           coordinator, agent));
  for (int fd : idle) ::close(fd);
  std::this_thread::sleep_for(std::chrono::seconds(settle));
  samples.push_back(sample("after " + std::to_string(settle) + " s of quiet", coordinator, agent));
  // Still answering?
  std::string jobs = cohort + " jobs --coordinator " + endpoint + " > /dev/null";
  bool answers = std::system(jobs.c_str()) == 0;

  std::printf("| phase | coordinator RSS (MB) | peak (MB) | threads | agent RSS (MB) | peak (MB) | threads |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& s : samples) {
    std::printf("| %s | %.1f | %.1f | %ld | %.1f | %.1f | %ld |\n", s.when.c_str(), s.coord_rss / 1024.0,
                s.coord_hwm / 1024.0, s.coord_threads, s.agent_rss / 1024.0, s.agent_hwm / 1024.0,
                s.agent_threads);
  }
  std::printf("\ncoordinator still answers `cohort jobs`: %s\n", answers ? "yes" : "NO");
  ::kill(agent, SIGTERM);
  ::kill(coordinator, SIGTERM);
  ::waitpid(agent, nullptr, 0);
  ::waitpid(coordinator, nullptr, 0);
  std::printf("logs in %s\n", dir.c_str());
  return answers ? 0 : 1;
}
