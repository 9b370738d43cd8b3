// ZeroMQ CURVE keys with roles, and the rule for when they are required.
//
// Submitting a job runs code on every node, so a coordinator bound to anything
// but a loopback address must authenticate its peers. Each peer key has a
// role: an agent key may register a node and report for it; a client key may
// submit, query and cancel, and can never register a node. Key folders:
//
//   cohort keygen COORD                       the coordinator's folder, on its host only:
//     COORD/server.public  COORD/server.secret   its pair (the secret never leaves)
//     COORD/authorized_agents                    agent public keys, one a line
//     COORD/authorized_clients                   client public keys, one a line
//   cohort keygen DIR --role agent|client [--authorize COORD]
//     DIR/agent.public DIR/agent.secret   (or client.*)   the peer's pair
//     DIR/server.public                   copied from COORD with --authorize
//   --authorize COORD also appends the new public key to COORD's list.
//   cohort keygen DIR --role agent --authorize COORD --nodes a,b
//     the key's line in authorized_agents says "KEY nodes=a,b": it may
//     register only those node names.
//
//   A client key's line may carry its owner's name and limits:
//     "KEY name=alice max_gpus=16 max_queued=50" (a number, or "unlimited"
//     to lift the coordinator's default for this key); see ClientKeySettings.
//
// An agent key is bound to each node name it registers (first use binds, in
// the coordinator's state; `cohort nodes rm` unbinds): another key cannot
// take that name, even after the node is lost.
//
// Without keys (loopback) every peer is trusted: Role::kTrusted, for trusted
// local users only.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::protocol {

struct KeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;
};

// What an authenticated peer may do. kTrusted: no CURVE (loopback).
enum class Role { kTrusted, kAgent, kClient };
const char* to_string(Role role);  // "trusted", "agent", "client"
// "agent" or "client"; an error naming both otherwise.
Result<Role> parse_role(const std::string& text);

// What authorized_clients says after a client key. Limits count per key
// (Slurm's association limits); a limit left out here is the coordinator's
// default for every key (`cohort coordinator --max-gpus-per-key`,
// `--max-queued-per-key`).
struct ClientKeySettings {
  std::string name;  // shown as the owner of the key's jobs; "": the key's first characters
  // GPUs the key's running jobs may hold at once; kNoLimit: none; nullopt: the default.
  std::optional<int> max_gpus;
  // Jobs of the key that may wait in the queue at once; the same.
  std::optional<int> max_queued;
  static constexpr int kNoLimit = -1;
};

// What a socket needs to speak CURVE; `enabled == false` means plain TCP.
struct Security {
  bool enabled = false;
  KeyPair own;                                   // server: its pair; peer: its pair
  std::string server_public_key;                 // peers only
  std::map<std::string, Role> authorized_keys;   // servers only: public key → role
  // Servers only: agent keys restricted to node names (nodes=a,b in
  // authorized_agents); a key not listed here may register any free name.
  std::map<std::string, std::vector<std::string>> agent_node_names;
  // Servers only: client keys whose line in authorized_clients names an
  // owner or sets limits.
  std::map<std::string, ClientKeySettings> client_keys;
};

Result<KeyPair> generate_key_pair();

// The coordinator's folder; secrets get mode 0600. Refuses to overwrite keys.
Status write_coordinator_keys(const std::string& dir);
// A peer's folder for `role` (kAgent or kClient). With `authorize_dir` (a
// coordinator's folder): copies its server.public and appends the new public
// key to its authorized_agents or authorized_clients.
// `nodes` (agents only, with authorize_dir): the only node names the key may
// register. `client` (clients only, with authorize_dir): the owner's name
// and limits written after the key.
Status write_peer_keys(const std::string& dir, Role role, const std::string& authorize_dir = "",
                       const std::vector<std::string>& nodes = {}, const ClientKeySettings& client = {});

// A limit after a client key: "0" to "1000000", or "unlimited"
// (ClientKeySettings::kNoLimit). The error names `what` and the value.
Result<int> parse_client_limit(const std::string& what, const std::string& text);
// An owner's name: 1 to 64 letters, digits, '.', '_' or '-'.
bool is_owner_name(const std::string& name);

// The coordinator's view of its folder (server pair + both lists).
Result<Security> load_server_security(const std::string& dir);
// An agent's or client's view of DIR (its role's pair + server public key).
Result<Security> load_client_security(const std::string& dir, Role role);

// True for tcp://127.x.x.x, tcp://localhost, tcp://[::1], ipc:// and inproc://
// (the host is parsed as an address, not matched by prefix).
bool is_loopback_endpoint(const std::string& endpoint);

// The start rule: an error naming what to do when `endpoint` is not loopback,
// security is off and `insecure` was not given.
Status check_bind_allowed(const std::string& endpoint, const Security& security, bool insecure);

}  // namespace cohort::protocol
