// How a schema row reaches its JobSpec member: the FieldType a member's C++
// type has in the job file, and the conversions between the member and a
// FieldValue. Private to jobs/ (schema.cc builds its rows with `bind`).
#pragma once

#include <string>
#include <type_traits>

#include "base/strategy.h"
#include "jobs/schema.h"

namespace cohort::jobs::binding {

// ---- member → FieldValue --------------------------------------------------

inline FieldValue to_value(const std::string& v) { return v; }
inline FieldValue to_value(int v) { return int64_t(v); }
inline FieldValue to_value(int64_t v) { return v; }
inline FieldValue to_value(double v) { return v; }
inline FieldValue to_value(bool v) { return v; }
inline FieldValue to_value(const NodeRange& v) { return v; }
inline FieldValue to_value(const std::map<std::string, std::string>& v) { return v; }
inline FieldValue to_value(const std::vector<std::string>& v) { return v; }
inline FieldValue to_value(const std::vector<DataSource>& v) { return v; }
inline FieldValue to_value(JobKind v) { return std::string(to_string(v)); }
inline FieldValue to_value(DeviceVisibility v) { return std::string(to_string(v)); }
inline FieldValue to_value(Precision v) { return std::string(to_string(v)); }
inline FieldValue to_value(Strategy v) { return std::string(strategy_name(v)); }

// ---- FieldValue → member (the loader has checked type, range and choice) ----

inline void from_value(const FieldValue& v, std::string* out) { *out = std::get<std::string>(v); }
inline void from_value(const FieldValue& v, int* out) { *out = int(std::get<int64_t>(v)); }
inline void from_value(const FieldValue& v, int64_t* out) { *out = std::get<int64_t>(v); }
inline void from_value(const FieldValue& v, double* out) { *out = std::get<double>(v); }
inline void from_value(const FieldValue& v, bool* out) { *out = std::get<bool>(v); }
inline void from_value(const FieldValue& v, NodeRange* out) { *out = std::get<NodeRange>(v); }
inline void from_value(const FieldValue& v, std::map<std::string, std::string>* out) {
  *out = std::get<std::map<std::string, std::string>>(v);
}
inline void from_value(const FieldValue& v, std::vector<std::string>* out) {
  *out = std::get<std::vector<std::string>>(v);
}
inline void from_value(const FieldValue& v, std::vector<DataSource>* out) {
  *out = std::get<std::vector<DataSource>>(v);
}
inline void from_value(const FieldValue& v, JobKind* out) { parse_job_kind(std::get<std::string>(v), out); }
inline void from_value(const FieldValue& v, DeviceVisibility* out) { parse_devices(std::get<std::string>(v), out); }
inline void from_value(const FieldValue& v, Precision* out) { parse_precision(std::get<std::string>(v), out); }
inline void from_value(const FieldValue& v, Strategy* out) {
  if (auto s = parse_strategy(std::get<std::string>(v))) *out = *s;
}

// ---- the job file's type of a member, and an enum's spellings --------------

template <class M>
constexpr FieldType type_of() {
  if constexpr (std::is_same_v<M, std::string>) return FieldType::kString;
  else if constexpr (std::is_same_v<M, bool>) return FieldType::kBool;
  else if constexpr (std::is_integral_v<M>) return FieldType::kInt;
  else if constexpr (std::is_floating_point_v<M>) return FieldType::kFloat;
  else if constexpr (std::is_enum_v<M>) return FieldType::kEnum;
  else if constexpr (std::is_same_v<M, NodeRange>) return FieldType::kNodeRange;
  else if constexpr (std::is_same_v<M, std::map<std::string, std::string>>) return FieldType::kStringTable;
  else if constexpr (std::is_same_v<M, std::vector<std::string>>) return FieldType::kStringList;
  else {
    static_assert(std::is_same_v<M, std::vector<DataSource>>, "a member type the job file has no form for");
    return FieldType::kDataSources;
  }
}

// The spellings are the enums' own (to_string in spec.cc).
inline std::vector<std::string> choices_of(const JobKind*) {
  return {to_string(JobKind::kTrain), to_string(JobKind::kInfer), to_string(JobKind::kServe),
          to_string(JobKind::kCommand)};
}
inline std::vector<std::string> choices_of(const DeviceVisibility*) {
  return {to_string(DeviceVisibility::kOwn), to_string(DeviceVisibility::kNode)};
}
inline std::vector<std::string> choices_of(const Precision*) {
  return {to_string(Precision::kBf16), to_string(Precision::kFp16), to_string(Precision::kFp32)};
}
inline std::vector<std::string> choices_of(const Strategy*) { return strategy_names(); }
template <class M>
std::vector<std::string> choices_of(const M*) { return {}; }

inline bool is_empty(const FieldValue& v) {
  const auto* s = std::get_if<std::string>(&v);
  return s && s->empty();
}

// What a row says beside its member: the meaning, and where they differ from
// what the member's type implies, the default in words, the values a string
// may take, the numeric range, and whether an empty value is left out of the
// emitted file.
struct Doc {
  std::string text;
  std::string default_text;          // "": JobSpec{}'s value, as TOML
  std::vector<std::string> choices;  // a string member with fixed values
  double min = 0, max = 0;           // checked when min < max
  bool min_exclusive = false;
  bool omit_empty = false;           // an optional path or name: "" is not written back
};

template <class S, class M>
FieldDoc bind(std::string section, std::string key, S JobSpec::*part, M S::*member, Doc doc) {
  FieldDoc f;
  f.section = std::move(section);
  f.key = std::move(key);
  f.type = type_of<M>();
  f.choices = std::is_enum_v<M> ? choices_of(static_cast<const M*>(nullptr)) : std::move(doc.choices);
  if (!f.choices.empty()) f.type = FieldType::kEnum;
  f.description = std::move(doc.text);
  f.min = doc.min;
  f.max = doc.max;
  f.min_exclusive = doc.min_exclusive;
  f.set = [part, member](JobSpec& spec, const FieldValue& v) { from_value(v, &((spec.*part).*member)); };
  bool omit = doc.omit_empty;
  f.get = [part, member, omit](const JobSpec& spec) -> std::optional<FieldValue> {
    FieldValue v = to_value((spec.*part).*member);
    if (omit && is_empty(v)) return std::nullopt;
    return v;
  };
  if (doc.default_text.empty()) {
    auto v = f.get(JobSpec{});
    f.default_text = v ? toml_text(*v) : "(none)";
  } else {
    f.default_text = std::move(doc.default_text);
  }
  return f;
}

}  // namespace cohort::jobs::binding
