// NetnsNetwork: namespaces, a bridge and veth links through `ip`.
#include "netns_network.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <regex>
#include <sstream>

#include "cluster_harness.h"

namespace cohort::testing {
namespace {

constexpr const char* kSubnet = "10.211.7.";

std::string find_ip() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

// Runs `ip args...`; "" on success, else the command and what it said.
std::string ip(const std::string& binary, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, std::chrono::seconds(10));
  if (r.exit_code == 0) return "";
  std::string cmd = "ip";
  for (const auto& a : args) cmd += " " + a;
  return "`" + cmd + "` failed (exit " + std::to_string(r.exit_code) + "): " + r.err;
}

std::vector<pid_t> namespace_pids(const std::string& binary, const std::string& ns) {
  auto r = run_command({binary, "netns", "pids", ns}, std::chrono::seconds(10));
  std::vector<pid_t> out;
  std::istringstream in(r.out);
  for (long pid; in >> pid;) out.push_back(pid_t(pid));
  return out;
}

void delete_namespace(const std::string& binary, const std::string& ns) {
  // Only processes this suite started live in its namespaces.
  for (pid_t pid : namespace_pids(binary, ns)) ::kill(pid, SIGKILL);
  (void)ip(binary, {"netns", "del", ns});
}

// Namespaces of earlier runs that died before their teardown.
void remove_stale(const std::string& binary) {
  auto r = run_command({binary, "netns", "list"}, std::chrono::seconds(10));
  std::istringstream in(r.out);
  static const std::regex kOurs("^cohort-t-([0-9]+)-[a-z0-9]+$");
  for (std::string line; std::getline(in, line);) {
    std::string name = line.substr(0, line.find(' '));
    std::smatch m;
    if (!std::regex_match(name, m, kOurs)) continue;
    pid_t owner = pid_t(std::stol(m[1]));
    if (owner == ::getpid() || ::kill(owner, 0) == 0 || errno != ESRCH) continue;
    delete_namespace(binary, name);
  }
}

}  // namespace

std::unique_ptr<NetnsNetwork> NetnsNetwork::create(const std::vector<std::string>& hosts,
                                                   std::string* why_not) {
  if (::geteuid() != 0) {
    *why_not = "not root: network namespaces need root (run the suite as root, as CI does)";
    return nullptr;
  }
  std::unique_ptr<NetnsNetwork> net(new NetnsNetwork());
  net->ip_ = find_ip();
  if (net->ip_.empty()) {
    *why_not = "no `ip` (iproute2) on this host";
    return nullptr;
  }
  remove_stale(net->ip_);
  std::string prefix = "cohort-t-" + std::to_string(::getpid()) + "-";
  net->switch_ns_ = prefix + "sw";
  auto step = [&](const std::vector<std::string>& args) {
    if (!why_not->empty()) return;
    *why_not = ip(net->ip_, args);
  };
  why_not->clear();
  step({"netns", "add", net->switch_ns_});
  if (why_not->empty()) net->created_.push_back(net->switch_ns_);
  step({"-n", net->switch_ns_, "link", "set", "lo", "up"});
  step({"-n", net->switch_ns_, "link", "add", "br0", "type", "bridge"});
  step({"-n", net->switch_ns_, "link", "set", "br0", "up"});
  for (size_t i = 0; i < hosts.size() && why_not->empty(); ++i) {
    Host h{prefix + hosts[i], kSubnet + std::to_string(i + 1), "p" + std::to_string(i + 1)};
    step({"netns", "add", h.ns});
    if (why_not->empty()) net->created_.push_back(h.ns);
    step({"link", "add", "eth0", "netns", h.ns, "type", "veth", "peer", "name", h.switch_port,
          "netns", net->switch_ns_});
    step({"-n", net->switch_ns_, "link", "set", h.switch_port, "master", "br0"});
    step({"-n", net->switch_ns_, "link", "set", h.switch_port, "up"});
    step({"-n", h.ns, "link", "set", "lo", "up"});
    step({"-n", h.ns, "addr", "add", h.address + "/24", "dev", "eth0"});
    step({"-n", h.ns, "link", "set", "eth0", "up"});
    net->hosts_[hosts[i]] = h;
  }
  if (!why_not->empty()) {
    *why_not = "cannot build the test network: " + *why_not;
    return nullptr;  // the destructor removes what was made
  }
  return net;
}

NetnsNetwork::~NetnsNetwork() {
  for (const auto& ns : created_) delete_namespace(ip_, ns);
}

std::vector<std::string> NetnsNetwork::in(const std::string& host) const {
  return {ip_, "netns", "exec", hosts_.at(host).ns};
}

std::string NetnsNetwork::partition(const std::string& host) {
  return ip(ip_, {"-n", switch_ns_, "link", "set", hosts_.at(host).switch_port, "down"});
}

std::string NetnsNetwork::heal(const std::string& host) {
  return ip(ip_, {"-n", switch_ns_, "link", "set", hosts_.at(host).switch_port, "up"});
}

std::vector<pid_t> NetnsNetwork::pids(const std::string& host) const {
  return namespace_pids(ip_, hosts_.at(host).ns);
}

}  // namespace cohort::testing
