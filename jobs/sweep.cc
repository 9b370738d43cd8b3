// Sweeps: parsing --sweep arguments and the grid of their points.
#include "jobs/sweep.h"

#include <charconv>

namespace cohort::jobs {
namespace {

bool parse_int(const std::string& text, int64_t* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

}  // namespace

Result<SweepAxis> parse_sweep(const std::string& arg) {
  auto eq = arg.find('=');
  auto bad = [&](const std::string& why) {
    return invalid_argument("--sweep " + arg + ": " + why +
                            " (write KEY=V1,V2,... or KEY=LO..HI, e.g. --sweep train.lr=1e-4,3e-4)");
  };
  if (eq == std::string::npos || eq == 0) return bad("no KEY=");
  SweepAxis axis;
  axis.key = arg.substr(0, eq);
  std::string values = arg.substr(eq + 1);
  if (auto dots = values.find(".."); dots != std::string::npos) {
    int64_t lo = 0, hi = 0;
    if (!parse_int(values.substr(0, dots), &lo) || !parse_int(values.substr(dots + 2), &hi)) {
      return bad("a range takes integers");
    }
    if (hi < lo) return bad("the range ends before it starts");
    if (hi - lo >= int64_t(kMaxSweepPoints)) return bad("more than " + std::to_string(kMaxSweepPoints) + " values");
    for (int64_t v = lo; v <= hi; ++v) axis.values.push_back(std::to_string(v));
    return axis;
  }
  size_t start = 0;
  while (start <= values.size()) {
    size_t comma = values.find(',', start);
    std::string value = values.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (value.empty()) return bad("an empty value");
    axis.values.push_back(value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return axis;
}

Result<std::vector<std::vector<Override>>> sweep_points(const std::vector<SweepAxis>& axes) {
  std::vector<std::vector<Override>> points = {{}};
  for (const auto& axis : axes) {
    if (points.size() * axis.values.size() > kMaxSweepPoints) {
      return invalid_argument("the sweep has more than " + std::to_string(kMaxSweepPoints) + " points");
    }
    std::vector<std::vector<Override>> next;
    for (const auto& point : points) {
      for (const auto& value : axis.values) {
        next.push_back(point);
        next.back().push_back(Override{axis.key, value});
      }
    }
    points = std::move(next);
  }
  return points;
}

void apply_sweep_point(int index, JobSpec* spec) {
  // Appended piece by piece: GCC 12 misreads "lit" + std::string as overlapping copies (-Wrestrict).
  spec->job.name.append("-").append(std::to_string(index));
  spec->job.output_dir.append("/sweep-").append(std::to_string(index));
}

}  // namespace cohort::jobs
