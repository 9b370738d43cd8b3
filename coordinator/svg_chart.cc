#include "coordinator/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>

#include <fmt/format.h>

#include "coordinator/dashboard_html.h"  // escape: one HTML escaper for the pages and charts

namespace cohort::coordinator {
namespace {

using html::escape;

// About `target` round ticks (1, 2 or 5 times a power of ten) over [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target) {
  double span = hi - lo;
  if (!(span > 0)) return {lo};
  double raw = span / target;
  double power = std::pow(10, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * power;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9 && ticks.size() < 20; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  }
  return ticks;
}

std::string clock_label(double unix_s) {
  std::time_t t = std::time_t(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string value_label(double v, const std::string& unit) {
  double a = std::abs(v);
  std::string s = a >= 1e6 ? fmt::format("{:.3g}M", v / 1e6)
                  : a >= 1e3 ? fmt::format("{:.3g}k", v / 1e3)
                             : fmt::format("{:.3g}", v);
  return s + unit;
}

}  // namespace

std::string svg_line_chart(const ChartOptions& o, const std::vector<ChartLine>& lines) {
  const double left = 58, right = 12, top = 26, bottom = 34;
  const double pw = o.width - left - right, ph = o.height - top - bottom;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  size_t total = 0;
  for (const auto& line : lines) {
    for (auto [x, y] : line.points) {
      y *= o.y_scale;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      ++total;
    }
  }
  std::string out = fmt::format(
      "<svg id=\"{}\" class=\"chart\" data-points=\"{}\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" "
      "role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">",
      escape(o.id), total, o.width, o.height, o.width, o.height, escape(o.title));
  out += fmt::format("<text x=\"{}\" y=\"16\" class=\"ct\">{}</text>", left, escape(o.title));
  if (total == 0) {
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>"
                       "<text x=\"{}\" y=\"{}\" class=\"empty\" text-anchor=\"middle\">none reported yet</text></svg>",
                       left, top, pw, ph, left + pw / 2, top + ph / 2);
    return out;
  }
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) {
    double pad = std::abs(y0) > 0 ? std::abs(y0) * 0.05 : 1;
    y0 -= pad, y1 += pad;
  } else {
    double pad = (y1 - y0) * 0.05;
    y0 -= pad, y1 += pad;
  }
  auto sx = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto sy = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"frame\"/>", left, top, pw, ph);
  for (double t : nice_ticks(y0, y1, 4)) {
    out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">{}</text>",
                       left, left + pw, sy(t), sy(t), left - 4, sy(t) + 4, value_label(t, o.y_unit));
  }
  for (double t : nice_ticks(x0, x1, o.x_is_time ? 4 : 5)) {
    std::string label = o.x_is_time ? clock_label(t) : value_label(t, "");
    out += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\" class=\"grid\"/>"
                       "<text x=\"{:.1f}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">{}</text>",
                       sx(t), sx(t), top, top + ph, sx(t), top + ph + 14, label);
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">{}</text>", left + pw / 2,
                     o.height - 4, escape(o.x_is_time ? "time (UTC)" : o.x_label));
  double legend_x = left + pw;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (it->points.empty()) continue;
    out += fmt::format("<text x=\"{:.0f}\" y=\"16\" class=\"legend\" text-anchor=\"end\" fill=\"{}\">&#9632; {}</text>",
                       legend_x, escape(it->colour), escape(it->label));
    legend_x -= 14 + 7.0 * double(it->label.size());
  }
  for (const auto& line : lines) {
    if (line.points.empty()) continue;
    std::string pts;
    pts.reserve(line.points.size() * 14);
    for (auto [x, y] : line.points) pts += fmt::format("{:.1f},{:.1f} ", sx(x), sy(y * o.y_scale));
    out += fmt::format("<polyline class=\"line\" data-label=\"{}\" data-points=\"{}\" stroke=\"{}\" points=\"{}\"/>",
                       escape(line.label), line.points.size(), escape(line.colour), pts);
    if (line.points.size() <= 120) {
      for (auto [x, y] : line.points) {
        out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>", sx(x), sy(y * o.y_scale),
                           escape(line.colour));
      }
    }
  }
  return out + "</svg>";
}

}  // namespace cohort::coordinator
