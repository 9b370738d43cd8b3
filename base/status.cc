#include "base/status.h"

#include <cerrno>
#include <cstring>

namespace cohort {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kAlreadyExists: return "already exists";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kPermissionDenied: return "permission denied";
    case StatusCode::kAborted: return "aborted";
    case StatusCode::kInternal: return "internal error";
    case StatusCode::kIo: return "i/o error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status errno_error(const std::string& what) {
  return io_error(what + ": " + std::strerror(errno));
}

}  // namespace cohort
