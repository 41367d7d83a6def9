// The configuration file is read only when no other user could have written
// it (agent/config_file.h): real files, modes and owners (the unit tests run
// as root, which can chown; the owner cases skip otherwise).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/config.h"
#include "agent/config_file.h"
#include "config_error.h"

using namespace oomsnap;
namespace fs = std::filesystem;

namespace {

// A directory of its own with config.toml (ThresholdPercent = 42) in it.
class ConfigDir {
 public:
  ConfigDir() {
    char tmpl[] = "/tmp/oomsnap-config-file-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::ofstream(path()) << "ThresholdPercent = 42\n";
  }
  ~ConfigDir() { fs::remove_all(dir_); }
  std::string path() const { return dir_ + "/config.toml"; }
  std::string dir() const { return dir_; }
  void chmod(mode_t mode) const { ASSERT_EQ(::chmod(path().c_str(), mode), 0); }

 private:
  std::string dir_;
};

// load_config's ConfigError, or "" when it loaded.
std::string load_error(const std::string& path) {
  return oomsnap_test::config_error([&] { load_config(path); });
}

}  // namespace

TEST(ConfigFile, RootOwned0644IsRead) {
  ConfigDir d;
  d.chmod(0644);
  if (geteuid() == 0) {
    ASSERT_EQ(::chown(d.path().c_str(), 0, 0), 0);
  }
  EXPECT_EQ(load_error(d.path()), "");
  EXPECT_EQ(load_config(d.path()).threshold_percent, 42);
  d.chmod(0600);
  EXPECT_EQ(load_config(d.path()).threshold_percent, 42);
}

TEST(ConfigFile, GroupOrOtherWritableIsRefusedNamingPathAndMode) {
  ConfigDir d;
  struct Case {
    mode_t mode;
    const char *mode_text, *who;
  };
  for (const Case& c : {Case{0664, "mode 0664", "its group can write it"}, Case{0646, "mode 0646", "everyone can write it"},
                        Case{0666, "mode 0666", "everyone can write it"}, Case{0620, "mode 0620", "its group"}}) {
    d.chmod(c.mode);
    const std::string e = load_error(d.path());
    EXPECT_NE(e.find("'" + d.path() + "'"), std::string::npos) << e;
    EXPECT_NE(e.find(c.mode_text), std::string::npos) << e;
    EXPECT_NE(e.find(c.who), std::string::npos) << e;
    EXPECT_NE(e.find("chmod go-w"), std::string::npos) << e;
  }
}

TEST(ConfigFile, OwnedByAnotherUserIsRefusedNamingPathModeAndOwner) {
  if (geteuid() != 0) GTEST_SKIP() << "chown to another user needs root";
  ConfigDir d;
  d.chmod(0644);
  ASSERT_EQ(::chown(d.path().c_str(), 65534, 65534), 0);
  const std::string e = load_error(d.path());
  EXPECT_NE(e.find("'" + d.path() + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("mode 0644"), std::string::npos) << e;
  EXPECT_NE(e.find("owner uid 65534"), std::string::npos) << e;
  EXPECT_NE(e.find("another user"), std::string::npos) << e;
}

// A Kubernetes ConfigMap is mounted as symlinks (config.toml -> ..data/...):
// followed, and the file reached is the one checked.
TEST(ConfigFile, SymlinkIsFollowedAndItsTargetChecked) {
  ConfigDir d;
  d.chmod(0644);
  const std::string link = d.dir() + "/link.toml";
  fs::create_symlink(d.path(), link);
  EXPECT_EQ(load_config(link).threshold_percent, 42);
  d.chmod(0666);
  const std::string e = load_error(link);
  EXPECT_NE(e.find("mode 0666"), std::string::npos) << e;
}

TEST(ConfigFile, NotARegularFileIsRefused) {
  ConfigDir d;
  const std::string fifo = d.dir() + "/fifo.toml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string e = load_error(fifo);  // returns at once: no writer awaited
  EXPECT_NE(e.find("'" + fifo + "' is not a regular file"), std::string::npos) << e;
  EXPECT_NE(load_error(d.dir()).find("is not a regular file"), std::string::npos);
}

// An agent run as an unprivileged user (a test rig, `oomsnap show` by hand)
// may read its own files and root's, nobody else's.
TEST(ConfigFile, AgentUidOrRootMayOwnIt) {
  struct stat st {};
  st.st_mode = S_IFREG | 0644;
  st.st_uid = 1000;
  EXPECT_EQ(config_file_refusal("/c.toml", st, 1000), "");
  st.st_uid = 0;
  EXPECT_EQ(config_file_refusal("/c.toml", st, 1000), "");
  st.st_uid = 1001;
  EXPECT_EQ(config_file_refusal("/c.toml", st, 1000),
            "refusing '/c.toml' (mode 0644, owner uid 1001): it belongs to another user, and only root or the "
            "agent's uid (1000) may configure the agent; chown it");
}
