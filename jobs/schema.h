// The job file schema: every section and key, its type, default, meaning and
// where its value lives in JobSpec.
//
// One table serves every reader: the loader (which keys exist, their type and
// range, and the setter that stores a checked value), to_toml (the getter
// that reads it back), the unknown-key suggestions, and the job file
// reference in docs/job-file.md, whose defaults are read from a
// default-constructed JobSpec unless a row states them in words (a test checks
// that the page holds exactly the reference these rows print). A new key is
// one row in schema.cc, then `cohort validate --reference` pasted into the page.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "jobs/spec.h"

namespace cohort::jobs {

enum class FieldType {
  kString,
  kInt,
  kFloat,
  kBool,
  kEnum,        // a string from `choices`
  kStringList,  // array of strings
  kNameList,    // a string, or an array of strings (lora.target_modules: "all-linear" or names)
  kNodeRange,   // integer, or "MIN:MAX"
  kStopList,    // array of token ids and/or strings
  kStringTable, // a table of string values (job.env)
  kDataSources, // a path, or an array of paths and {path, weight, format, text_field} tables
};

// An entry of a kStopList: a token id, or a string.
using StopEntry = std::variant<int64_t, std::string>;

// A key's checked value on its way between TOML and JobSpec; the alternative
// follows the FieldType (kEnum and kString: std::string; kStopList:
// std::vector<StopEntry>).
using FieldValue = std::variant<std::string, int64_t, double, bool, std::vector<std::string>, NodeRange,
                                std::map<std::string, std::string>, std::vector<DataSource>,
                                std::vector<StopEntry>>;

struct FieldDoc {
  std::string section;  // "job", "job.env", "train", ...
  std::string key;      // "" for a table field documented as a whole
  FieldType type;
  std::vector<std::string> choices;  // kEnum only
  std::string default_text;          // as shown in the reference
  std::string description;
  double min = 0, max = 0;           // numeric range when min < max
  bool min_exclusive = false;
  // Stores a value of this field's type (read_value has checked it).
  std::function<void(JobSpec&, const FieldValue&)> set;
  // The value to_toml writes; nullopt leaves the key out (an optional key
  // with nothing in it, which would not load back).
  std::function<std::optional<FieldValue>(const JobSpec&)> get;
};

const std::vector<FieldDoc>& schema_fields();
const std::vector<std::string>& schema_sections();
const FieldDoc* find_field(const std::string& section, const std::string& key);

// Whether a job of `kind` carries `section` ("job" always; "model" and
// "parallel" unless a command; the kind's own section).
bool section_applies(JobKind kind, const std::string& section);

// The nearest known name to `name` (Levenshtein), or "" when none is close.
std::string nearest_name(const std::string& name, const std::vector<std::string>& known);

// The job file reference, as Markdown tables, one per section.
std::string job_file_reference_markdown();

// A value as TOML text (`"auto"`, `3e-4`, `[1, "###"]`), for the reference's
// defaults.
std::string toml_text(const FieldValue& value);

const char* type_name(FieldType type);

}  // namespace cohort::jobs
