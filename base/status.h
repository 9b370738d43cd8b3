// Status and Result<T>: how library and daemon code reports failure.
//
// Daemons never die from what they receive, so the coordinator, agent and
// collective libraries return a Status (or a Result<T>) instead of throwing.
// A Status carries a code and a message that names what is at fault; callers
// add context as the error travels up (`status.with_context("loading job")`).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace cohort {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad input: a file, a message, a flag
  kNotFound,          // a job, node, key or file that does not exist
  kAlreadyExists,
  kFailedPrecondition,  // the operation does not fit the current state
  kTimeout,           // a deadline passed (store get, collective, placement)
  kUnavailable,       // a peer or service cannot be reached
  kPermissionDenied,  // authentication or authorisation refused
  kAborted,           // cancelled, or torn down by a peer's failure
  kInternal,          // a bug: an invariant did not hold
  kIo,                // the operating system said no (files, sockets, processes)
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "context: message", so the outermost caller's words come first.
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
  }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status timeout_error(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status permission_denied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIo, std::move(m)}; }
// An io_error whose message ends with strerror(errno).
Status errno_error(const std::string& what);

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_ = internal_error("Result holds no value and no error");
};

// The Status of a Result: ok when it holds a value (Result::status() is only
// meaningful on an error).
template <typename T>
Status status_of(const Result<T>& r) {
  return r.is_ok() ? Status::ok() : r.status();
}

}  // namespace cohort

// Returns early from the enclosing function when `expr` is not ok.
#define COHORT_RETURN_IF_ERROR(expr)              \
  do {                                            \
    ::cohort::Status cohort_status_ = (expr);     \
    if (!cohort_status_.is_ok()) return cohort_status_; \
  } while (0)

#define COHORT_CONCAT_INNER(a, b) a##b
#define COHORT_CONCAT(a, b) COHORT_CONCAT_INNER(a, b)
// `COHORT_ASSIGN_OR_RETURN(auto x, make_x());` binds x or returns the error.
#define COHORT_ASSIGN_OR_RETURN(lhs, expr) \
  COHORT_ASSIGN_OR_RETURN_IMPL(COHORT_CONCAT(cohort_result_, __LINE__), lhs, expr)
#define COHORT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
