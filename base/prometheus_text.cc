// PrometheusText (see prometheus_text.h).
#include "base/prometheus_text.h"

#include <cmath>

#include <fmt/format.h>

namespace cohort {
namespace {

std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

std::string PrometheusText::number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

void PrometheusText::family(const std::string& name, const char* type, const std::string& help) {
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void PrometheusText::sample(const std::string& name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      out_ += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].first, escape_label(labels[i].second));
    }
    out_ += '}';
  }
  out_ += ' ' + number(value) + '\n';
}

void PrometheusText::histogram(const std::string& name, const Labels& labels, const std::vector<double>& bounds,
                               const std::vector<int64_t>& counts, double sum) {
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += i < counts.size() ? counts[i] : 0;
    Labels with_le = labels;
    with_le.emplace_back("le", number(bounds[i]));
    sample(name + "_bucket", with_le, double(cumulative));
  }
  if (counts.size() > bounds.size()) cumulative += counts[bounds.size()];
  Labels inf = labels;
  inf.emplace_back("le", "+Inf");
  sample(name + "_bucket", inf, double(cumulative));
  sample(name + "_sum", labels, sum);
  sample(name + "_count", labels, double(cumulative));
}

}  // namespace cohort
