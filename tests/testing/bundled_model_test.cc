// Where FindBundledModelDir (tests/testing/bundled_model.h) looks for the bundled model: the two
// environment variables in order, an error naming a variable that points at no model, and the
// search upward from the binary's own location (checked by running a copy of this binary from
// another folder).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/bundled_model.h"

namespace banyan::testing {
namespace {

namespace fs = std::filesystem;

// Sets (or, with nullopt, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class BundledModelDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/banyan_bundled_model_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  // Creates DIR/stories260K.bin (empty: only its presence matters here) and returns DIR.
  fs::path PlaceModel(const fs::path& dir) {
    fs::create_directories(dir);
    std::ofstream(dir / kBundledModelFile).put('\0');
    return dir;
  }

  fs::path root_;
  ScopedEnv no_model_dir_{"BANYAN_MODEL_DIR", std::nullopt};
  ScopedEnv no_source_dir_{"BANYAN_SOURCE_DIR", std::nullopt};
};

TEST_F(BundledModelDirTest, ModelDirComesFirst) {
  const fs::path model = PlaceModel(root_ / "elsewhere");
  PlaceModel(root_ / "checkout" / "models" / "stories260K");
  ScopedEnv m("BANYAN_MODEL_DIR", model.string());
  ScopedEnv s("BANYAN_SOURCE_DIR", (root_ / "checkout").string());
  absl::StatusOr<std::string> dir = FindBundledModelDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, model.string());
}

TEST_F(BundledModelDirTest, SourceDirPointsAtACheckout) {
  const fs::path model = PlaceModel(root_ / "checkout" / "models" / "stories260K");
  ScopedEnv s("BANYAN_SOURCE_DIR", (root_ / "checkout").string());
  absl::StatusOr<std::string> dir = FindBundledModelDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, model.string());
}

// A variable that is set but wrong is an error naming it, not a fall-through to another copy
// (the configure-time checkout has the model, so a fall-through would succeed).
TEST_F(BundledModelDirTest, AWrongVariableIsAnErrorNamingIt) {
  {
    ScopedEnv m("BANYAN_MODEL_DIR", (root_ / "nothing").string());
    absl::StatusOr<std::string> dir = FindBundledModelDir();
    ASSERT_FALSE(dir.ok()) << *dir;
    EXPECT_EQ(dir.status().code(), absl::StatusCode::kNotFound);
    EXPECT_NE(dir.status().message().find("BANYAN_MODEL_DIR=" + (root_ / "nothing").string()),
              std::string::npos)
        << dir.status();
  }
  ScopedEnv s("BANYAN_SOURCE_DIR", root_.string());
  absl::StatusOr<std::string> dir = FindBundledModelDir();
  ASSERT_FALSE(dir.ok()) << *dir;
  EXPECT_NE(dir.status().message().find("BANYAN_SOURCE_DIR=" + root_.string()), std::string::npos)
      << dir.status();
}

// Prints what FindBundledModelDir finds; the next test runs it in a copy of this binary.
TEST(BundledModelDirProbe, Print) {
  absl::StatusOr<std::string> dir = FindBundledModelDir();
  std::printf("bundled model dir: %s\n", dir.ok() ? dir->c_str() : dir.status().ToString().c_str());
}

// A copy of this binary in TREE/build/bin, with the variables unset, finds
// TREE/models/stories260K above itself before the configure-time checkout.
TEST_F(BundledModelDirTest, FoundAboveTheBinary) {
  const fs::path model = PlaceModel(root_ / "models" / "stories260K");
  fs::create_directories(root_ / "build" / "bin");
  const fs::path copy = root_ / "build" / "bin" / "probe";
  fs::copy_file(fs::read_symlink("/proc/self/exe"), copy);
  const std::string command = "cd / && env -u BANYAN_MODEL_DIR -u BANYAN_SOURCE_DIR '" +
                              copy.string() + "' --gtest_filter=BundledModelDirProbe.Print";
  FILE* p = popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("bundled model dir: " + model.string() + "\n"), std::string::npos) << out;
}

// Without the variables, this binary (built inside the checkout) finds the checkout's model.
TEST_F(BundledModelDirTest, BuildFolderFindsTheCheckoutsModel) {
  absl::StatusOr<std::string> dir = FindBundledModelDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(fs::is_regular_file(fs::path(*dir) / kBundledModelFile)) << *dir;
}

}  // namespace
}  // namespace banyan::testing
