// The reference pages stay true: the man pages render without a groff warning
// and name every option the commands' --help names; docs/config.md and
// oomsnap.toml(5) are generated from deploy/oomsnap.toml, the example the
// DeployConfig tests hold to the parser, and are not stale.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "run_command.h"

using oomsnap_test::CommandRun;

namespace {

const std::string kSource = OOMSNAP_SOURCE_DIR;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(DocsMan, PagesRenderWithoutWarnings) {
  for (const char* page : {"oomsnap.1", "oomsnap.toml.5"}) {
    const CommandRun r = oomsnap_test::run_command("groff -man -ww -z '" + kSource + "/docs/man/" + page + "'");
    EXPECT_EQ(r.status, 0) << page << ": " << r.out;
    EXPECT_EQ(r.out, "") << page;
  }
}

TEST(DocsMan, EveryOptionOfEveryCommandIsDescribed) {
  const std::string man = slurp(kSource + "/docs/man/oomsnap.1");
  ASSERT_FALSE(man.empty());
  const std::regex option("(^|[\\s\\[|])(--[a-z][a-z-]*)");
  size_t seen = 0;
  for (const char* command : {"watch", "snapshot", "show"}) {
    const CommandRun help = oomsnap_test::run_command(std::string(OOMSNAP_BINARY) + " " + command + " --help");
    ASSERT_EQ(help.status, 0) << command;
    std::set<std::string> options;
    for (std::sregex_iterator it(help.out.begin(), help.out.end(), option), end; it != end; ++it)
      options.insert((*it)[2]);
    for (const std::string& o : options) {
      if (o == "--help") continue;
      ++seen;
      std::string escaped;
      for (char c : o) escaped += c == '-' ? std::string("\\-") : std::string(1, c);
      const bool described = man.find(".B " + escaped) != std::string::npos ||
                             man.find(".BI " + escaped) != std::string::npos;
      EXPECT_TRUE(described)
          << "oomsnap " << command << " --help names " << o << ", which docs/man/oomsnap.1 does not describe";
    }
  }
  EXPECT_GE(seen, 12u);
}

TEST(DeployConfig, DocsPagesAreTheExample) {
  const CommandRun r = oomsnap_test::run_command("/usr/bin/python3 '" + kSource + "/tools/gen-config-doc.py' --check");
  EXPECT_EQ(r.status, 0) << r.out;
  // The page shows the example verbatim.
  EXPECT_NE(slurp(kSource + "/docs/config.md").find(slurp(kSource + "/deploy/oomsnap.toml")), std::string::npos);
}
