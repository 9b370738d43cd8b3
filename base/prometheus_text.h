// Prometheus' text exposition format (version 0.0.4), written one metric
// family at a time: the one writer behind the coordinator's /metrics and the
// inference server's. Label values are escaped (backslash, double quote,
// newline); numbers print NaN and ±Inf as Prometheus spells them.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cohort {

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // "# HELP" and "# TYPE" lines; `type` is counter, gauge or histogram.
  void family(const std::string& name, const char* type, const std::string& help);
  void sample(const std::string& name, const Labels& labels, double value);
  void sample(const std::string& name, double value) { sample(name, {}, value); }
  // A histogram's samples: cumulative `_bucket{le=...}` per upper bound, the
  // +Inf bucket, `_sum` and `_count`. counts[i] counts the observations in
  // (bounds[i-1], bounds[i]]; counts has one more entry (beyond the last bound).
  void histogram(const std::string& name, const Labels& labels, const std::vector<double>& bounds,
                 const std::vector<int64_t>& counts, double sum);

  static std::string number(double value);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace cohort
