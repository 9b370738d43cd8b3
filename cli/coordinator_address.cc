// Address normalisation for --coordinator, $COHORT_COORDINATOR and --listen.
#include "cli/coordinator_address.h"

#include <cctype>

#include "base/env_knobs.h"
#include "protocol/client.h"

namespace cohort::cli {
namespace {

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "HOST:PORT" with a non-empty host ("[v6]" allowed) and a port 0..65535 or *.
bool is_host_port(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || s.find('/') != std::string::npos) return false;
  const std::string host = s.substr(0, colon), port = s.substr(colon + 1);
  if (host.find(':') != std::string::npos && (host.front() != '[' || host.back() != ']'))
    return false;
  if (port == "*") return true;
  return all_digits(port) && port.size() <= 5 && std::stoi(port) <= 65535;
}

}  // namespace

Result<std::string> normalize_endpoint(const std::string& text, const std::string& what) {
  const std::string example = "tcp://HOST:PORT, e.g. tcp://10.0.0.1:7070";
  if (text.empty()) return invalid_argument(what + " is empty; give an address: " + example);
  const auto scheme_end = text.find("://");
  if (scheme_end == std::string::npos) {
    if (is_host_port(text)) return "tcp://" + text;
    if (text.find('/') != std::string::npos) {
      return invalid_argument(what + " '" + text + "': a socket path is written ipc://" + text +
                              "; a network address " + example);
    }
    return invalid_argument(what + " '" + text + "' has no port; write " + example);
  }
  const std::string scheme = text.substr(0, scheme_end), rest = text.substr(scheme_end + 3);
  if (scheme == "ipc" || scheme == "inproc") {
    if (rest.empty())
      return invalid_argument(what + " '" + text + "': " + scheme + ":// needs a name");
    return text;
  }
  if (scheme != "tcp") {
    return invalid_argument(what + " '" + text +
                            "': cohort speaks tcp:// (or ipc:// on one host), not " + scheme +
                            "://; write " + example);
  }
  if (!is_host_port(rest)) return invalid_argument(what + " '" + text + "' is not " + example);
  return text;
}

Result<std::string> coordinator_endpoint(const std::string& flag) {
  if (!flag.empty()) return normalize_endpoint(flag, "--coordinator");
  if (const char* env = read_env_knob(EnvKnob::kCoordinator)) {
    return normalize_endpoint(env, std::string("$") + env_knob_name(EnvKnob::kCoordinator));
  }
  return protocol::default_coordinator("");
}

}  // namespace cohort::cli
