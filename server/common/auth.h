// Who may call the daemon, and as which tenant: API keys, tenants and their limits. Shared by
// the HTTP and gRPC front ends, so both apply exactly the same rules to the same bytes.
//
// Tenants. A tenant is an authenticated identity: each API key belongs to exactly one tenant.
// The tenant, not anything the client writes in a request, is the prefix cache's namespace
// (server/common/validation.h, CacheNamespace): requests of two tenants never share a cached prefix,
// so neither `cached_tokens` nor time to first token tells one tenant anything about another's
// prompts. A request's `user` / `cache_salt` only narrow the namespace within its tenant.
// Without any key configured there is one tenant, "default", and every caller is it.
// What remains, by design: within one namespace (tenant + user + cache_salt) `cached_tokens`
// and time to first token do tell whether a prefix was sent before, as with vLLM's
// `cache_salt`; a tenant whose own clients must not learn each other's prompts gives them
// distinct `cache_salt`s. /metrics counts are totals over all tenants (activity, not content).
//
// The Authorization value (HTTP header `Authorization`, gRPC metadata `authorization`) is
// checked on its raw bytes:
//   - spaces and tabs around the whole value are not part of it: HTTP's field syntax (RFC 9110
//     section 5.5) drops them before any server sees the value, so they are dropped here for
//     gRPC too, and "Bearer KEY " means the same on both front ends;
//   - then the scheme "Bearer" in any letter case, exactly one space (0x20), and the key;
//   - the key is the rest, byte for byte: nothing inside is trimmed or percent-decoded;
//   - a key with any byte outside visible ASCII (0x21..0x7e), a NUL included, is refused before
//     any comparison; configured keys must obey the same rule (checked at start-up);
//   - the key is compared with every configured key, in time that depends only on the
//     configured keys' lengths, not on where or whether it matches.
// A missing or malformed value, or an unknown key, is Unauthenticated with a message that never
// quotes the key.
//
// Limits. max_concurrent_requests bounds a tenant's generation requests in flight (gRPC
// Generate, HTTP completions and chat) over both front ends together: a TenantSlot each, held
// until the answer is complete or the call is cancelled; ResourceExhausted when full (HTTP 429,
// gRPC RESOURCE_EXHAUSTED). Tokenize, Detokenize and ListModels take no slot (they are bounded
// by max_prompt_bytes and the message size). max_kv_chunks is a KV budget the scheduler's
// admission applies (scheduler::Request::tenant_kv_chunks, scheduler/policy.h): the tenant's
// next request waits while its running ones hold the budget, without blocking other tenants.
//
// Thread safety: an Auth is immutable after Create except for the tenants' in-flight counters,
// which are atomic; Authenticate and Acquire may run on any thread. Copies of an Auth share
// their tenants (and counters).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace banyan::server {

// The tenant of every caller when no key is configured, and of the keys given with
// --api-key / "api_keys".
inline constexpr char kDefaultTenant[] = "default";
// Tenant names: 1..64 bytes of [A-Za-z0-9._-].
inline constexpr size_t kMaxTenantNameBytes = 64;
// API keys: 1..256 bytes of visible ASCII (0x21..0x7e).
inline constexpr size_t kMaxApiKeyBytes = 256;

// One tenant as configured (config file "tenants", --tenants FILE, --api-key).
struct TenantSpec {
  std::string name;
  std::vector<std::string> keys;
  int max_concurrent_requests = 0;  // requests in flight, both front ends; 0: unlimited
  int64_t max_kv_chunks = 0;        // 0: unlimited. A KV budget for admission (policy.h).
};

// Checks names (unique, well formed), keys (well formed, each in one tenant only) and limits
// (>= 0). InvalidArgument names the tenant and the rule.
absl::Status ValidateTenantSpecs(const std::vector<TenantSpec>& specs);

// Whether `key` is a well-formed API key: 1..kMaxApiKeyBytes bytes, all in 0x21..0x7e.
bool IsWellFormedApiKey(std::string_view key);

class Tenant {
 public:
  explicit Tenant(TenantSpec spec) : spec_(std::move(spec)) {}
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;

  const std::string& name() const { return spec_.name; }
  int max_concurrent_requests() const { return spec_.max_concurrent_requests; }
  int64_t max_kv_chunks() const { return spec_.max_kv_chunks; }
  int in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

 private:
  friend class TenantSlot;
  friend class Auth;
  const TenantSpec spec_;
  mutable std::atomic<int> in_flight_{0};
};

// One request in flight for a tenant: RAII, move-only. Hold it for as long as the request runs
// (until its response has been delivered or the call is cancelled).
class TenantSlot {
 public:
  TenantSlot() = default;
  TenantSlot(TenantSlot&& other) noexcept : tenant_(other.tenant_) { other.tenant_ = nullptr; }
  TenantSlot& operator=(TenantSlot&& other) noexcept;
  TenantSlot(const TenantSlot&) = delete;
  TenantSlot& operator=(const TenantSlot&) = delete;
  ~TenantSlot() { Release(); }

  // Takes a slot of `tenant`: ResourceExhausted (naming the tenant and its limit) when it has
  // max_concurrent_requests in flight already.
  static absl::StatusOr<TenantSlot> Acquire(const Tenant& tenant);

  const Tenant* tenant() const { return tenant_; }
  void Release();

 private:
  explicit TenantSlot(const Tenant* tenant) : tenant_(tenant) {}
  const Tenant* tenant_ = nullptr;
};

class Auth {
 public:
  // No key: one tenant, "default", and Authenticate accepts every caller as it.
  Auth();
  // From validated specs (ValidateTenantSpecs runs again here). With no key in any spec, this
  // is the no-key Auth above (the specs' limits of "default", if given, apply).
  static absl::StatusOr<Auth> Create(std::vector<TenantSpec> specs);

  // Whether callers must present a key.
  bool keys_required() const { return !keys_.empty(); }
  // The tenant of a raw Authorization value (nullopt: the request carried none), under the
  // rules at the top of this file. Without keys configured every caller, whatever it sends,
  // is the tenant "default".
  absl::StatusOr<const Tenant*> Authenticate(std::optional<std::string_view> authorization) const;

  const std::vector<std::shared_ptr<const Tenant>>& tenants() const { return tenants_; }
  const Tenant* Find(std::string_view name) const;

 private:
  struct Key {
    std::string key;
    const Tenant* tenant;
  };
  std::vector<std::shared_ptr<const Tenant>> tenants_;
  std::vector<Key> keys_;  // every key of every tenant
};

// Free-function form of Auth::Authenticate.
inline absl::StatusOr<const Tenant*> Authenticate(std::optional<std::string_view> authorization,
                                                  const Auth& auth) {
  return auth.Authenticate(authorization);
}

}  // namespace banyan::server
