// NetnsNetwork: a private network of hosts made of Linux network
// namespaces, for multi-node tests with real addresses off loopback.
//
// One "switch" namespace holds a bridge; every host is a namespace with its
// own loopback and an eth0 joined to the bridge by a veth link, addressed in
// 10.211.7.0/24 (visible only inside these namespaces: the host's own
// network is never touched, and concurrent runs do not collide). Names are
// cohort-t-<pid>-<host>; namespaces left by a run that died (its pid gone)
// are removed by the next one. Destroying the network kills every process
// still in its namespaces and deletes them, whatever the test's outcome.
//
// Needs root and iproute2 (`ip netns`); create() says why not otherwise.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cohort::testing {

class NetnsNetwork {
 public:
  // Hosts get addresses 10.211.7.1, .2, … in the order given. Null, with
  // `why_not` set, where namespaces cannot be made here.
  static std::unique_ptr<NetnsNetwork> create(const std::vector<std::string>& hosts,
                                              std::string* why_not);
  ~NetnsNetwork();

  const std::string& address(const std::string& host) const { return hosts_.at(host).address; }
  // argv prefix that runs a command inside `host`'s namespace.
  std::vector<std::string> in(const std::string& host) const;
  // Cuts `host` off the bridge (its link goes down: every packet to and from
  // it is dropped, as in a partition) and joins it again. "" on success,
  // else what `ip` said.
  std::string partition(const std::string& host);
  std::string heal(const std::string& host);
  // The processes in `host`'s namespace.
  std::vector<pid_t> pids(const std::string& host) const;

 private:
  struct Host {
    std::string ns;
    std::string address;
    std::string switch_port;  // the bridge end of its veth link
  };
  NetnsNetwork() = default;

  std::string ip_;  // the `ip` binary
  std::string switch_ns_;
  std::map<std::string, Host> hosts_;
  std::vector<std::string> created_;  // namespaces, for teardown
};

}  // namespace cohort::testing
