// ZeroMQ CURVE keys and the rule for when they are required.
//
// Submitting a job runs code on every node, so a coordinator bound to anything
// but a loopback address must authenticate its peers: it holds a server key
// pair and accepts only the client public keys it was given (agents and CLI
// clients alike). `cohort keygen DIR` writes a directory that both sides read:
//
//   DIR/server.public  DIR/server.secret    the coordinator's pair
//   DIR/client.public  DIR/client.secret    one pair for agents and clients
//   DIR/authorized_keys                      client public keys, one a line
//
// More clients are admitted by appending their public key to authorized_keys.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::protocol {

struct KeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;
};

// What a socket needs to speak CURVE; `enabled == false` means plain TCP.
struct Security {
  bool enabled = false;
  KeyPair own;                                // server: its pair; client: its pair
  std::string server_public_key;              // clients only
  std::vector<std::string> authorized_keys;   // servers only
};

Result<KeyPair> generate_key_pair();

// Writes the directory described above; secrets get mode 0600. Refuses to
// overwrite existing keys.
Status write_key_directory(const std::string& dir);

// The coordinator's view of DIR (server pair + authorized_keys).
Result<Security> load_server_security(const std::string& dir);
// An agent's or client's view of DIR (client pair + server public key).
Result<Security> load_client_security(const std::string& dir);

// True for tcp://127.x.x.x, tcp://localhost, tcp://[::1], ipc:// and inproc://.
bool is_loopback_endpoint(const std::string& endpoint);

// The start rule: an error naming what to do when `endpoint` is not loopback,
// security is off and `insecure` was not given.
Status check_bind_allowed(const std::string& endpoint, const Security& security, bool insecure);

}  // namespace cohort::protocol
