// The command line's own rules, on a CLI11 app built the way cohort_main.cc
// builds it: global flags anywhere, "did you mean" for mistyped subcommands
// and flags, and which commands print JSON.
#include "cli/usage_hints.h"

#include <gtest/gtest.h>

#include "cli/global_flags.h"

namespace cohort::cli {
namespace {

class UsageHints : public ::testing::Test {
 protected:
  UsageHints() {
    app_.require_subcommand(1);
    add_global_flags(app_);
    status_ = app_.add_subcommand("status", "show a job");
    status_->add_option("job", job_);
    json_.add_to(status_);
    submit_ = app_.add_subcommand("submit", "submit a job");
    submit_->add_option("job", job_)->required();
    submit_->add_flag("--wait", wait_);
    jobs_ = app_.add_subcommand("jobs", "list jobs");
    jobs_->add_option("--limit", limit_);
    json_.add_to(jobs_);
    rm_ = jobs_->add_subcommand("rm", "forget jobs");
    rm_->add_option("job", removed_)->required();
    agent_ = app_.add_subcommand("agent", "run an agent");
  }

  // The hint for a command line the parser refuses ("" when it accepts it).
  std::string hint(std::vector<std::string> args) {
    std::vector<char*> argv = {const_cast<char*>("cohort")};
    for (auto& a : args) argv.push_back(a.data());
    try {
      app_.parse(int(argv.size()), argv.data());
    } catch (const CLI::ParseError&) {
      return usage_hint(app_);
    }
    return "(accepted)";
  }
  bool parses(std::vector<std::string> args) { return hint(std::move(args)) == "(accepted)"; }

  CLI::App app_{"cohort"};
  CLI::App *status_, *submit_, *jobs_, *rm_, *agent_;
  std::string job_;
  std::vector<std::string> removed_;
  bool wait_ = false;
  int limit_ = 0;
  JsonFlag json_;
};

TEST_F(UsageHints, AMistypedSubcommandGetsTheNearestOne) {
  EXPECT_EQ(hint({"sumbit", "job.toml"}),
            "cohort: 'sumbit' is not a command; did you mean 'submit'? (cohort --help lists them)");
  EXPECT_EQ(
      hint({"jobs", "rn", "job-1"}),
      "cohort jobs: 'rn' is not a subcommand; did you mean 'rm'? (cohort jobs --help lists them)");
}

TEST_F(UsageHints, AWordFarFromEveryCommandIsNamedWithoutAGuess) {
  EXPECT_EQ(hint({"frobnicate"}),
            "cohort: 'frobnicate' is not a command (cohort --help lists them)");
}

TEST_F(UsageHints, NoSubcommandListsThem) {
  EXPECT_EQ(hint({}).rfind("cohort: a command is required: status, submit, jobs, agent", 0), 0u)
      << hint({});
}

TEST_F(UsageHints, AMistypedFlagGetsTheNearestFlagOfItsCommandOrAGlobalOne) {
  EXPECT_EQ(hint({"status", "--jsno"}),
            "cohort status: unknown flag --jsno; did you mean --json? (cohort status --help lists "
            "its flags)");
  EXPECT_NE(hint({"submit", "job.toml", "--wiat"}).find("did you mean --wait?"), std::string::npos);
  EXPECT_NE(hint({"jobs", "--limt=3"}).find("unknown flag --limt; did you mean --limit?"),
            std::string::npos);
  // A global flag is a candidate everywhere.
  EXPECT_NE(hint({"agent", "--coordinatr", "x"}).find("did you mean --coordinator?"),
            std::string::npos);
  EXPECT_NE(hint({"status", "--log-levl", "debug"}).find("did you mean --log-level?"),
            std::string::npos);
}

TEST_F(UsageHints, GlobalFlagsWorkBeforeAndAfterTheSubcommand) {
  ASSERT_TRUE(parses({"--log-level", "debug", "status", "job-1"}));
  EXPECT_EQ(global_flags().log_level, "debug");
  EXPECT_EQ(job_, "job-1");
  ASSERT_TRUE(parses({"status", "--coordinator", "tcp://h:1", "job-2", "--log-level", "warn"}));
  EXPECT_EQ(global_flags().coordinator, "tcp://h:1");
  EXPECT_EQ(global_flags().log_level, "warn");
  EXPECT_EQ(job_, "job-2");  // the positional after a global flag still reaches the subcommand
  ASSERT_TRUE(parses({"jobs", "rm", "job-3", "--keys", "me/", "--json"}));
  EXPECT_EQ(global_flags().keys, "me/");
  EXPECT_EQ(removed_, std::vector<std::string>{"job-3"});
  EXPECT_TRUE(json_.given);  // rm falls through to its parent's --json
}

TEST_F(UsageHints, JsonIsEitherTheCommandsOwnOrTheGlobalOne) {
  ASSERT_TRUE(parses({"--json", "status"}));
  EXPECT_TRUE(global_flags().json);
  EXPECT_TRUE(json_.on());
  EXPECT_TRUE(prints_json(*parsed_command(app_)));
  ASSERT_TRUE(parses({"jobs", "rm", "job-1"}));
  EXPECT_EQ(parsed_command(app_), rm_);
  EXPECT_TRUE(prints_json(*rm_));  // through `jobs`
  EXPECT_FALSE(prints_json(*agent_));
  EXPECT_FALSE(prints_json(app_));
  EXPECT_EQ(command_path(*rm_), "cohort jobs rm");
}

}  // namespace
}  // namespace cohort::cli
