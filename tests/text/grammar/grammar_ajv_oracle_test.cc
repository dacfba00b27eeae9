// The grammar engine against ajv, an independent JSON Schema validator, and the JSON Schema Test
// Suite: runs tests/oracle/grammar_oracle.mjs under node with grammar_oracle_cli as the engine.
// The script asserts (soundness) that every instance the automaton accepts and every sample it
// generates validates under ajv, and (completeness) that the automaton accepts the canonical
// forms of the instances ajv accepts; it prints its summary and exits non-zero on any
// disagreement, which fails this test.
//
// Skips as a whole (exit 77, ctest's SKIP_RETURN_CODE) only when node or the npm packages
// (tests/oracle/node_modules, fetched by tools/setup.sh) are missing.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/testing/node.h"

namespace {

namespace fs = std::filesystem;

constexpr int kSkipExitCode = 77;

// Why the oracle cannot run here, or "" when it can.
std::string MissingOracle() {
  if (!banyan::testing::NodeAvailable()) return "node is not installed (tools/setup.sh installs it)";
  const fs::path modules = fs::path(BANYAN_SOURCE_DIR) / "tests" / "oracle" / "node_modules";
  for (const char* pkg : {"ajv", "ajv-formats", "json-schema-test-suite"}) {
    if (!fs::exists(modules / pkg / "package.json")) {
      return std::string("tests/oracle/node_modules lacks ") + pkg + " (run tools/setup.sh)";
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (const std::string why = MissingOracle(); !why.empty()) {
    std::printf("[ BANYAN SKIPPED BINARY ] %s: %s; no test ran (exit %d)\n", argv[0], why.c_str(),
                kSkipExitCode);
    return kSkipExitCode;
  }
  std::string command = banyan::testing::NodeCommand() + " '" + BANYAN_SOURCE_DIR +
                        "/tests/oracle/grammar_oracle.mjs' --cli '" + BANYAN_GRAMMAR_ORACLE_CLI +
                        "'";
  for (int i = 1; i < argc; ++i) command += std::string(" '") + argv[i] + "'";
  std::fflush(stdout);
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status)) {
    std::printf("grammar_ajv_oracle: node did not run to completion (%d)\n", status);
    return 1;
  }
  // A 77 from the script would read as a skip; any failure is a failure here.
  return WEXITSTATUS(status) == 0 ? 0 : 1;
}
