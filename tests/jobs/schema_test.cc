// The schema table binds each key to its own JobSpec member: what a row's
// setter stores, its getter reads back, and no other row sees it change.
// With the loader and to_toml both going through these rows, a key added as
// one row loads, emits and round-trips.
#include <gtest/gtest.h>

#include <set>

#include "jobs/schema.h"

namespace cohort::jobs {
namespace {

// A value of `f`'s type that differs from `now` and is valid for the row.
FieldValue another_value(const FieldDoc& f, const FieldValue& now) {
  switch (f.type) {
    case FieldType::kString: return std::get<std::string>(now) + "-changed";
    case FieldType::kEnum:
      for (const auto& c : f.choices)
        if (c != std::get<std::string>(now)) return c;
      break;
    case FieldType::kInt: {
      int64_t v = std::get<int64_t>(now);
      return v + 1 <= f.max || f.min == f.max ? v + 1 : v - 1;
    }
    case FieldType::kFloat: {
      double v = std::get<double>(now);
      return v + 0.25 <= f.max || f.min == f.max ? v + 0.25 : v / 2;
    }
    case FieldType::kBool: return !std::get<bool>(now);
    case FieldType::kStringList:
    case FieldType::kNameList: return std::vector<std::string>{"a", "b"};
    case FieldType::kNodeRange: return NodeRange{2, 5};
    case FieldType::kStopList: return std::vector<StopEntry>{int64_t(7), std::string("END")};
    case FieldType::kStringTable: return std::map<std::string, std::string>{{"A", "1"}};
    case FieldType::kDataSources: {
      DataSource d;
      d.path = "/data/a.jsonl", d.weight = 3, d.format = "chat";
      return std::vector<DataSource>{d};
    }
  }
  ADD_FAILURE() << f.section << "." << f.key << ": no other value";
  return now;
}

bool same(const FieldValue& a, const FieldValue& b) { return toml_text(a) == toml_text(b); }

TEST(Schema, EveryRowReadsBackWhatItStoresAndTouchesNoOtherRow) {
  std::set<std::string> names;
  for (const FieldDoc& f : schema_fields()) {
    const std::string name = f.section + "." + f.key;
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
    ASSERT_TRUE(f.set && f.get) << name << " has no binding";
    JobSpec spec;
    std::vector<std::optional<FieldValue>> before;
    for (const FieldDoc& g : schema_fields()) before.push_back(g.get(spec));
    const FieldValue now = f.get(spec) ? *f.get(spec) : FieldValue(std::string());
    const FieldValue next = another_value(f, now);
    ASSERT_FALSE(same(now, next)) << name;
    f.set(spec, next);
    ASSERT_TRUE(f.get(spec).has_value()) << name;
    EXPECT_TRUE(same(*f.get(spec), next)) << name << ": stored " << toml_text(next) << ", read "
                                          << toml_text(*f.get(spec));
    size_t i = 0;
    for (const FieldDoc& g : schema_fields()) {
      const auto after = g.get(spec);
      if (&g != &f) {
        EXPECT_EQ(after.has_value(), before[i].has_value()) << "setting " << name << " changed " << g.key;
        if (after && before[i]) {
          EXPECT_TRUE(same(*after, *before[i])) << "setting " << name << " changed " << g.section << "." << g.key;
        }
      }
      ++i;
    }
  }
}

TEST(Schema, DefaultsInTheReferenceAreTheSpecsOwn) {
  EXPECT_EQ(find_field("train", "lr")->default_text, "3e-04");
  EXPECT_EQ(find_field("train", "micro_batch")->default_text, "8");
  EXPECT_EQ(find_field("parallel", "strategy")->default_text, "\"ddp\"");
  EXPECT_EQ(find_field("serve", "host")->default_text, "\"127.0.0.1\"");
  EXPECT_EQ(find_field("job", "stop_grace")->default_text, "10.0");
  EXPECT_EQ(find_field("job.env", "")->default_text, "{}");
  EXPECT_EQ(find_field("model", "preset")->default_text, "(none)");
}

}  // namespace
}  // namespace cohort::jobs
