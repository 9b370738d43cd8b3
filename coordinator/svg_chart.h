// Line charts as inline SVG, drawn by the server: the job page's plots work
// without JavaScript and need no charting library in the binary. Each chart
// is a few kB: at most a TrainingSeries' 2,000 points per line, dots only
// where a line has few points.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cohort::coordinator {

struct ChartLine {
  std::string label;
  std::string colour;  // CSS colour
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct ChartOptions {
  std::string id;     // the svg element's id
  std::string title;  // above the plot
  bool x_is_time = false;  // x in unix seconds: labelled HH:MM:SS (UTC)
  std::string x_label = "step";
  double y_scale = 1;      // values are multiplied by this for display (100: a percentage)
  std::string y_unit;      // appended to the y labels ("%")
  int width = 520;
  int height = 220;
};

std::string svg_line_chart(const ChartOptions& options, const std::vector<ChartLine>& lines);

}  // namespace cohort::coordinator
