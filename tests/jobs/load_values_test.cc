// What a valid job file loads into: values, defaults, overrides, paths, and
// the to_toml round trip.
#include <gtest/gtest.h>

#include "tests/jobs/job_text.h"

namespace cohort::jobs {
namespace {
using testing::load;

TEST(JobFileValues, TrainDefaultsAndResolvedPaths) {
  auto r = load(testing::kTrainJob);
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto& s = r.spec;
  EXPECT_EQ(s.job.kind, JobKind::kTrain);
  EXPECT_EQ(s.job.devices, DeviceVisibility::kOwn);
  EXPECT_EQ(s.job.output_dir, "/base/runs/t");
  EXPECT_EQ(s.job.working_dir, "/base");
  ASSERT_EQ(s.train.data.size(), 1u);
  EXPECT_EQ(s.train.data[0].path, "/base/corpus.txt");
  EXPECT_EQ(s.train.data[0].weight, 1.0);
  EXPECT_EQ(s.train.text_field, "text");
  EXPECT_DOUBLE_EQ(s.train.min_lr, s.train.lr / 10);
  EXPECT_EQ(s.parallel.strategy, Strategy::kDdp);
  EXPECT_EQ(s.effective_global_batch(1), 8 * 4);
  EXPECT_EQ(s.accumulation_steps(1), 1);
}

TEST(JobFileValues, CommandJobsDefaultToNodeVisibility) {
  auto r = load("[job]\nname = \"c\"\nkind = \"command\"\n[command]\nargv = [\"python3\", \"x.py\"]\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.spec.job.devices, DeviceVisibility::kNode);
  EXPECT_EQ(r.spec.command.argv, (std::vector<std::string>{"python3", "x.py"}));
}

TEST(JobFileValues, ElasticNodesAndEnv) {
  auto r = load("[job]\nname = \"c\"\nkind = \"command\"\nnodes = \"2:4\"\n[job.env]\nA = \"1\"\nB = 2\n"
                "[command]\nargv = [\"true\"]\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.spec.job.nodes.min, 2);
  EXPECT_EQ(r.spec.job.nodes.max, 4);
  EXPECT_TRUE(r.spec.job.nodes.elastic());
  EXPECT_EQ(r.spec.job.env.at("A"), "1");
  EXPECT_EQ(r.spec.job.env.at("B"), "2");
}

TEST(JobFileOverrides, TypedValuesReplaceFileValues) {
  auto r = load(testing::kTrainJob, {"train.lr=1e-3", "train.steps=7", "parallel.strategy=fsdp2",
                                     "job.nodes=1:2", "job.env.NCCL_DEBUG=INFO", "train.resume=false"});
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_DOUBLE_EQ(r.spec.train.lr, 1e-3);
  EXPECT_EQ(r.spec.train.steps, 7);
  EXPECT_EQ(r.spec.parallel.strategy, Strategy::kFsdp2);
  EXPECT_EQ(r.spec.job.nodes.max, 2);
  EXPECT_EQ(r.spec.job.env.at("NCCL_DEBUG"), "INFO");
  EXPECT_FALSE(r.spec.train.resume);
}

TEST(JobFileOverrides, OverridesAreCheckedAgainstCrossFieldRules) {
  auto r = load(testing::kTrainJob, {"parallel.tensor_parallel=3"});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].source, "--set parallel.tensor_parallel=3");
}

TEST(JobFileValues, InferStopListMixesIdsAndStrings) {
  auto r = load("[job]\nname = \"i\"\nkind = \"infer\"\n[model]\npreset = \"tiny\"\n"
                "[infer]\nprompts = \"p.jsonl\"\nstop = [2, \"\\n\\n\"]\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.spec.infer.stop_tokens, (std::vector<int64_t>{2}));
  EXPECT_EQ(r.spec.infer.stop_strings, (std::vector<std::string>{"\n\n"}));
}

// [model] quantize: the formats a model can be quantized to at load, kept in
// the resolved file (what the worker and summary.json record).
TEST(JobFileValues, ModelQuantizeTakesItsFormatsAndIsRecorded) {
  auto r = load("[job]\nname = \"i\"\nkind = \"infer\"\n[model]\npreset = \"tiny\"\nquantize = \"int4\"\n"
                "[infer]\nprompts = \"p.jsonl\"\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.spec.model.quantize, "int4");
  EXPECT_NE(to_toml(r.spec).find("quantize = 'int4'"), std::string::npos) << to_toml(r.spec);
  EXPECT_EQ(load(testing::kTrainJob).spec.model.quantize, "none");
  auto bad = load(testing::kTrainJob, {"model.quantize=nf4"});
  testing::error_with(bad, "model.quantize: unknown value \"nf4\" (one of: none, fp8, int8, int4)");
}

// kv_cache_dtype ([infer] and [serve]): bf16 by default, fp8 kept in the
// resolved file, anything else refused naming the key and the choices.
TEST(JobFileValues, KvCacheDtypeTakesBf16OrFp8AndIsRecorded) {
  auto r = load("[job]\nname = \"s\"\nkind = \"serve\"\n[model]\npreset = \"tiny\"\n"
                "[serve]\nkv_cache_dtype = \"fp8\"\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.spec.serve.kv_cache_dtype, "fp8");
  EXPECT_EQ(r.spec.infer.kv_cache_dtype, "bf16");
  EXPECT_NE(to_toml(r.spec).find("kv_cache_dtype = 'fp8'"), std::string::npos) << to_toml(r.spec);
  auto bad = load(testing::kTrainJob, {"infer.kv_cache_dtype=fp16"});
  testing::error_with(bad, "infer.kv_cache_dtype: unknown value \"fp16\" (one of: bf16, fp8)");
}

TEST(JobFileValues, ResolvedTomlLoadsBackToTheSameSpec) {
  auto first = load(std::string(testing::kTrainJob) + "lr = 0.0007\nglobal_batch = 64\n[parallel]\nstrategy = \"zero2\"\n",
                    {"job.env.X=y", "job.nodes=1:2"});
  ASSERT_TRUE(first.ok()) << first.error_text();
  auto again = load_job_text(to_toml(first.spec), "resolved.toml", {});
  ASSERT_TRUE(again.ok()) << again.error_text();
  EXPECT_EQ(to_toml(again.spec), to_toml(first.spec));
  EXPECT_EQ(again.spec.train.global_batch, 64);
  EXPECT_DOUBLE_EQ(again.spec.train.lr, 0.0007);
  EXPECT_EQ(again.spec.job.nodes.max, 2);
  EXPECT_EQ(again.spec.job.env.at("X"), "y");
}

}  // namespace
}  // namespace cohort::jobs

namespace cohort::jobs {
namespace {

TEST(JobFileValues, ServeAdaptersLoadResolvedAndRoundTrip) {
  const std::string job = "[job]\nname = \"s\"\nkind = \"serve\"\n[model]\npreset = \"tiny\"\n"
                          "[serve.adapters]\nsql = \"adapters/sql\"\nsupport = \"/abs/support\"\n";
  auto r = testing::load(job);
  ASSERT_TRUE(r.ok()) << r.error_text();
  ASSERT_EQ(r.spec.serve.adapters.size(), 2u);
  EXPECT_EQ(r.spec.serve.adapters.at("sql"), "/base/adapters/sql");  // beside the job file
  EXPECT_EQ(r.spec.serve.adapters.at("support"), "/abs/support");
  auto again = load_job_text(to_toml(r.spec), "resolved.toml", {});
  ASSERT_TRUE(again.ok()) << again.error_text();
  EXPECT_EQ(again.spec.serve.adapters, r.spec.serve.adapters);
  // An adapter named as the base would make requests ambiguous.
  auto clash = testing::load(job + "s = \"adapters/s\"\n");
  testing::error_with(clash, "serve.adapters.s: the base model's name");
}

TEST(JobFileValues, ServeKeysLoadWithDefaultsAndRoundTrip) {
  auto r = testing::load("[job]\nname = \"s\"\nkind = \"serve\"\ngpus_per_node = 2\n[model]\npreset = \"tiny\"\n"
                         "[serve]\nport = 0\nmax_running = 4\nmax_batched_tokens = 32\ntemperature = 0.0\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto& s = r.spec.serve;
  EXPECT_EQ(r.spec.job.kind, JobKind::kServe);
  EXPECT_EQ(s.host, "127.0.0.1");
  EXPECT_EQ(s.port, 0);
  EXPECT_EQ(s.max_running, 4);
  EXPECT_EQ(s.max_queue, 64);
  EXPECT_EQ(s.model_name, "s");  // the job's name
  EXPECT_EQ(s.max_batched_tokens, 32);
  auto again = load_job_text(to_toml(r.spec), "resolved.toml", {});
  ASSERT_TRUE(again.ok()) << again.error_text();
  EXPECT_EQ(to_toml(again.spec), to_toml(r.spec));
  EXPECT_EQ(again.spec.serve.max_running, 4);
}

TEST(JobFileValues, TheServeHostIsParsedAsAnAddressNotMatchedByPrefix) {
  auto serve = [](const std::string& host) {
    return testing::load("[job]\nname = \"s\"\nkind = \"serve\"\n[model]\npreset = \"tiny\"\n[serve]\nhost = \"" +
                         host + "\"\n");
  };
  for (const char* loopback : {"127.0.0.1", "127.3.2.1", "::1", "localhost", "::ffff:127.0.0.1"}) {
    auto r = serve(loopback);
    EXPECT_TRUE(r.ok()) << loopback << ": " << r.error_text();
  }
  // Names are refused before any bind: the server binds addresses only.
  for (const char* name : {"127.invalid", "127.0.0.1.example.com", "[::1]", "node-1"}) {
    auto r = serve(name);
    EXPECT_FALSE(r.ok()) << name;
    testing::error_with(r, "is not an IP address");
  }
  testing::error_with(serve("10.0.0.5"), "serve.api_key is required");
  testing::error_with(serve("::"), "serve.api_key is required");
}

TEST(JobFileValues, AServerOffLoopbackNeedsAnApiKey) {
  const std::string job = "[job]\nname = \"s\"\nkind = \"serve\"\n[model]\npreset = \"tiny\"\n[serve]\nhost = \"0.0.0.0\"\n";
  auto r = testing::load(job);
  EXPECT_FALSE(r.ok());
  testing::error_with(r, "serve.api_key is required");
  EXPECT_TRUE(testing::load(job + "api_key = \"k\"\n").ok());
  auto tp = testing::load("[job]\nname = \"s\"\nkind = \"serve\"\ngpus_per_node = 2\n[model]\npreset = \"tiny\"\n"
                          "[serve]\ntensor_parallel = 1\n");
  testing::error_with(tp, "must equal the job's 2 ranks");
  auto typo = testing::load("[job]\nname = \"s\"\nkind = \"serve\"\n[model]\npreset = \"tiny\"\n[serve]\nmax_runing = 2\n");
  testing::error_with(typo, "max_running");
}

constexpr const char* kMixtureJob = R"([job]
name = "m"
kind = "train"
[model]
preset = "tiny"
[train]
steps = 3
text_field = "body"
data = [
  "web.bin",
  {path = "chat.jsonl", weight = 3.0, format = "chat"},
]
)";

TEST(JobFileValues, DataMixturesKeepWeightsFormatsAndPositions) {
  auto r = testing::load(kMixtureJob);
  ASSERT_TRUE(r.ok()) << r.error_text();
  const auto& d = r.spec.train.data;
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].path, "/base/web.bin");
  EXPECT_EQ(d[0].weight, 1.0);
  EXPECT_EQ(d[1].path, "/base/chat.jsonl");
  EXPECT_EQ(d[1].weight, 3.0);
  EXPECT_EQ(d[1].format, "chat");
  EXPECT_EQ(r.spec.train.text_field, "body");
  EXPECT_EQ(r.position("train.data[1]"), "job.toml:11:3");
  auto again = load_job_text(to_toml(r.spec), "resolved.toml", {});
  ASSERT_TRUE(again.ok()) << again.error_text();
  EXPECT_EQ(to_toml(again.spec), to_toml(r.spec));
}

TEST(JobFileErrors, BadDataSourcesAreReportedAtTheirEntry) {
  auto r = testing::load(std::string(kMixtureJob).replace(std::string(kMixtureJob).find("format = \"chat\""), 15,
                                                          "format = \"chatt\", wieght = 1"));
  auto e = testing::error_with(r, "train.data[1].format: unknown value \"chatt\"");
  EXPECT_EQ(e.line, 11);
  testing::error_with(r, "train.data[1].wieght: unknown key; did you mean weight?");
  auto set = testing::load(kMixtureJob, {"train.data=[]"});
  testing::error_with(set, "train.data: expected a path or a non-empty array of sources");
}

}  // namespace
}  // namespace cohort::jobs

namespace cohort::jobs {
namespace {

TEST(JobFileValues, AKvCacheSmallerThanOneContextIsRefusedAtItsKey) {
  const std::string job = "[job]\nname = \"s\"\nkind = \"serve\"\n[model]\npreset = \"tiny\"\n[serve]\ncontext = 512\n";
  auto small = testing::load(job + "kv_cache_tokens = 500\n");
  ASSERT_EQ(small.errors.size(), 1u) << small.error_text();
  EXPECT_EQ(small.errors[0].line, 8);
  EXPECT_NE(small.errors[0].message.find("500 is less than one sequence's serve.context 512"), std::string::npos)
      << small.errors[0].message;
  EXPECT_TRUE(testing::load(job + "kv_cache_tokens = 512\n").ok());
  EXPECT_TRUE(testing::load(job + "kv_cache_tokens = 0\n").ok());
}

}  // namespace
}  // namespace cohort::jobs
