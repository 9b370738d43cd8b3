// to_toml: the resolved spec written back as a complete job file, row by row
// of the schema. The coordinator stores it and agents hand it to
// cohort-worker, so it must load back into the same spec (tests check the
// round trip).
#include <charconv>
#include <sstream>

#include <toml++/toml.h>

#include "jobs/load.h"
#include "jobs/schema.h"

namespace cohort::jobs {
namespace {

template <typename... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <typename... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;  // clang before 17 deduces no aggregate's arguments

toml::array string_array(const std::vector<std::string>& items) {
  toml::array out;
  for (const auto& s : items) out.push_back(s);
  return out;
}

// Inserts `value` as `key` of `table`, in the form the loader reads back.
void insert(toml::table& table, const std::string& key, const FieldValue& value) {
  std::visit(Overloaded{
                 [&](const std::string& v) { table.insert_or_assign(key, v); },
                 [&](int64_t v) { table.insert_or_assign(key, v); },
                 [&](double v) { table.insert_or_assign(key, v); },
                 [&](bool v) { table.insert_or_assign(key, v); },
                 [&](const std::vector<std::string>& v) { table.insert_or_assign(key, string_array(v)); },
                 [&](const NodeRange& v) {
                   if (v.elastic()) table.insert_or_assign(key, std::to_string(v.min) + ":" + std::to_string(v.max));
                   else table.insert_or_assign(key, int64_t(v.min));
                 },
                 [&](const std::map<std::string, std::string>& v) {
                   toml::table t;
                   for (const auto& [k, x] : v) t.insert(k, x);
                   table.insert_or_assign(key, std::move(t));
                 },
                 [&](const std::vector<DataSource>& v) {
                   toml::array out;
                   for (const auto& d : v) {
                     toml::table entry{{"path", d.path}, {"weight", d.weight}};
                     if (!d.format.empty()) entry.insert("format", d.format);
                     if (!d.text_field.empty()) entry.insert("text_field", d.text_field);
                     out.push_back(std::move(entry));
                   }
                   table.insert_or_assign(key, std::move(out));
                 },
                 [&](const std::vector<StopEntry>& v) {
                   toml::array out;
                   for (const auto& e : v) std::visit([&](const auto& x) { out.push_back(x); }, e);
                   table.insert_or_assign(key, std::move(out));
                 },
             },
             value);
}

// The table at a dotted path ("job", "job.env"), created on the way.
toml::table& table_at(toml::table& root, const std::string& dotted) {
  toml::table* table = &root;
  std::stringstream parts(dotted);
  for (std::string part; std::getline(parts, part, '.');) {
    toml::node* next = table->get(part);
    if (!next || !next->is_table()) next = &table->insert_or_assign(part, toml::table{}).first->second;
    table = next->as_table();
  }
  return *table;
}

}  // namespace

std::string to_toml(const JobSpec& spec) {
  toml::table root;
  for (const auto& field : schema_fields()) {
    const std::string top = field.section.substr(0, field.section.find('.'));
    if (!section_applies(spec.job.kind, top)) continue;
    if (top == "lora" && !spec.has_lora) continue;  // an optional section: present only when given
    auto value = field.get(spec);
    if (!value) continue;
    if (field.key.empty()) {
      // A table documented as a whole ("job.env"): its parent holds it.
      auto dot = field.section.rfind('.');
      insert(table_at(root, field.section.substr(0, dot)), field.section.substr(dot + 1), *value);
    } else {
      insert(table_at(root, field.section), field.key, *value);
    }
  }
  std::ostringstream out;
  out << root << "\n";
  return out.str();
}

std::string toml_text(const FieldValue& value) {
  if (const auto* text = std::get_if<std::string>(&value)) {
    // A basic (double-quoted) string, as the examples write them; toml++
    // would print a literal ('single-quoted') one.
    std::string out = "\"";
    for (char c : *text) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }
  if (const auto* table = std::get_if<std::map<std::string, std::string>>(&value)) {
    // Inline: as a holder's entry it would print as a [v] section.
    std::string text = "{";
    for (const auto& [k, v] : *table) text += (text.size() > 1 ? ", " : " ") + k + " = " + toml_text(v);
    return text + (table->empty() ? "}" : " }");
  }
  if (const auto* number = std::get_if<double>(&value)) {
    // The shortest form that reads back the same (toml++ prints 17 digits).
    char buffer[32];
    auto end = std::to_chars(buffer, buffer + sizeof buffer, *number).ptr;
    std::string out(buffer, end);
    if (out.find_first_of(".en") == std::string::npos) out += ".0";  // still a float
    return out;
  }
  toml::table holder;
  insert(holder, "v", value);
  std::ostringstream out;
  out << holder;
  std::string text = out.str();
  auto eq = text.find("= ");
  text = eq == std::string::npos ? text : text.substr(eq + 2);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace cohort::jobs
