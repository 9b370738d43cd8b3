// CURVE key generation and loading, and the loopback rule.
#include "protocol/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>
#include <zmq.h>

#include "base/host_address.h"

namespace cohort::protocol {
namespace {

namespace fs = std::filesystem;

// A secret is created with mode 0600 (never readable by others, not even
// between create and chmod); an existing file gets the mode too.
Status write_file(const fs::path& path, const std::string& text, bool secret) {
  mode_t mode = secret ? 0600 : 0644;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return errno_error("cannot write " + path.string());
  std::string data = text + "\n";
  bool ok = ::fchmod(fd, mode) == 0 && ::write(fd, data.data(), data.size()) == ssize_t(data.size());
  Status status = ok ? Status::ok() : errno_error("cannot write " + path.string());
  if (::close(fd) != 0 && status) status = errno_error("cannot write " + path.string());
  return status;
}

// A secret key others can read (made by hand, or by an older cohort) is
// used, with a warning that says how to fix it.
void warn_if_exposed(const fs::path& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || (st.st_mode & 077) == 0) return;
  spdlog::warn("{} holds a secret key and is readable by others (mode {:04o}): chmod 600 {}", path.string(),
               st.st_mode & 07777, path.string());
}

// A folder that holds a secret key: created, then mode 0700.
Status make_key_folder(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create " + dir + ": " + ec.message());
  if (::chmod(dir.c_str(), 0700) != 0) return errno_error("cannot chmod 0700 " + dir);
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

const char* to_string(Role role) {
  switch (role) {
    case Role::kTrusted: return "trusted";
    case Role::kAgent: return "agent";
    case Role::kClient: return "client";
  }
  return "unknown";
}

Result<Role> parse_role(const std::string& text) {
  if (text == "agent") return Role::kAgent;
  if (text == "client") return Role::kClient;
  return invalid_argument("unknown role '" + text + "' (agent or client)");
}

namespace {

const char* list_name(Role role) {
  return role == Role::kAgent ? "authorized_agents" : "authorized_clients";
}

Status refuse_overwrite(const fs::path& d, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (fs::exists(d / name)) {
      return failed_precondition(d.string() + " already holds keys (" + name +
                                 "); remove it or pick another directory");
    }
  }
  return Status::ok();
}

// The words after a client key: name=NAME, max_gpus=N, max_queued=N.
Status parse_client_settings(const std::string& where, std::istringstream& words, ClientKeySettings* out) {
  for (std::string word; words >> word;) {
    if (word[0] == '#') break;  // the rest of the line is a comment
    auto eq = word.find('=');
    std::string key = word.substr(0, eq), value = eq == std::string::npos ? "" : word.substr(eq + 1);
    if (eq != std::string::npos && (key == "max_gpus" || key == "max_queued")) {
      auto limit = parse_client_limit(key, value);
      if (!limit) return invalid_argument(where + ": " + limit.status().message());
      (key == "max_gpus" ? out->max_gpus : out->max_queued) = *limit;
    } else if (eq != std::string::npos && key == "name") {
      if (!is_owner_name(value)) {
        return invalid_argument(where + ": name must be 1 to 64 letters, digits, '.', '_' or '-', not '" +
                                value.substr(0, 64) + "'");
      }
      out->name = value;
    } else {
      return invalid_argument(where + ": unknown setting '" + word.substr(0, 64) +
                              "' after a client key (name=NAME, max_gpus=N, max_queued=N)");
    }
  }
  return Status::ok();
}

Status read_list(const fs::path& path, Role role, Security* security) {
  std::map<std::string, Role>* out = &security->authorized_keys;
  std::ifstream in(path);
  if (!in) return Status::ok();  // a missing list authorizes nobody
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream words(line);
    std::string key;
    if (!(words >> key) || key[0] == '#') continue;
    if (key.size() != 40) {
      return invalid_argument(path.string() + ":" + std::to_string(number) +
                              ": not a 40-character Z85 public key");
    }
    if (auto [it, added] = out->emplace(key, role); !added && it->second != role) {
      return invalid_argument(path.string() + ":" + std::to_string(number) +
                              ": this key is listed as an agent and as a client; give it one role");
    }
    std::string where = path.string() + ":" + std::to_string(number);
    if (role == Role::kClient) {
      ClientKeySettings settings;
      COHORT_RETURN_IF_ERROR(parse_client_settings(where, words, &settings));
      if (!settings.name.empty() || settings.max_gpus || settings.max_queued) security->client_keys[key] = settings;
      continue;
    }
    std::string restriction;
    if (words >> restriction) {
      if (restriction.rfind("nodes=", 0) != 0 || restriction.size() == 6) {
        return invalid_argument(where + ": expected nodes=NAME[,NAME...] after the key, got '" +
                                restriction.substr(0, 64) + "'");
      }
      auto& names = security->agent_node_names[key];
      std::istringstream list(restriction.substr(6));
      for (std::string name; std::getline(list, name, ',');) {
        if (!name.empty()) names.push_back(name);
      }
    }
  }
  return Status::ok();
}

// The words written after a client key for `settings` ("" for none).
std::string client_key_words(const ClientKeySettings& settings) {
  std::string words;
  auto limit = [](int n) { return n == ClientKeySettings::kNoLimit ? std::string("unlimited") : std::to_string(n); };
  if (!settings.name.empty()) words += " name=" + settings.name;
  if (settings.max_gpus) words += " max_gpus=" + limit(*settings.max_gpus);
  if (settings.max_queued) words += " max_queued=" + limit(*settings.max_queued);
  return words;
}

}  // namespace

Result<int> parse_client_limit(const std::string& what, const std::string& text) {
  if (text == "unlimited") return ClientKeySettings::kNoLimit;
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || n < 0 || n > 1000000) {
    return invalid_argument(what + " must be a number from 0 to 1000000 or 'unlimited', not '" + text.substr(0, 64) +
                            "'");
  }
  return n;
}

bool is_owner_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
         });
}

Status write_coordinator_keys(const std::string& dir) {
  COHORT_RETURN_IF_ERROR(make_key_folder(dir));
  fs::path d(dir);
  COHORT_RETURN_IF_ERROR(refuse_overwrite(d, {"server.secret"}));
  COHORT_ASSIGN_OR_RETURN(KeyPair server, generate_key_pair());
  COHORT_RETURN_IF_ERROR(write_file(d / "server.public", server.public_key, false));
  COHORT_RETURN_IF_ERROR(write_file(d / "server.secret", server.secret_key, true));
  for (Role role : {Role::kAgent, Role::kClient}) {
    if (fs::exists(d / list_name(role))) continue;
    COHORT_RETURN_IF_ERROR(write_file(d / list_name(role),
                                      std::string("# ") + to_string(role) +
                                          " public keys, one a line (cohort keygen DIR --role " +
                                          to_string(role) + " --authorize " + dir + ")",
                                      false));
  }
  return Status::ok();
}

Status write_peer_keys(const std::string& dir, Role role, const std::string& authorize_dir,
                       const std::vector<std::string>& nodes, const ClientKeySettings& client) {
  if (role == Role::kTrusted) return invalid_argument("a key's role is agent or client");
  if (!nodes.empty() && (role != Role::kAgent || authorize_dir.empty())) {
    return invalid_argument("--nodes restricts an agent key: it goes with --role agent --authorize COORD");
  }
  const std::string words = client_key_words(client);
  if (!words.empty() && (role != Role::kClient || authorize_dir.empty())) {
    return invalid_argument("--name, --max-gpus and --max-queued describe a client key: they go with --role client "
                            "--authorize COORD");
  }
  if (!client.name.empty() && !is_owner_name(client.name)) {
    return invalid_argument("--name must be 1 to 64 letters, digits, '.', '_' or '-', not '" +
                            client.name.substr(0, 64) + "'");
  }
  for (const auto& n : nodes) {
    if (n.empty() || n.find_first_of(", \t\n") != std::string::npos) {
      return invalid_argument("--nodes: '" + n + "' is not a node name (names are separated by commas)");
    }
  }
  COHORT_RETURN_IF_ERROR(make_key_folder(dir));
  fs::path d(dir);
  std::string name = to_string(role);
  COHORT_RETURN_IF_ERROR(refuse_overwrite(d, {(name + ".secret").c_str()}));
  std::string server_public;
  if (!authorize_dir.empty()) {
    COHORT_ASSIGN_OR_RETURN(server_public, read_key(fs::path(authorize_dir) / "server.public"));
  }
  COHORT_ASSIGN_OR_RETURN(KeyPair pair, generate_key_pair());
  COHORT_RETURN_IF_ERROR(write_file(d / (name + ".public"), pair.public_key, false));
  COHORT_RETURN_IF_ERROR(write_file(d / (name + ".secret"), pair.secret_key, true));
  if (authorize_dir.empty()) return Status::ok();
  COHORT_RETURN_IF_ERROR(write_file(d / "server.public", server_public, false));
  fs::path list = fs::path(authorize_dir) / list_name(role);
  std::ofstream out(list, std::ios::app);
  out << pair.public_key << words;
  for (size_t i = 0; i < nodes.size(); ++i) out << (i == 0 ? " nodes=" : ",") << nodes[i];
  out << "\n";
  out.close();
  if (!out) return errno_error("cannot append to " + list.string());
  return Status::ok();
}

Result<Security> load_server_security(const std::string& dir) {
  Security s;
  s.enabled = true;
  fs::path d(dir);
  COHORT_ASSIGN_OR_RETURN(s.own.public_key, read_key(d / "server.public"));
  COHORT_ASSIGN_OR_RETURN(s.own.secret_key, read_key(d / "server.secret"));
  warn_if_exposed(d / "server.secret");
  for (Role role : {Role::kAgent, Role::kClient}) {
    COHORT_RETURN_IF_ERROR(read_list(d / list_name(role), role, &s));
  }
  if (s.authorized_keys.empty()) {
    return invalid_argument(dir + " authorizes no agent or client keys: create them with "
                            "`cohort keygen DIR --role agent --authorize " + dir + "` (and --role client)");
  }
  return s;
}

Result<Security> load_client_security(const std::string& dir, Role role) {
  Security s;
  s.enabled = true;
  fs::path d(dir);
  std::string name = to_string(role);
  auto pub = read_key(d / (name + ".public"));
  if (!pub) {
    return not_found(dir + " holds no " + name + " key (" + name + ".public): create one with "
                     "`cohort keygen " + dir + " --role " + name + " --authorize COORDINATOR_KEYS`");
  }
  s.own.public_key = *pub;
  COHORT_ASSIGN_OR_RETURN(s.own.secret_key, read_key(d / (name + ".secret")));
  warn_if_exposed(d / (name + ".secret"));
  COHORT_ASSIGN_OR_RETURN(s.server_public_key, read_key(d / "server.public"));
  return s;
}

bool is_loopback_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string rest = endpoint.substr(6);
  auto colon = rest.rfind(':');
  if (colon == std::string::npos) return false;
  std::string_view host(rest.data(), colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return is_loopback_host(host);
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
