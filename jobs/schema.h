// The job file schema: every section and key, its type, default and meaning.
//
// One table serves three readers: the loader (which keys exist, what type,
// what range), the unknown-key suggestions, and the job file reference in
// README.md (a test checks that the README documents exactly these keys).
#pragma once

#include <string>
#include <vector>

namespace cohort::jobs {

enum class FieldType {
  kString,
  kInt,
  kFloat,
  kBool,
  kEnum,        // a string from `choices`
  kStringList,  // array of strings
  kNodeRange,   // integer, or "MIN:MAX"
  kStopList,    // array of token ids and/or strings
  kStringTable, // a table of string values (job.env)
  kDataSources, // a path, or an array of paths and {path, weight, format, text_field} tables
};

struct FieldDoc {
  std::string section;  // "job", "job.env", "train", ...
  std::string key;      // "" for a table field documented as a whole
  FieldType type;
  std::vector<std::string> choices;  // kEnum only
  std::string default_text;          // as shown in the reference
  std::string description;
  double min = 0, max = 0;           // numeric range when min < max
  bool min_exclusive = false;
};

const std::vector<FieldDoc>& schema_fields();
const std::vector<std::string>& schema_sections();

// The nearest known name to `name` (Levenshtein), or "" when none is close.
std::string nearest_name(const std::string& name, const std::vector<std::string>& known);

// The job file reference, as Markdown tables, one per section.
std::string job_file_reference_markdown();

const char* type_name(FieldType type);

}  // namespace cohort::jobs
