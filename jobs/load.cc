// Reads a job file with toml++, applies `--set` overrides, and checks every
// key against the schema. Errors are collected, never thrown out of here.
#include "jobs/load.h"

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <variant>

#include <toml++/toml.h>

#include "jobs/launch_contract.h"
#include "jobs/load_context.h"
#include "jobs/schema.h"

namespace cohort::jobs {
namespace {

using StringMap = std::map<std::string, std::string>;
using Value = FieldValue;

// POSIX names: "" and "A=B" would make a broken environment block.
bool is_env_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

std::string describe(const toml::node& node) {
  std::ostringstream out;
  switch (node.type()) {
    case toml::node_type::string: {
      // A 7 MiB value must not make a 7 MiB error message.
      std::string text = *node.value<std::string>();
      if (text.size() > 80) text = text.substr(0, 80) + "…";
      out << "string \"" << text << "\"";
      break;
    }
    case toml::node_type::integer: out << "integer " << *node.value<int64_t>(); break;
    case toml::node_type::floating_point: out << "number " << *node.value<double>(); break;
    case toml::node_type::boolean: out << "boolean " << (*node.value<bool>() ? "true" : "false"); break;
    case toml::node_type::array: out << "an array"; break;
    case toml::node_type::table: out << "a table"; break;
    default: out << "a date or time"; break;
  }
  return out.str();
}

std::string range_text(const FieldDoc& f) {
  std::ostringstream out;
  out << (f.min_exclusive ? "greater than " : "at least ") << f.min;
  if (f.max < 1e11) out << " and at most " << f.max;
  return out.str();
}

// train.data: "path", or [ "path", {path = "...", weight = 2.0, format = "...", text_field = "..."} ].
// Each entry's position is noted as train.data[i] for later checks (cohort validate's data probe).
std::optional<Value> read_data_sources(const std::string& path, const toml::node& node, LoadContext& ctx) {
  std::vector<DataSource> out;
  if (node.is_string()) {
    DataSource only;
    only.path = *node.value<std::string>();
    out.push_back(only);
    if (node.source().begin.line > 0)
      ctx.note_key(path + "[0]", KeyOrigin{ctx.file(), int(node.source().begin.line), int(node.source().begin.column)});
    return Value(out);
  }
  const auto* arr = node.as_array();
  if (!arr || arr->empty()) {
    ctx.error_at(path, path + ": expected a path or a non-empty array of sources, got " + describe(node));
    return std::nullopt;
  }
  bool ok = true;
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& item = *arr->get(i);
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (item.source().begin.line > 0)  // (not for --set values, which have no position)
      ctx.note_key(at, KeyOrigin{ctx.file(), int(item.source().begin.line), int(item.source().begin.column)});
    DataSource src;
    if (item.is_string()) {
      src.path = *item.value<std::string>();
    } else if (const auto* t = item.as_table()) {
      for (const auto& [k, v] : *t) {
        const std::string key(k.str());
        if (key == "path" && v.is_string()) src.path = *v.value<std::string>();
        else if (key == "weight" && v.is_number() && *v.value<double>() > 0) src.weight = *v.value<double>();
        else if (key == "format" && v.is_string()) src.format = *v.value<std::string>();
        else if (key == "text_field" && v.is_string()) src.text_field = *v.value<std::string>();
        else {
          std::string near = nearest_name(key, {"path", "weight", "format", "text_field"});
          ctx.error_at(at, at + "." + key + ": " +
                               (key == "weight" ? "expected a positive number" :
                                (key == "path" || key == "format" || key == "text_field") ? "expected a string" :
                                "unknown key" + (near.empty() ? std::string() : "; did you mean " + near + "?")));
          ok = false;
        }
      }
      if (src.path.empty()) {
        ctx.error_at(at, at + ": a source needs a path");
        ok = false;
      }
      const auto& formats = find_field("train", "data_format")->choices;
      if (!src.format.empty() && std::find(formats.begin(), formats.end(), src.format) == formats.end()) {
        std::string list;
        for (const auto& c : formats) list += (list.empty() ? "" : ", ") + c;
        ctx.error_at(at, at + ".format: unknown value \"" + src.format + "\" (one of: " + list + ")");
        ok = false;
      }
    } else {
      ctx.error_at(at, at + ": expected a path or {path = ..., weight = ...}, got " + describe(item));
      ok = false;
    }
    out.push_back(src);
  }
  if (!ok) return std::nullopt;
  return Value(out);
}

// Converts a node to the field's type; reports and returns nullopt when it cannot.
std::optional<Value> read_value(const FieldDoc& f, const std::string& path, const toml::node& node,
                                LoadContext& ctx) {
  auto wrong = [&](const std::string& expected) {
    ctx.error_at(path, path + ": expected " + expected + ", got " + describe(node));
    return std::nullopt;
  };
  auto check_range = [&](double x) {
    if (std::isnan(x)) {
      ctx.error_at(path, path + ": nan is not a number (must be " + range_text(f) + ")");
      return false;
    }
    if (f.min == f.max) return true;
    bool low = f.min_exclusive ? x <= f.min : x < f.min;
    if (low || x > f.max) {
      std::ostringstream v;
      v << x;
      ctx.error_at(path, path + ": " + v.str() + " is out of range (must be " + range_text(f) + ")");
      return false;
    }
    return true;
  };
  switch (f.type) {
    case FieldType::kString:
      if (!node.is_string()) return wrong("a string");
      return Value(*node.value<std::string>());
    case FieldType::kEnum: {
      if (!node.is_string()) return wrong("a string");
      std::string s = *node.value<std::string>();
      if (std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end()) {
        std::string list;
        for (const auto& c : f.choices) list += (list.empty() ? "" : ", ") + c;
        std::string near = nearest_name(s, f.choices);
        ctx.error_at(path, path + ": unknown value \"" + s + "\" (one of: " + list + ")" +
                               (near.empty() ? "" : "; did you mean \"" + near + "\"?"));
        return std::nullopt;
      }
      return Value(s);
    }
    case FieldType::kInt:
      if (!node.is_integer()) return wrong("an integer");
      if (!check_range(double(*node.value<int64_t>()))) return std::nullopt;
      return Value(*node.value<int64_t>());
    case FieldType::kFloat: {
      if (!node.is_number()) return wrong("a number");
      double x = *node.value<double>();
      if (!check_range(x)) return std::nullopt;
      return Value(x);
    }
    case FieldType::kBool:
      if (!node.is_boolean()) return wrong("true or false");
      return Value(*node.value<bool>());
    case FieldType::kNameList:
      if (node.is_string()) return Value(std::vector<std::string>{*node.value<std::string>()});
      [[fallthrough]];
    case FieldType::kStringList: {
      const auto* arr = node.as_array();
      if (!arr) return wrong(f.type == FieldType::kNameList ? "a string or an array of strings" : "an array of strings");
      std::vector<std::string> out;
      for (const auto& item : *arr) {
        if (!item.is_string()) return wrong(f.type == FieldType::kNameList ? "a string or an array of strings" : "an array of strings");
        out.push_back(*item.value<std::string>());
      }
      return Value(out);
    }
    case FieldType::kStopList: {
      const auto* arr = node.as_array();
      if (!arr) return wrong("an array of token ids and strings");
      std::vector<StopEntry> out;
      for (const auto& item : *arr) {
        if (item.is_integer()) out.emplace_back(*item.value<int64_t>());
        else if (item.is_string()) out.emplace_back(*item.value<std::string>());
        else return wrong("an array of token ids and strings");
      }
      return Value(out);
    }
    case FieldType::kStringTable: {
      const auto* table = node.as_table();
      if (!table) return wrong("a table of strings");
      StringMap out;
      bool ok = true;
      for (const auto& [k, v] : *table) {
        std::string sub = path + "." + std::string(k.str());
        if (!is_env_name(k.str())) {
          ctx.error_at(sub, sub + ": \"" + std::string(k.str()) +
                                "\" is not an environment variable name (letters, digits and '_', not starting with a digit)");
          ok = false;
        } else if (is_launch_contract_variable(k.str())) {
          ctx.error_at(sub, sub + ": " + std::string(k.str()) +
                                " is set by cohort for every worker (the launch contract) and cannot be overridden");
          ok = false;
        } else if (v.is_string()) out[std::string(k.str())] = *v.value<std::string>();
        else if (v.is_integer()) out[std::string(k.str())] = std::to_string(*v.value<int64_t>());
        else if (v.is_boolean()) out[std::string(k.str())] = *v.value<bool>() ? "1" : "0";
        else if (v.is_floating_point()) {
          std::ostringstream text;
          text << *v.value<double>();
          out[std::string(k.str())] = text.str();
        }
        else {
          ctx.error_at(sub, sub + ": expected a string, got " + describe(v));
          ok = false;
        }
      }
      if (!ok) return std::nullopt;
      return Value(out);
    }
    case FieldType::kDataSources: return read_data_sources(path, node, ctx);
    case FieldType::kNodeRange: {
      if (node.is_integer()) {
        int64_t n = *node.value<int64_t>();
        if (n < 1 || n > kMaxNodes) {
          ctx.error_at(path, path + ": " + std::to_string(n) + " is out of range (must be between 1 and " +
                                 std::to_string(kMaxNodes) + ")");
          return std::nullopt;
        }
        return Value(NodeRange{int(n), int(n)});
      }
      if (!node.is_string()) return wrong("an integer or \"MIN:MAX\"");
      std::string s = *node.value<std::string>();
      int lo = 0, hi = 0;
      char colon = 0, extra = 0;
      std::istringstream in(s);
      if (!(in >> lo >> colon >> hi) || colon != ':' || (in >> extra) || lo < 1 || hi < 1) {
        ctx.error_at(path, path + ": \"" + s + "\" is not \"MIN:MAX\" with MIN and MAX at least 1");
        return std::nullopt;
      }
      // The same cap as the integer form: a MAX of 2^31 reserved that many ranks.
      if (hi > kMaxNodes) {
        ctx.error_at(path, path + ": MAX " + std::to_string(hi) + " in \"" + s + "\" is out of range (at most " +
                               std::to_string(kMaxNodes) + " nodes)");
        return std::nullopt;
      }
      if (lo > hi) {
        ctx.error_at(path, path + ": MIN " + std::to_string(lo) + " is larger than MAX " +
                               std::to_string(hi) + " in \"" + s + "\"");
        return std::nullopt;
      }
      return Value(NodeRange{lo, hi});
    }
  }
  return std::nullopt;
}

KeyOrigin origin_of(const toml::node& node, const LoadContext& ctx,
                    const std::map<const toml::node*, std::string>& override_nodes) {
  if (auto it = override_nodes.find(&node); it != override_nodes.end())
    return KeyOrigin{it->second, 0, 0, true};
  return KeyOrigin{ctx.file(), int(node.source().begin.line), int(node.source().begin.column), false};
}

std::vector<std::string> keys_of_section(const std::string& section) {
  std::vector<std::string> out;
  for (const auto& f : schema_fields())
    if (f.section == section && !f.key.empty()) out.push_back(f.key);
  if (section == "job") out.push_back("env");
  return out;
}

std::string other_section_hint(const std::string& key) {
  for (const auto& f : schema_fields())
    if (f.key == key) return "; did you mean [" + f.section + "] " + key + "?";
  return "";
}

void read_section(JobSpec& spec, const std::string& section, const toml::table& table,
                  LoadContext& ctx, const std::map<const toml::node*, std::string>& overrides) {
  for (const auto& [k, node] : table) {
    std::string key(k.str());
    std::string path = section + "." + key;
    ctx.note_key(path, origin_of(node, ctx, overrides));
    // A table documented as a whole ([job.env], [serve.adapters]) is its own field.
    const FieldDoc* whole = find_field(section + "." + key, "");
    const FieldDoc* field = whole ? whole : find_field(section, key);
    if (!field) {
      std::string near = nearest_name(key, keys_of_section(section));
      std::string hint = near.empty() ? other_section_hint(key) : "; did you mean " + near + "?";
      KeyOrigin at = origin_of(node, ctx, overrides);
      if (!at.from_override) at = KeyOrigin{ctx.file(), int(k.source().begin.line), int(k.source().begin.column)};
      ctx.error_at(at, "unknown key '" + key + "' in [" + section + "]" + hint);
      continue;
    }
    if (field->type == FieldType::kStringList || field->type == FieldType::kNameList) {
      // Each entry's own position: a missing script in argv points at itself.
      KeyOrigin whole = origin_of(node, ctx, overrides);
      if (const auto* array = node.as_array())
        for (size_t i = 0; i < array->size(); ++i)
          ctx.note_key(path + "[" + std::to_string(i) + "]",
                       whole.from_override ? whole : origin_of(*array->get(i), ctx, overrides));
    }
    if (field->type == FieldType::kStringTable) {
      if (const auto* env = node.as_table())
        for (const auto& [ek, ev] : *env)
          ctx.note_key(path + "." + std::string(ek.str()), origin_of(ev, ctx, overrides));
    }
    auto value = read_value(*field, path, node, ctx);
    if (value) field->set(spec, *value);
    else ctx.mark_invalid(path);
  }
}

// Puts `--set a.b.c=v` into the document, creating tables on the way.
void apply_override(toml::table& root, const Override& o, LoadContext& ctx,
                    std::map<const toml::node*, std::string>& override_nodes) {
  std::string source = "--set " + o.text();
  std::vector<std::string> parts;
  std::stringstream ss(o.key);
  for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
  toml::table* table = &root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* next = table->get(parts[i]);
    if (!next) next = &table->insert_or_assign(parts[i], toml::table{}).first->second;
    if (!next->is_table()) {
      ctx.error_at(KeyOrigin{source, 0, 0, true}, o.key + ": '" + parts[i] + "' is not a table");
      return;
    }
    table = next->as_table();
  }
  toml::node* placed = nullptr;
  try {
    toml::table parsed = toml::parse("v = " + o.value, source);
    if (parsed.size() == 1 && parsed.get("v")) {
      placed = &table->insert_or_assign(parts.back(), std::move(*parsed.get("v"))).first->second;
    }
  } catch (const toml::parse_error&) {
  }
  if (!placed) placed = &table->insert_or_assign(parts.back(), o.value).first->second;
  override_nodes[placed] = source;
}

}  // namespace

void LoadContext::error_at(const std::string& path, const std::string& message) {
  // A rule about a key that was not given points at its section, else the file.
  for (std::string p = path;;) {
    if (auto it = origins_.find(p); it != origins_.end()) return error_at(it->second, message);
    auto dot = p.rfind('.');
    if (dot == std::string::npos) break;
    p.resize(dot);
  }
  // No position to point at (a missing section): the file's first line, so
  // the error still reads file:line:column like every other.
  errors_.push_back(LoadError{file_, 1, 1, message});
}

void LoadContext::error_at(const KeyOrigin& origin, const std::string& message) {
  errors_.push_back(LoadError{origin.source, origin.line, origin.column, message});
}

std::vector<LoadError> LoadContext::take_errors() {
  std::stable_sort(errors_.begin(), errors_.end(), [this](const LoadError& a, const LoadError& b) {
    bool a_file = a.source == file_, b_file = b.source == file_;
    if (a_file != b_file) return a_file;
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  return std::move(errors_);
}

std::string LoadError::to_string() const {
  std::ostringstream out;
  out << source;
  if (line > 0) out << ":" << line << ":" << column;
  out << ": " << message;
  return out.str();
}

std::string LoadResult::position(const std::string& key) const {
  auto it = key_positions.find(key);
  return it == key_positions.end() ? spec.source_path : it->second;
}

std::string LoadResult::error_text() const {
  std::string out;
  for (const auto& e : errors) out += e.to_string() + "\n";
  return out;
}

Result<Override> parse_override(const std::string& arg) {
  auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    return invalid_argument("--set " + arg + ": expected section.key=value");
  Override o{arg.substr(0, eq), arg.substr(eq + 1)};
  if (o.key.find('.') == std::string::npos || o.key.front() == '.' || o.key.back() == '.')
    return invalid_argument("--set " + arg + ": the key must name a section and a key, like train.lr");
  return o;
}

LoadResult load_job_text(const std::string& text, const std::string& source_name,
                         const LoadOptions& options) {
  LoadResult result;
  LoadContext ctx(source_name);
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    result.errors.push_back(LoadError{source_name, int(e.source().begin.line),
                                      int(e.source().begin.column), std::string(e.description())});
    return result;
  }
  std::map<const toml::node*, std::string> override_nodes;
  for (const auto& o : options.overrides) apply_override(root, o, ctx, override_nodes);

  JobSpec& spec = result.spec;
  spec.source_path = source_name;
  for (const auto& [k, node] : root) {
    std::string section(k.str());
    ctx.note_key(section, origin_of(node, ctx, override_nodes));
    const auto& known = schema_sections();
    if (std::find(known.begin(), known.end(), section) == known.end()) {
      std::string near = nearest_name(section, known);
      ctx.error_at(section, "unknown section [" + section + "]" +
                                (near.empty() ? other_section_hint(section)
                                              : "; did you mean [" + near + "]?"));
      continue;
    }
    const auto* table = node.as_table();
    if (!table) {
      ctx.error_at(section, section + ": expected a table [" + section + "], got " + describe(node));
      continue;
    }
    if (section == "model") spec.has_model = true;
    if (section == "train") spec.has_train = true;
    if (section == "infer") spec.has_infer = true;
    if (section == "serve") spec.has_serve = true;
    if (section == "command") spec.has_command = true;
    if (section == "lora") spec.has_lora = true;
    read_section(spec, section, *table, ctx, override_nodes);
  }
  check_job_rules(spec, ctx);
  {
    const std::string cwd = options.base_dir.empty() ? std::filesystem::current_path().string() : options.base_dir;
    resolve_hub_model(spec, ctx, ctx.from_override("model.hf_dir") ? cwd : (options.file_dir.empty() ? cwd : options.file_dir));
  }
  result.key_positions = ctx.positions();
  result.errors = ctx.take_errors();
  result.warnings = ctx.take_warnings();
  if (result.ok()) {
    std::string cwd = options.base_dir.empty() ? std::filesystem::current_path().string() : options.base_dir;
    resolve_defaults(spec, ctx, cwd, options.file_dir.empty() ? cwd : options.file_dir);
  }
  return result;
}

LoadResult load_job_file(const std::string& path, const LoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    LoadResult result;
    result.errors.push_back(LoadError{path, 0, 0, "cannot open the job file (" +
                                                      std::string(std::strerror(errno)) + ")"});
    return result;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  LoadOptions with_dir = options;
  if (with_dir.file_dir.empty()) {
    std::error_code ec;
    auto file = std::filesystem::absolute(path, ec);
    if (!ec) with_dir.file_dir = file.parent_path().lexically_normal().string();
  }
  return load_job_text(buffer.str(), path, with_dir);
}

}  // namespace cohort::jobs
