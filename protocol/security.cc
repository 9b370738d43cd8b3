// CURVE key generation and loading, and the loopback rule.
#include "protocol/security.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <zmq.h>

namespace cohort::protocol {
namespace {

namespace fs = std::filesystem;

Status write_file(const fs::path& path, const std::string& text, bool secret) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return errno_error("cannot write " + path.string());
  out << text << "\n";
  out.close();
  if (!out) return errno_error("cannot write " + path.string());
  if (secret && ::chmod(path.c_str(), 0600) != 0) return errno_error("cannot chmod " + path.string());
  return Status::ok();
}

Result<std::string> read_key(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read key file " + path.string());
  std::string key;
  in >> key;
  if (key.size() != 40) {
    return invalid_argument(path.string() + " does not hold a 40-character Z85 CURVE key");
  }
  return key;
}

}  // namespace

Result<KeyPair> generate_key_pair() {
  char pub[41] = {};
  char sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return unavailable(std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()) +
                       " (libzmq built without CURVE?)");
  }
  return KeyPair{pub, sec};
}

Status write_key_directory(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create " + dir + ": " + ec.message());
  for (const char* name : {"server.secret", "client.secret"}) {
    if (fs::exists(fs::path(dir) / name)) {
      return failed_precondition(dir + " already holds keys; remove it or pick another directory");
    }
  }
  COHORT_ASSIGN_OR_RETURN(KeyPair server, generate_key_pair());
  COHORT_ASSIGN_OR_RETURN(KeyPair client, generate_key_pair());
  fs::path d(dir);
  COHORT_RETURN_IF_ERROR(write_file(d / "server.public", server.public_key, false));
  COHORT_RETURN_IF_ERROR(write_file(d / "server.secret", server.secret_key, true));
  COHORT_RETURN_IF_ERROR(write_file(d / "client.public", client.public_key, false));
  COHORT_RETURN_IF_ERROR(write_file(d / "client.secret", client.secret_key, true));
  return write_file(d / "authorized_keys", client.public_key, false);
}

Result<Security> load_server_security(const std::string& dir) {
  Security s;
  s.enabled = true;
  fs::path d(dir);
  COHORT_ASSIGN_OR_RETURN(s.own.public_key, read_key(d / "server.public"));
  COHORT_ASSIGN_OR_RETURN(s.own.secret_key, read_key(d / "server.secret"));
  std::ifstream in(d / "authorized_keys");
  if (!in) return not_found("cannot read " + (d / "authorized_keys").string());
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream words(line);
    std::string key;
    if (!(words >> key) || key[0] == '#') continue;
    if (key.size() != 40) {
      return invalid_argument((d / "authorized_keys").string() + ":" + std::to_string(number) +
                              ": not a 40-character Z85 public key");
    }
    s.authorized_keys.push_back(key);
  }
  if (s.authorized_keys.empty()) {
    return invalid_argument((d / "authorized_keys").string() + " lists no client keys");
  }
  return s;
}

Result<Security> load_client_security(const std::string& dir) {
  Security s;
  s.enabled = true;
  fs::path d(dir);
  COHORT_ASSIGN_OR_RETURN(s.own.public_key, read_key(d / "client.public"));
  COHORT_ASSIGN_OR_RETURN(s.own.secret_key, read_key(d / "client.secret"));
  COHORT_ASSIGN_OR_RETURN(s.server_public_key, read_key(d / "server.public"));
  return s;
}

bool is_loopback_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string host = endpoint.substr(6);
  if (host.rfind("[::1]", 0) == 0) return true;
  host = host.substr(0, host.rfind(':'));
  return host == "localhost" || host.rfind("127.", 0) == 0;
}

Status check_bind_allowed(const std::string& endpoint, const Security& security, bool insecure) {
  if (is_loopback_endpoint(endpoint) || security.enabled || insecure) return Status::ok();
  return permission_denied(
      "refusing to listen on " + endpoint +
      " without CURVE keys: anyone who can reach it could run code on every node. Create keys "
      "with `cohort keygen DIR` and pass --keys DIR to the coordinator, agents and clients, or "
      "pass --insecure on a trusted network");
}

}  // namespace cohort::protocol
