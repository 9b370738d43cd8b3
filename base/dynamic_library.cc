#include "base/dynamic_library.h"

#include <dlfcn.h>

#include <utility>

namespace cohort {

Result<DynamicLibrary> DynamicLibrary::open(const std::string& file) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return unavailable("cannot load " + file + ": " + (why ? why : "unknown reason"));
  }
  return DynamicLibrary(handle, file);
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_) dlclose(handle_);
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), file_(std::move(other.file_)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    file_ = std::move(other.file_);
  }
  return *this;
}

void* DynamicLibrary::address(const char* name) const {
  return handle_ ? dlsym(handle_, name) : nullptr;
}

}  // namespace cohort
