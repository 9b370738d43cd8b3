// The cluster page: nodes, GPUs with the job that holds each, the queue in
// the order the scheduler will take it, and every job with its progress.
#include "coordinator/dashboard_page.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "coordinator/dashboard_html.h"

namespace cohort::coordinator {
namespace {

using html::escape;


std::string gib(uint64_t bytes) { return fmt::format("{:.1f} GiB", double(bytes) / double(1ull << 30)); }

std::string job_link(const std::string& id) {
  return "<a href=\"/jobs/" + escape(id) + "\">" + escape(id) + "</a>";
}

std::string progress_cell(const JobView& j) {
  auto p = j.training->latest();
  if (!p) return "";
  std::string out = fmt::format("{}", p->step);
  if (j.total_steps > 0) {
    double share = std::clamp(double(p->step) / double(j.total_steps), 0.0, 1.0);
    out = fmt::format("<span class=bar><span style=\"width:{:.0f}%\"></span></span> {} / {}", share * 100, p->step,
                      j.total_steps);
  }
  return out;
}

std::string nodes_table(const std::vector<protocol::NodeInfo>& nodes) {
  std::string out = "<h2>Nodes</h2><table id=nodes data-live><tr><th>node<th>state<th>address<th>GPUs free"
                    "<th>last heartbeat<th>jobs";
  for (const auto& n : nodes) {
    std::string jobs;
    for (const auto& j : n.jobs) jobs += (jobs.empty() ? "" : ", ") + job_link(j);
    out += fmt::format("<tr><td>{}<td>{}<td>{}<td class=num>{} of {}<td class=num>{:.1f} s ago<td>{}",
                       escape(n.name),
                       html::badge(n.state) +
                           (n.drain_reason.empty() ? "" : " <span class=muted>" + escape(n.drain_reason) + "</span>"),
                       escape(n.address), n.gpus_free, n.gpus.size(),
                       double(n.heartbeat_age_ms) / 1e3, jobs);
  }
  if (nodes.empty()) out += "<tr><td colspan=6 class=muted>no node has registered";
  return out + "</table>";
}

std::string gpus_table(const std::vector<JobView>& jobs, const std::vector<protocol::NodeInfo>& nodes) {
  // (node, gpu) → "job-3 rank 1" for ranks of active attempts.
  std::map<std::pair<std::string, int>, std::string> holder;
  for (const auto& j : jobs) {
    if (j.info.state != "running" && j.info.state != "stopping") continue;
    for (const auto& r : j.ranks) {
      if (r.state == "exited") continue;
      holder[{r.node, r.gpu}] = job_link(j.info.id) + fmt::format(" rank {}", r.rank);
    }
  }
  std::string out = "<h2>GPUs</h2><table id=gpus data-live><tr><th>node<th>GPU<th>name<th>memory<th>in use"
                    "<th>utilisation<th>held by";
  for (const auto& n : nodes) {
    for (const auto& g : n.gpus) {
      std::string used = "<span class=muted>n/a</span>", util = used;
      for (const auto& s : n.gpu_samples) {
        if (s.index != g.index) continue;
        used = gib(s.memory_used_bytes);
        util = fmt::format("<span class=bar><span style=\"width:{:.0f}%\"></span></span> {:.0f}%",
                           s.utilization * 100, s.utilization * 100);
      }
      auto h = holder.find({n.name, g.index});
      out += fmt::format("<tr><td>{}<td class=num>{}<td>{}<td class=num>{}<td class=num>{}<td>{}<td>{}", escape(n.name),
                         g.index, escape(g.name), g.memory_bytes ? gib(g.memory_bytes) : "", used, util,
                         h == holder.end() ? "<span class=muted>free</span>" : h->second);
    }
  }
  return out + "</table>";
}

std::string queue_table(const std::vector<JobView>& jobs, int64_t now_ms) {
  std::vector<const JobView*> queued;
  for (const auto& j : jobs) {
    if (j.info.state == "queued") queued.push_back(&j);
  }
  // The scheduler's order: priority first, then submission.
  std::stable_sort(queued.begin(), queued.end(),
                   [](auto* a, auto* b) { return a->info.priority > b->info.priority; });
  std::string out = "<h2>Queue</h2><table id=queue data-live><tr><th>#<th>job<th>name<th>priority<th>needs"
                    "<th>waiting<th>why";
  int position = 0;
  for (const JobView* j : queued) {
    const auto& i = j->info;
    std::string nodes = i.nodes_min == i.nodes_max ? std::to_string(i.nodes_min)
                                                   : fmt::format("{}:{}", i.nodes_min, i.nodes_max);
    out += fmt::format("<tr><td class=num>{}<td>{}<td>{}<td class=num>{}<td>{} node(s) × {} GPU(s)<td class=num>{}<td>{}",
                       ++position, job_link(i.id), escape(i.name), i.priority, nodes, i.gpus_per_node,
                       html::duration(now_ms - i.submitted_ms), escape(i.message));
  }
  if (queued.empty()) out += "<tr><td colspan=7 class=muted>no job is waiting";
  return out + "</table>";
}

std::string jobs_table(const std::vector<JobView>& jobs) {
  std::string out = "<h2>Jobs</h2><table id=jobs data-live><tr><th>job<th>name<th>kind<th>state<th>step"
                    "<th>loss<th>tokens/s<th>attempts<th>restarts<th>message";
  for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) {  // newest first
    const auto& i = it->info;
    auto p = it->training->latest();
    std::string loss = p && p->has(Figure::kLoss) ? fmt::format("{:.4f}", p->get(Figure::kLoss)) : "";
    std::string tps = p && p->has(Figure::kTokensPerSecond) ? fmt::format("{:.0f}", p->get(Figure::kTokensPerSecond)) : "";
    out += fmt::format("<tr><td>{}<td>{}<td>{}<td>{}<td>{}<td class=num>{}<td class=num>{}<td class=num>{}"
                       "<td class=num>{} of {}<td>{}",
                       job_link(i.id), escape(i.name), escape(i.kind), html::badge(i.state), progress_cell(*it), loss,
                       tps, i.attempts.size(), i.restarts_used, i.max_restarts, escape(i.message));
  }
  if (jobs.empty()) out += "<tr><td colspan=10 class=muted>no job yet: <code>cohort submit JOB.toml</code>";
  return out + "</table>";
}

}  // namespace

std::string cluster_page(const std::vector<JobView>& jobs, const std::vector<protocol::NodeInfo>& nodes,
                         const PageContext& context) {
  std::string out = html::page_start("cluster");
  out += nodes_table(nodes);
  out += gpus_table(jobs, nodes);
  out += queue_table(jobs, context.now_ms);
  out += jobs_table(jobs);
  out += "<p class=muted>JSON: <a href=\"/api/jobs\">/api/jobs</a> · <a href=\"/api/nodes\">/api/nodes</a> · "
         "Prometheus: <a href=\"/metrics\">/metrics</a></p>";
  return out + html::page_end(std::string(html::kRefreshScript) + "cohortRefresh(2000);");
}

}  // namespace cohort::coordinator
