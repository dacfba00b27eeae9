// The route table (server/http/endpoints.h), row by row: each route's right method reaches its
// handler, another method gets 405 with the route's Allow, an unknown path 404, and a route that
// needs a key refuses a request without one (401). The expectations below name every route
// once, so a route added to the table without a row here fails the first test.
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/http/endpoints.h"
#include "tests/server/http/http_test_util.h"

namespace banyan::server::http {
namespace {

using namespace http_test;

constexpr char kKey[] = "sk-routes";

// One request per route that its handler answers with 200; `marker` is in that answer only.
struct RouteCase {
  std::string_view route;  // Route::path
  std::string method;
  std::string path;
  std::string body;
  std::string marker;
};

const std::vector<RouteCase>& Cases() {
  static const std::vector<RouteCase> cases = {
      {"/v1/completions", "POST", "/v1/completions",
       R"({"prompt": "Once", "max_tokens": 2, "temperature": 0})", "\"text_completion\""},
      {"/v1/chat/completions", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})",
       "\"chat.completion\""},
      {"/v1/models", "GET", "/v1/models", "", "\"list\""},
      {"/v1/models/", "GET", std::string("/v1/models/") + kModel, "", "\"owned_by\""},
      {"/tokenize", "POST", "/tokenize", R"({"prompt": "Once"})", "\"max_model_len\""},
      {"/detokenize", "POST", "/detokenize", R"({"tokens": [1, 2]})", "\"prompt\""},
      {"/health", "GET", "/health", "", "\"ok\""},
      {"/ready", "GET", "/ready", "", "\"ready\""},
      {"/metrics", "GET", "/metrics", "", "# TYPE"},
      {"/debug/kv_blocks", "GET", "/debug/kv_blocks", "", "\"block_size\""},
  };
  return cases;
}

HttpRequest Request(std::string method, std::string path) {
  HttpRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  return r;
}

httplib::Headers WithKey() { return {{"Authorization", std::string("Bearer ") + kKey}}; }

class RoutesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerOptions opts;
    opts.api_keys = {kKey};
    opts.debug_kv_blocks = true;
    stack_ = new Stack({}, opts);
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  static int port() { return stack_->port(); }

  static Stack* stack_;
};

Stack* RoutesTest::stack_ = nullptr;

TEST(RouteTableTest, EveryRouteHasOneCaseAndEachCaseFindsItsRoute) {
  std::set<std::string_view> routes;
  for (const Route& r : Routes()) {
    EXPECT_TRUE(routes.insert(r.path).second) << "twice in the table: " << r.path;
    EXPECT_TRUE(r.allow == "POST" || r.allow == "GET, HEAD") << r.path << ": " << r.allow;
    EXPECT_NE(r.handler, nullptr) << r.path;
  }
  std::set<std::string_view> covered;
  for (const RouteCase& c : Cases()) {
    covered.insert(c.route);
    const Route* r = FindRoute(c.path);
    ASSERT_NE(r, nullptr) << c.path;
    EXPECT_EQ(r->path, c.route) << c.path;
    EXPECT_TRUE(AllowsMethod(*r, c.method)) << c.path;
  }
  EXPECT_EQ(covered, routes);
}

TEST(RouteTableTest, MethodsAndProbes) {
  const Route* health = FindRoute("/health");
  ASSERT_NE(health, nullptr);
  EXPECT_TRUE(AllowsMethod(*health, "GET"));
  EXPECT_TRUE(AllowsMethod(*health, "HEAD"));
  EXPECT_FALSE(AllowsMethod(*health, "POST"));
  EXPECT_FALSE(AllowsMethod(*health, "GE"));
  EXPECT_FALSE(AllowsMethod(*health, ""));
  EXPECT_TRUE(IsProbeRequest(Request("GET", "/ready")));
  EXPECT_TRUE(IsProbeRequest(Request("HEAD", "/health")));
  EXPECT_FALSE(IsProbeRequest(Request("POST", "/health")));
  EXPECT_FALSE(IsProbeRequest(Request("GET", "/metrics")));
  EXPECT_EQ(FindRoute("/v1/models/any/thing")->path, "/v1/models/");
  EXPECT_EQ(FindRoute("/v1/modelsx"), nullptr);
  EXPECT_EQ(FindRoute("/v1/completions/"), nullptr);
  EXPECT_EQ(FindRoute(""), nullptr);
}

TEST_F(RoutesTest, RightMethodReachesTheHandler) {
  for (const RouteCase& c : Cases()) {
    Reply r = Send(port(), c.method, c.path, c.body, WithKey());
    EXPECT_EQ(r.status, 200) << c.method << " " << c.path << ": " << r.body;
    EXPECT_NE(r.body.find(c.marker), std::string::npos) << c.path << ": " << r.body;
  }
}

TEST_F(RoutesTest, WrongMethodIs405WithAllow) {
  for (const Route& route : Routes()) {
    const RouteCase* c = nullptr;
    for (const RouteCase& rc : Cases()) {
      if (rc.route == route.path) c = &rc;
    }
    ASSERT_NE(c, nullptr) << route.path;
    for (const std::string method : {"GET", "POST", "PUT", "DELETE"}) {
      if (AllowsMethod(route, method)) continue;
      Reply r = Send(port(), method, c->path, "{}", WithKey());
      ExpectOpenAIError(r, 405, nullptr, "method_not_allowed");
      auto allow = r.headers.find("Allow");
      ASSERT_NE(allow, r.headers.end()) << method << " " << c->path;
      EXPECT_EQ(allow->second, route.allow) << method << " " << c->path;
    }
  }
}

TEST_F(RoutesTest, UnknownPathIs404) {
  for (const std::string path :
       {"/", "/v1", "/v1/modelsx", "/v1/completions/", "/healthz", "/debug", "/v2/completions"}) {
    for (const std::string method : {"GET", "POST"}) {
      Reply r = Send(port(), method, path, "{}", WithKey());
      ExpectOpenAIError(r, 404, nullptr, "not_found");
      EXPECT_EQ(r.headers.find("Allow"), r.headers.end()) << path;
    }
  }
}

TEST_F(RoutesTest, KeyRequiredWhereTheTableSays) {
  for (const RouteCase& c : Cases()) {
    const Route* route = FindRoute(c.path);
    ASSERT_NE(route, nullptr);
    for (const httplib::Headers& headers :
         {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer sk-wrong"}}}) {
      Reply r = Send(port(), c.method, c.path, c.body, headers);
      if (route->needs_key) {
        ExpectOpenAIError(r, 401, nullptr, "invalid_api_key");
        auto www = r.headers.find("WWW-Authenticate");
        ASSERT_NE(www, r.headers.end()) << c.path;
        EXPECT_EQ(www->second, "Bearer");
      } else {
        EXPECT_EQ(r.status, 200) << c.path << ": " << r.body;
      }
    }
  }
  // Unknown paths need a key too: without one, nothing tells which paths exist.
  ExpectOpenAIError(Send(port(), "GET", "/v1/nope"), 401, nullptr, "invalid_api_key");
}

}  // namespace
}  // namespace banyan::server::http
