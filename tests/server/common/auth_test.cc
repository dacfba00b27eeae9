// Tests of server/common/auth.h: the Authorization rules on raw bytes, tenants and their limits.
#include "server/common/auth.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/common/validation.h"

namespace banyan::server {
namespace {

TenantSpec Spec(std::string name, std::vector<std::string> keys, int max_concurrent = 0,
                int64_t max_kv_chunks = 0) {
  TenantSpec t;
  t.name = std::move(name);
  t.keys = std::move(keys);
  t.max_concurrent_requests = max_concurrent;
  t.max_kv_chunks = max_kv_chunks;
  return t;
}

Auth TwoTenants() {
  absl::StatusOr<Auth> auth = Auth::Create({
      Spec("alice", {"sk-alice", "sk-alice-2"}, 2),
      Spec("bob", {"sk-bob"}),
  });
  EXPECT_TRUE(auth.ok()) << auth.status();
  return *auth;
}

std::string TenantOf(const Auth& auth, std::string_view header) {
  absl::StatusOr<const Tenant*> t = auth.Authenticate(header);
  return t.ok() ? (*t)->name() : "refused: " + std::string(t.status().message());
}

TEST(AuthTest, KeysMapToTheirTenant) {
  Auth auth = TwoTenants();
  EXPECT_TRUE(auth.keys_required());
  EXPECT_EQ(TenantOf(auth, "Bearer sk-alice"), "alice");
  EXPECT_EQ(TenantOf(auth, "Bearer sk-alice-2"), "alice");
  EXPECT_EQ(TenantOf(auth, "Bearer sk-bob"), "bob");
  // The scheme is case-insensitive (RFC 6750 / 9110), the key is not.
  EXPECT_EQ(TenantOf(auth, "bearer sk-bob"), "bob");
  EXPECT_EQ(TenantOf(auth, "BEARER sk-bob"), "bob");
  EXPECT_EQ(TenantOf(auth, "BeArEr sk-bob"), "bob");
  EXPECT_EQ(auth.Authenticate("Bearer SK-BOB").status().code(),
            absl::StatusCode::kUnauthenticated);
}

// Whitespace around the whole value is not part of it (RFC 9110 field syntax; HTTP's parser
// drops it before we see it, so gRPC does the same).
TEST(AuthTest, OptionalWhitespaceAroundTheValue) {
  Auth auth = TwoTenants();
  for (const std::string v : {"Bearer sk-bob ", "Bearer sk-bob\t", " Bearer sk-bob", "\tBearer sk-bob  "}) {
    absl::StatusOr<const Tenant*> t = auth.Authenticate(v);
    ASSERT_TRUE(t.ok()) << v << ": " << t.status();
    EXPECT_EQ((*t)->name(), "bob");
  }
}

TEST(AuthTest, RawBytesNothingTrimmedNothingDecoded) {
  Auth auth = TwoTenants();
  const std::vector<std::string> refused = {
      "",
      "Bearer",
      "Bearer ",
      "sk-bob",
      "Bearer  sk-bob",            // two spaces
      "Bearer\tsk-bob",            // tab for the space
      "Bearer sk-bob\r\n",         // line end
      std::string("Bearer sk-bob\0junk", 18),  // NUL, then more
      std::string("Bearer sk-bob\0", 14),      // trailing NUL
      "Bearer %73%6B-bob",         // no percent-decoding
      "Bearer sk-bo",              // prefix of a key
      "Bearer sk-bobb",            // a key as prefix
      "Bearer sk-b\xC3\xB6" "b",   // non-ASCII
      "Bearer sk-bob\x7f",         // DEL
      "Basic c2stYm9i",
      "Bearersk-bob",
      "Token sk-bob",
  };
  for (const std::string& h : refused) {
    absl::StatusOr<const Tenant*> t = auth.Authenticate(h);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnauthenticated) << "'" << h << "'";
    // The message never echoes what was sent.
    if (h.size() > 7) {
      EXPECT_EQ(std::string(t.status().message()).find(h.substr(7)), std::string::npos) << h;
    }
  }
  EXPECT_EQ(auth.Authenticate(std::nullopt).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST(AuthTest, AKeyWithPercentIsComparedAsWritten) {
  absl::StatusOr<Auth> auth = Auth::Create({Spec("p", {"sk-%41b"})});
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ(TenantOf(*auth, "Bearer sk-%41b"), "p");
  EXPECT_FALSE(auth->Authenticate("Bearer sk-Ab").ok());
}

TEST(AuthTest, NoKeysMeansOneOpenDefaultTenant) {
  Auth open;
  EXPECT_FALSE(open.keys_required());
  ASSERT_EQ(open.tenants().size(), 1u);
  EXPECT_EQ(TenantOf(open, "Bearer anything"), kDefaultTenant);
  EXPECT_EQ(TenantOf(open, ""), kDefaultTenant);
  ASSERT_TRUE(open.Authenticate(std::nullopt).ok());

  // A declared key-less "default" brings its limits.
  absl::StatusOr<Auth> limited =
      Auth::Create({Spec(kDefaultTenant, {}, 3)});
  ASSERT_TRUE(limited.ok()) << limited.status();
  EXPECT_FALSE(limited->keys_required());
  EXPECT_EQ((*limited->Authenticate(std::nullopt))->max_concurrent_requests(), 3);
}

TEST(AuthTest, BadSpecsAreRefused) {
  const std::vector<std::vector<TenantSpec>> bad = {
      {Spec("", {"k1"})},
      {Spec("has space", {"k1"})},
      {Spec(std::string(65, 'a'), {"k1"})},
      {Spec("a", {"k1"}), Spec("a", {"k2"})},  // name twice
      {Spec("a", {"k1"}), Spec("b", {"k1"})},  // key in two tenants
      {Spec("a", {})},                         // unreachable
      {Spec("a", {"key with space"})},
      {Spec("a", {"trailing "})},
      {Spec("a", {std::string("nul\0", 4)})},
      {Spec("a", {""})},
      {Spec("a", {std::string(257, 'k')})},
      {Spec("a", {"k1"}, -1)},
      {Spec("a", {"k1"}, 0, -5)},
  };
  for (const auto& specs : bad) {
    absl::StatusOr<Auth> auth = Auth::Create(specs);
    EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument) << specs[0].name;
  }
}

TEST(TenantSlotTest, ConcurrencyLimitPerTenant) {
  Auth auth = TwoTenants();
  const Tenant* alice = *auth.Authenticate("Bearer sk-alice");
  const Tenant* bob = *auth.Authenticate("Bearer sk-bob");
  absl::StatusOr<TenantSlot> a1 = TenantSlot::Acquire(*alice);
  absl::StatusOr<TenantSlot> a2 = TenantSlot::Acquire(*alice);
  ASSERT_TRUE(a1.ok() && a2.ok());
  EXPECT_EQ(alice->in_flight(), 2);
  absl::StatusOr<TenantSlot> a3 = TenantSlot::Acquire(*alice);
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(alice->in_flight(), 2);
  // Another tenant is not affected; unlimited takes any number.
  std::vector<TenantSlot> bobs;
  for (int i = 0; i < 100; ++i) bobs.push_back(*TenantSlot::Acquire(*bob));
  EXPECT_EQ(bob->in_flight(), 100);
  bobs.clear();
  EXPECT_EQ(bob->in_flight(), 0);
  // A slot released (or moved from and destroyed) frees exactly one place.
  TenantSlot moved = *std::move(a1);
  a1 = absl::InternalError("gone");
  EXPECT_EQ(alice->in_flight(), 2);
  moved.Release();
  EXPECT_EQ(alice->in_flight(), 1);
  EXPECT_TRUE(TenantSlot::Acquire(*alice).ok());  // acquired and released at once
  EXPECT_EQ(alice->in_flight(), 1);
  // Copies of an Auth share the counters.
  Auth copy = auth;
  EXPECT_EQ((*copy.Authenticate("Bearer sk-alice"))->in_flight(), 1);
}

TEST(CacheNamespaceTest, TheTenantComesFirstAndUserOnlyNarrowsIt) {
  // Every namespace names its tenant; user and salt can not make one tenant's namespace equal
  // another's, whatever bytes they hold.
  EXPECT_NE(CacheNamespace("alice", "", ""), CacheNamespace("bob", "", ""));
  EXPECT_NE(CacheNamespace("alice", "x", ""), CacheNamespace("bob", "x", ""));
  EXPECT_NE(CacheNamespace("alice", "", ""), CacheNamespace("alice", "x", ""));
  EXPECT_NE(CacheNamespace("a", "b", ""), CacheNamespace("ab", "", ""));
  EXPECT_NE(CacheNamespace("ab", "c", ""), CacheNamespace("a", "bc", ""));
  EXPECT_NE(CacheNamespace("t", "u", "s"), CacheNamespace("t", "us", ""));
  EXPECT_NE(CacheNamespace("t", "u|s1:", ""), CacheNamespace("t", "u", ""));
  // A user string that spells out another tenant's encoded namespace stays inside its own.
  const std::string bob = CacheNamespace("bob", "", "");
  EXPECT_NE(CacheNamespace("alice", bob, ""), bob);
  EXPECT_EQ(CacheNamespace("alice", bob, "").rfind(CacheNamespace("alice", "", "").substr(0, 8), 0),
            0u);
  EXPECT_EQ(CacheNamespace("alice", "u", "s"), CacheNamespace("alice", "u", "s"));
}

}  // namespace
}  // namespace banyan::server
