// `cohort completion bash`, sourced in a real bash: what compgen offers for
// subcommands, flags, flag values, job ids from a live coordinator and files.
#include <algorithm>
#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
using Words = std::vector<std::string>;

// What bash offers for `words` (the last one being completed), one per line.
Words complete(const Cluster& c, const Words& words,
               const std::map<std::string, std::string>& env = {}) {
  std::string line = "COMP_WORDS=(";
  for (const auto& w : words) line += "'" + w + "' ";
  line += ")\nCOMP_CWORD=" + std::to_string(words.size() - 1) + "\n";
  const std::string script = c.dir() + "/complete.sh";
  write_file(script, "source <('" + cohort_binary() + "' completion bash) || exit 9\n" + line +
                         "_cohort\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n");
  auto r = run_program({"bash", "--norc", script}, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Words out;
  std::istringstream in(r.out);
  for (std::string w; std::getline(in, w);) {
    if (!w.empty()) out.push_back(w);
  }
  return out;
}

TEST(CliCompletion, BashCompletesSubcommandsFlagsAndTheirValues) {
  Cluster c;
  const std::string self = cohort_binary();
  EXPECT_EQ(complete(c, {self, "sub"}), Words{"submit"});
  EXPECT_EQ(complete(c, {self, "co"}), (Words{"coordinator", "completion"}));
  EXPECT_EQ(complete(c, {self, "jobs", "--st"}), Words{"--state"});
  EXPECT_EQ(complete(c, {self, "jobs", "--state", "r"}), Words{"running"});
  EXPECT_EQ(complete(c, {self, "--log-level", "d"}), Words{"debug"});
  EXPECT_EQ(complete(c, {self, "status", "--js"}), Words{"--json"});
  EXPECT_EQ(complete(c, {self, "agent", "--js"}), Words{}) << "the agent prints no JSON";
  // The global flags are offered after a subcommand too.
  EXPECT_EQ(complete(c, {self, "cancel", "--coord"}), Words{"--coordinator"});
  EXPECT_EQ(complete(c, {self, "jobs", ""}), Words{"rm"});
  EXPECT_EQ(complete(c, {self, "completion", ""}), (Words{"bash", "zsh"}));
  EXPECT_EQ(complete(c, {self, "--coordinator", "tcp://x:1", "nod"}), Words{"nodes"});
}

TEST(CliCompletion, BashCompletesJobFilesFromDiskAndJobIdsFromTheCoordinator) {
  Cluster c;
  const std::string file = c.write_job("quick", command_job(c, "quick", 1, "true"));
  const std::string self = cohort_binary();
  EXPECT_EQ(complete(c, {self, "submit", c.dir() + "/qu"}), Words{file});
  c.start_coordinator();
  c.add_agent("node-a", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  auto a = submitted_id(c.cli("submit", {file, "--wait"}));
  auto b = submitted_id(c.cli("submit", {file, "--wait"}));
  EXPECT_EQ(complete(c, {self, "status", ""}, {{"COHORT_COORDINATOR", c.endpoint()}}),
            (Words{a, b}));
  EXPECT_EQ(complete(c, {self, "jobs", "rm", a}, {{"COHORT_COORDINATOR", c.endpoint()}}), Words{a});
  EXPECT_EQ(complete(c, {self, "nodes", "rm", ""}, {{"COHORT_COORDINATOR", c.endpoint()}}),
            Words{"node-a"});
}

TEST(CliCompletion, TheBashScriptRegistersForCohort) {
  Cluster c;
  write_file(c.dir() + "/register.sh",
             "source <('" + cohort_binary() + "' completion bash)\ncomplete -p cohort\n");
  auto r = run_program({"bash", "--norc", c.dir() + "/register.sh"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "complete -F _cohort cohort\n");
}

// zsh's completion builtins exist only inside a completion widget, so these
// stand-ins print what the script hands them (compadd and _describe filter
// by the typed prefix themselves: the lists are whole).
Words complete_zsh(const Cluster& c, const Words& words) {
  write_file(c.dir() + "/_cohort", run_cohort({"completion", "zsh"}).out);
  std::string line = "words=(";
  for (const auto& w : words) line += "'" + w + "' ";
  write_file(
      c.dir() + "/complete.zsh",
      "compadd() { while [[ $# -gt 0 && $1 != -- ]]; do shift; done; shift; print -l -- \"$@\"; }\n"
      "_describe() { local a; for a in \"${(@P)4}\"; do print -- \"${a%%:*}\"; done; }\n"
      "_files() { print -- '(files)'; }\n"
      "source " +
          c.dir() + "/_cohort\n" + line + ")\nCURRENT=${#words}\n_cohort\n");
  auto r = run_program({"zsh", "-f", c.dir() + "/complete.zsh"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Words out;
  std::istringstream in(r.out);
  for (std::string w; std::getline(in, w);) out.push_back(w);
  return out;
}

bool has(const Words& words, const std::string& w) {
  return std::find(words.begin(), words.end(), w) != words.end();
}

TEST(CliCompletion, TheZshScriptOffersSubcommandsFlagsValuesAndFiles) {
  Cluster c;
  auto r = run_cohort({"completion", "zsh"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("#compdef cohort\n", 0), 0u);
  if (run_program({"sh", "-c", "command -v zsh"}).exit_code != 0) {
    GTEST_SKIP()
        << "zsh is not installed (scripts/setup.sh installs it); checked only the script's header";
  }
  write_file(c.dir() + "/_cohort", r.out);
  auto syntax = run_program({"zsh", "-n", c.dir() + "/_cohort"});
  EXPECT_EQ(syntax.exit_code, 0) << syntax.err;
  const std::string self = cohort_binary();
  auto commands = complete_zsh(c, {self, "su"});
  EXPECT_TRUE(has(commands, "submit") && has(commands, "completion") && has(commands, "status"))
      << commands.size();
  EXPECT_EQ(complete_zsh(c, {self, "jobs", ""}), Words{"rm"});
  auto flags = complete_zsh(c, {self, "--coordinator", "tcp://x:1", "jobs", "--st"});
  EXPECT_TRUE(has(flags, "--state") && has(flags, "--json") && has(flags, "--log-level"));
  EXPECT_EQ(std::count(flags.begin(), flags.end(), "--json"), 1);
  EXPECT_EQ(complete_zsh(c, {self, "keygen", "k", "--role", ""}), (Words{"agent", "client"}));
  EXPECT_EQ(complete_zsh(c, {self, "run", ""}), Words{"(files)"});
}

}  // namespace
}  // namespace cohort::testing
