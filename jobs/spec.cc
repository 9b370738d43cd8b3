#include "jobs/spec.h"

#include <charconv>

namespace cohort::jobs {

std::vector<std::string> default_lora_target_modules() { return {"q_proj", "v_proj"}; }

const char* to_string(JobKind kind) {
  switch (kind) {
    case JobKind::kTrain: return "train";
    case JobKind::kInfer: return "infer";
    case JobKind::kServe: return "serve";
    case JobKind::kCommand: return "command";
  }
  return "?";
}

const char* to_string(DeviceVisibility devices) {
  return devices == DeviceVisibility::kNode ? "node" : "own";
}

bool parse_job_kind(std::string_view name, JobKind* kind) {
  for (JobKind k : {JobKind::kTrain, JobKind::kInfer, JobKind::kServe, JobKind::kCommand}) {
    if (name == to_string(k)) return *kind = k, true;
  }
  return false;
}

bool parse_devices(std::string_view name, DeviceVisibility* devices) {
  for (DeviceVisibility d : {DeviceVisibility::kOwn, DeviceVisibility::kNode}) {
    if (name == to_string(d)) return *devices = d, true;
  }
  return false;
}

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp32: return "fp32";
  }
  return "?";
}

bool parse_precision(std::string_view name, Precision* precision) {
  for (Precision p : {Precision::kBf16, Precision::kFp16, Precision::kFp32}) {
    if (name == to_string(p)) return *precision = p, true;
  }
  return false;
}

bool parse_port_range(std::string_view text, PortRange* range, std::string* why) {
  auto number = [](std::string_view s, int* out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size() && !s.empty();
  };
  // Built by append: `"\"" + std::string` trips a GCC 12 -Wrestrict false positive.
  std::string shown;
  shown.append(1, '"').append(text).append(1, '"');
  auto dash = text.find('-');
  int first = 0, last = 0;
  bool ok = dash == std::string_view::npos ? number(text, &first) && (last = first, true)
                                           : number(text.substr(0, dash), &first) &&
                                                 number(text.substr(dash + 1), &last);
  if (!ok) {
    *why = shown + " is not a port range like \"29500-29999\"";
    return false;
  }
  // Below 1024 a port needs privileges no worker has.
  if (first < 1024 || last > 65535 || first > last) {
    *why = shown + " must be LO-HI with 1024 <= LO <= HI <= 65535";
    return false;
  }
  *range = PortRange{first, last};
  return true;
}

std::string to_string(const PortRange& range) {
  if (range.empty()) return "";
  return std::to_string(range.first) + "-" + std::to_string(range.last);
}

int JobSpec::effective_global_batch(int nodes) const {
  if (train.global_batch > 0) return train.global_batch;
  return train.micro_batch * data_parallel(nodes);
}

int JobSpec::accumulation_steps(int nodes) const {
  int per_step = train.micro_batch * data_parallel(nodes);
  if (per_step <= 0) return 0;
  int global = effective_global_batch(nodes);
  if (global % per_step != 0) return 0;
  return global / per_step;
}

bool parse_dependency(std::string_view text, Dependency* dependency, std::string* why) {
  std::string_view id = text, kind = "ok";
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    id = text.substr(0, colon);
    kind = text.substr(colon + 1);
  }
  bool plain_id = id.size() > 4 && id.substr(0, 4) == "job-" &&
                  id.find_first_not_of("0123456789", 4) == std::string_view::npos;
  if (!plain_id) {
    // Appended, not "'" + string: GCC 12 misreports -Wrestrict on that form.
    why->assign(1, '\'').append(text).append("' does not name a job id (\"job-3\", as `cohort submit` prints it)");
    return false;
  }
  if (kind == "ok") dependency->kind = DependencyKind::kOk;
  else if (kind == "any") dependency->kind = DependencyKind::kAny;
  else if (kind == "notok") dependency->kind = DependencyKind::kNotOk;
  else {
    why->assign(1, '\'').append(text).append(
        "': after the ':' comes ok (it succeeded), any (it ended) or notok (it did not succeed)");
    return false;
  }
  dependency->job_id = std::string(id);
  return true;
}

const char* to_string(DependencyKind kind) {
  switch (kind) {
    case DependencyKind::kOk: return "ok";
    case DependencyKind::kAny: return "any";
    case DependencyKind::kNotOk: return "notok";
  }
  return "ok";
}

}  // namespace cohort::jobs
