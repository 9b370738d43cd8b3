// CHECK: invariants that, when broken, mean a bug in cohort itself.
//
// A failed CHECK logs file:line and the condition, then aborts. Use it for
// what cannot happen; use Status for what can (bad input, lost peers).
#pragma once

#include <cstdlib>

#include <spdlog/spdlog.h>

#define COHORT_CHECK(cond)                                                            \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      spdlog::critical("CHECK failed at {}:{}: {}", __FILE__, __LINE__, #cond);      \
      spdlog::default_logger()->flush();                                              \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#define COHORT_CHECK_MSG(cond, ...)                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      spdlog::critical("CHECK failed at {}:{}: {}: {}", __FILE__, __LINE__, #cond,   \
                       fmt::format(__VA_ARGS__));                                     \
      spdlog::default_logger()->flush();                                              \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
