// A job's page: summary and root cause, the attempts as a timeline and a
// table, where each rank runs, the training plots, the log tail with a rank
// filter, and the job's events.
#include <algorithm>

#include <fmt/format.h>

#include "coordinator/dashboard_html.h"
#include "coordinator/dashboard_page.h"
#include "coordinator/svg_chart.h"

namespace cohort::coordinator {
namespace {

using html::escape;

bool terminal(const std::string& state) { return state == "succeeded" || state == "failed" || state == "cancelled" ||
                                              state == "timed_out"; }

std::string summary(const JobView& j, const PageContext& context) {
  const auto& i = j.info;
  std::string out = "<section id=summary data-live><h2>" + escape(i.id) + " · " + escape(i.name) + " " +
                    html::badge(i.state) + "</h2>";
  if (terminal(i.state)) out += "<span id=final></span>";
  if (context.can_cancel && !terminal(i.state)) {
    out += "<form method=post action=\"/jobs/" + escape(i.id) +
           "/cancel\"><input type=hidden name=csrf value=\"" + escape(context.csrf) +
           "\"><button class=cancel type=submit>Cancel job</button></form>";
  }
  std::string nodes = i.nodes_min == i.nodes_max ? std::to_string(i.nodes_min)
                                                 : fmt::format("{}:{} (elastic)", i.nodes_min, i.nodes_max);
  int64_t end = i.ended_ms ? i.ended_ms : context.now_ms;
  out += "<table>";
  out += fmt::format("<tr><th>kind<td>{}<tr><th>nodes × GPUs<td>{} × {}<tr><th>restarts used<td>{} of {}",
                     escape(i.kind), nodes, i.gpus_per_node, i.restarts_used, i.max_restarts);
  out += fmt::format("<tr><th>submitted<td>{} UTC ({} ago)", html::clock(i.submitted_ms),
                     html::duration(context.now_ms - i.submitted_ms));
  if (i.ended_ms) out += fmt::format("<tr><th>ended<td>{} UTC, after {}", html::clock(i.ended_ms), html::duration(end - i.submitted_ms));
  if (auto p = j.training->latest()) {
    std::string of = j.total_steps > 0 ? fmt::format(" of {}", j.total_steps) : "";
    out += fmt::format("<tr><th>step<td id=step>{}{}", p->step, of);
    if (p->has(Figure::kLoss)) out += fmt::format("<tr><th>loss<td>{:.4f}", p->get(Figure::kLoss));
    if (p->has(Figure::kTokensPerSecond)) out += fmt::format("<tr><th>tokens/s<td>{:.0f}", p->get(Figure::kTokensPerSecond));
    if (p->has(Figure::kMfu)) out += fmt::format("<tr><th>MFU<td>{:.1f}%", p->get(Figure::kMfu) * 100);
  }
  if (auto e = j.training->latest_eval()) out += fmt::format("<tr><th>eval loss<td>{:.4f} (step {})", e->get(Figure::kEvalLoss), e->step);
  for (const auto& [label, value] : j.scheduling) out += "<tr><th>" + escape(label) + "<td>" + escape(value);
  out += "<tr><th>output<td><code>" + escape(i.output_dir) + "</code>";
  if (!i.message.empty()) out += "<tr><th>message<td>" + escape(i.message);
  out += "</table>";
  if (i.has_root_cause) {
    const auto& rc = i.root_cause;
    std::string exit = rc.signal ? fmt::format("signal {}", rc.signal) : fmt::format("exit code {}", rc.exit_code);
    out += "<h2>Root cause</h2><div class=rootcause id=rootcause><b>rank " + std::to_string(rc.rank) + "</b> on <b>" +
           escape(rc.node) + "</b>: " + escape(rc.reason) + " (" + exit + ")";
    if (!rc.last_lines.empty()) {
      out += "<p class=muted>its last lines:</p><pre>";
      for (const auto& l : rc.last_lines) out += escape(l) + "\n";
      out += "</pre>";
    }
    out += "</div>";
  }
  return out + "</section>";
}

// One bar per attempt over the job's life, coloured by how it ended.
std::string timeline(const protocol::JobInfo& i, int64_t now_ms) {
  if (i.attempts.empty()) return "";
  int64_t t0 = i.submitted_ms, t1 = i.ended_ms ? i.ended_ms : now_ms;
  if (t1 <= t0) t1 = t0 + 1;
  const double left = 80, width = 720, row = 18;
  double height = 24 + row * double(i.attempts.size());
  std::string out = fmt::format("<svg id=timeline class=chart width=\"{}\" height=\"{:.0f}\" viewBox=\"0 0 {} {:.0f}\" "
                                "xmlns=\"http://www.w3.org/2000/svg\">",
                                left + width + 10, height, left + width + 10, height);
  static const std::map<std::string, std::string> kColour = {{"running", "#2da44e"}, {"stopping", "#bf8700"},
                                                             {"succeeded", "#0969da"}, {"failed", "#cf222e"},
                                                             {"stopped", "#8c959f"}};
  auto x = [&](int64_t t) { return left + double(std::clamp(t, t0, t1) - t0) / double(t1 - t0) * width; };
  for (size_t k = 0; k < i.attempts.size(); ++k) {
    const auto& a = i.attempts[k];
    double y = 4 + row * double(k);
    auto colour = kColour.count(a.state) ? kColour.at(a.state) : "#8c959f";
    double xa = x(a.started_ms), xb = std::max(x(a.ended_ms ? a.ended_ms : now_ms), xa + 2);
    out += fmt::format("<text x=\"4\" y=\"{:.0f}\" class=tick>attempt {}</text><rect x=\"{:.1f}\" y=\"{:.0f}\" "
                       "width=\"{:.1f}\" height=\"12\" rx=\"2\" fill=\"{}\"><title>attempt {}: {} {}</title></rect>",
                       y + 10, a.number, xa, y, xb - xa, colour, a.number, escape(a.state), escape(a.reason));
  }
  out += fmt::format("<text x=\"{}\" y=\"{:.0f}\" class=tick>{}</text><text x=\"{}\" y=\"{:.0f}\" class=tick "
                     "text-anchor=end>{}</text></svg>",
                     left, height - 4, html::clock(t0), left + width, height - 4, html::clock(t1));
  return out;
}

std::string attempts(const JobView& j, int64_t now_ms) {
  const auto& i = j.info;
  std::string out = "<section id=attempts data-live><h2>Attempts</h2>" + timeline(i, now_ms) +
                    "<table><tr><th>#<th>state<th>nodes<th>ranks<th>started (UTC)<th>duration<th>restart<th>why it ended"
                    "<th>root cause";
  for (size_t k = 0; k < i.attempts.size(); ++k) {
    const auto& a = i.attempts[k];
    std::string nodes;
    for (const auto& n : a.nodes) nodes += (nodes.empty() ? "" : ", ") + escape(n);
    std::string rc;
    if (a.has_root_cause) {
      rc = fmt::format("rank {} on {}: {}", a.root_cause.rank, escape(a.root_cause.node), escape(a.root_cause.reason));
    }
    std::string kind = k == 0 ? "first" : a.counts_as_restart ? "counted" : "free (scale-up/recovery)";
    out += fmt::format("<tr><td class=num>{}<td>{}<td>{}<td class=num>{}<td>{}<td class=num>{}<td>{}<td>{}<td>{}",
                       a.number, html::badge(a.state), nodes, a.world_size, html::clock(a.started_ms),
                       html::duration((a.ended_ms ? a.ended_ms : now_ms) - a.started_ms), kind, escape(a.reason), rc);
  }
  if (i.attempts.empty()) out += "<tr><td colspan=9 class=muted>not started yet";
  return out + "</table></section>";
}

std::string ranks(const JobView& j) {
  std::string out = "<section id=ranks data-live><h2>Ranks" +
                    (j.attempt ? fmt::format(" (attempt {})", j.attempt) : std::string()) +
                    "</h2><table><tr><th>rank<th>node<th>GPU<th>state<th>exit";
  for (const auto& r : j.ranks) {
    out += fmt::format("<tr><td class=num>{}<td>{}<td class=num>{}<td>{}<td>{}", r.rank, escape(r.node),
                       r.gpu >= 0 ? std::to_string(r.gpu) : "", html::badge(r.state), escape(r.detail));
  }
  if (j.ranks.empty()) out += "<tr><td colspan=5 class=muted>no attempt yet";
  return out + "</table></section>";
}

ChartLine line(const std::vector<TrainingPoint>& points, const std::optional<TrainingPoint>& latest, Figure f,
               bool x_time, std::string label, std::string colour) {
  ChartLine l{std::move(label), std::move(colour), {}};
  auto add = [&](const TrainingPoint& p) {
    if (p.has(f) && (!x_time || p.time > 0)) l.points.push_back({x_time ? p.time : double(p.step), p.get(f)});
  };
  for (const auto& p : points) add(p);
  // The newest row may sit between kept points (TrainingSeries thins them).
  if (latest && (points.empty() || latest->step > points.back().step)) add(*latest);
  return l;
}

std::string plots(const JobView& j, const JobPageOptions& o) {
  const auto& t = *j.training;
  std::string base = "/jobs/" + escape(j.info.id) + (o.log_rank >= 0 ? fmt::format("?rank={}&amp;", o.log_rank) : "?");
  std::string out = "<section id=plots data-live><h2>Training</h2><div class=toolbar>x axis: " +
                    (o.x_time ? "<a href=\"" + base + "x=step\">step</a> <b>time</b>"
                              : "<b>step</b> <a href=\"" + base + "x=time\">time</a>") +
                    fmt::format(" <span class=muted>({} training rows kept, {} evaluations)</span></div><div class=charts>",
                                t.training().size(), t.evaluation().size());
  auto chart = [&](const std::string& id, const std::string& title, std::vector<ChartLine> lines, double scale = 1,
                   std::string unit = "") {
    ChartOptions c;
    c.id = id;
    c.title = title;
    c.x_is_time = o.x_time;
    c.y_scale = scale;
    c.y_unit = std::move(unit);
    out += svg_line_chart(c, lines);
  };
  chart("plot-loss", "loss",
        {line(t.training(), t.latest(), Figure::kLoss, o.x_time, "loss", "#0969da"),
         line(t.evaluation(), t.latest_eval(), Figure::kEvalLoss, o.x_time, "eval loss", "#cf222e")});
  chart("plot-lr", "learning rate", {line(t.training(), t.latest(), Figure::kLearningRate, o.x_time, "lr", "#8250df")});
  chart("plot-tokens", "tokens/s",
        {line(t.training(), t.latest(), Figure::kTokensPerSecond, o.x_time, "tokens/s", "#1a7f37")});
  chart("plot-mfu", "MFU", {line(t.training(), t.latest(), Figure::kMfu, o.x_time, "MFU", "#bf8700")}, 100, "%");
  return out + "</div></section>";
}

std::string log_tail(const JobView& j, const protocol::LogReply& tail, const JobPageOptions& o) {
  if (!o.log_hidden.empty()) return "<h2>Log</h2><p class=muted id=log-hidden>" + escape(o.log_hidden) + "</p>";
  std::string out = "<h2>Log</h2><form class=toolbar method=get action=\"/jobs/" + escape(j.info.id) +
                    "\"><label>rank <select name=rank id=rank-filter onchange=\"this.form.submit()\">"
                    "<option value=\"-1\">all</option>";
  int world = j.ranks.empty() ? 0 : int(j.ranks.size());
  for (int r = 0; r < std::min(world, 1024); ++r) {
    out += fmt::format("<option value=\"{}\"{}>{}</option>", r, r == o.log_rank ? " selected" : "", r);
  }
  out += "</select></label>";
  if (o.x_time) out += "<input type=hidden name=x value=time>";
  out += "<noscript><button type=submit>show</button></noscript></form>";
  out += fmt::format("<pre id=log data-job=\"{}\" data-rank=\"{}\" data-after=\"{}\" data-finished=\"{}\">",
                     escape(j.info.id), o.log_rank, tail.last_seq, tail.job_finished ? 1 : 0);
  for (const auto& l : tail.lines) out += escape(fmt::format("[rank {}] {}", l.rank, l.text)) + "\n";
  if (tail.lines.empty()) out += "<span class=muted>no log lines yet</span>";
  return out + "</pre>";
}

std::string events(const protocol::JobInfo& i) {
  std::string out = "<section id=events data-live><h2>Events</h2><table><tr><th>time (UTC)<th>event";
  size_t from = i.events.size() > 50 ? i.events.size() - 50 : 0;
  for (size_t k = i.events.size(); k-- > from;) {
    out += "<tr><td>" + html::clock(i.events[k].time_ms) + "<td>" + escape(i.events[k].text);
  }
  return out + "</table></section>";
}

// Appends new lines from /api/jobs/<id>/logs; keeps the newest 2,000 and
// the view pinned to the bottom unless the reader scrolled up.
constexpr const char* kLogScript = R"js(
(function(){const pre=document.getElementById('log');if(!pre)return;let after=pre.dataset.after;
const rank=pre.dataset.rank;pre.scrollTop=pre.scrollHeight;let idle=0;
const poll=async()=>{try{
const u='/api/jobs/'+encodeURIComponent(pre.dataset.job)+'/logs?tail=500&after='+after+(rank>=0?'&rank='+rank:'');
const r=await fetch(u,{cache:'no-store'});if(r.ok){const j=await r.json();
const pinned=pre.scrollTop+pre.clientHeight>=pre.scrollHeight-4;
if(j.lines.length){const m=pre.querySelector('.muted');if(m)m.remove();
pre.append(j.lines.map(l=>'[rank '+l.rank+'] '+l.text+'\n').join(''));
const n=pre.textContent.split('\n');if(n.length>2000)pre.textContent=n.slice(-2000).join('\n');}
after=j.last_seq;if(pinned)pre.scrollTop=pre.scrollHeight;
if(j.job_finished&&!j.lines.length&&++idle>2)return;}
}catch(e){}setTimeout(poll,1000);};setTimeout(poll,1000);})();
)js";

}  // namespace

std::string job_page(const JobView& j, const protocol::LogReply& log, const JobPageOptions& o,
                     const PageContext& context) {
  std::string out = html::page_start(j.info.id + " · " + j.info.name);
  out += summary(j, context);
  if (j.info.kind == "train") out += plots(j, o);
  out += attempts(j, context.now_ms);
  out += ranks(j);
  out += log_tail(j, log, o);
  out += events(j.info);
  return out + html::page_end(std::string(html::kRefreshScript) + "cohortRefresh(2000);" + kLogScript);
}

}  // namespace cohort::coordinator
