// How `cohort logs` writes a line: rank prefix, and control characters
// escaped unless raw (issue 34, item 10).
#include "protocol/job_watch.h"

#include <gtest/gtest.h>

namespace cohort::protocol {
namespace {

TEST(FormatLogLine, EscapesControlCharactersButTab) {
  LogLine line{0, 0, 3, "a\x1b[31mred\x1b[0m\tb\r\x07\x7f"};
  EXPECT_EQ(format_log_line(line), "[rank 3] a\\x1b[31mred\\x1b[0m\tb\\x0d\\x07\\x7f");
  EXPECT_EQ(format_log_line(line, /*raw=*/true), "[rank 3] " + line.text);
}

TEST(FormatLogLine, EscapesC1ControlsAndKeepsOtherUtf8) {
  // U+009B (CSI as one C1 character) and U+0085, then é and 中.
  EXPECT_EQ(escape_control_characters("x\xc2\x9b" "2J\xc2\x85y \xc3\xa9\xe4\xb8\xad"),
            "x\\xc2\\x9b2J\\xc2\\x85y \xc3\xa9\xe4\xb8\xad");
  EXPECT_EQ(escape_control_characters(std::string("nul\0end", 7)), "nul\\x00end");
  EXPECT_EQ(escape_control_characters("\xc2"), "\xc2") << "a lone lead byte is not a control";
}

}  // namespace
}  // namespace cohort::protocol
