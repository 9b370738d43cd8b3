// A shared library opened at run time (dlopen), for the optional native
// libraries cohort uses without linking them: NVML in the agent (hosts
// without the NVIDIA driver still run the control plane) and cuDNN in the
// worker (builds and hosts without it still train). Closed with its owner.
#pragma once

#include <string>

#include "base/status.h"

namespace cohort {

class DynamicLibrary {
 public:
  // Opens `file` (a name the loader searches for, or a path); the error
  // names the file and carries the loader's reason.
  static Result<DynamicLibrary> open(const std::string& file);

  DynamicLibrary() = default;
  ~DynamicLibrary();
  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  bool is_open() const { return handle_ != nullptr; }
  const std::string& file() const { return file_; }

  // Sets *fn to the symbol, or to null and returns false when the library
  // has none by that name (an optional entry point).
  template <typename Fn>
  bool find(const char* name, Fn* fn) const {
    *fn = reinterpret_cast<Fn>(address(name));
    return *fn != nullptr;
  }
  // The same for an entry point the caller cannot do without: the error
  // names the library and the symbol.
  template <typename Fn>
  Status require(const char* name, Fn* fn) const {
    return find(name, fn) ? Status::ok() : unavailable(file_ + " has no symbol " + name);
  }

 private:
  DynamicLibrary(void* handle, std::string file) : handle_(handle), file_(std::move(file)) {}
  void* address(const char* name) const;
  void* handle_ = nullptr;
  std::string file_;
};

}  // namespace cohort
