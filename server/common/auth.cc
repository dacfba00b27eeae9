#include "server/common/auth.h"
#include "server/common/header_value.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace banyan::server {
namespace {

constexpr char kHowTo[] = "send 'Authorization: Bearer <key>' (gRPC: metadata 'authorization')";

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// Whether `given` equals `want`, in time that depends on want.size() only: every byte of `want`
// is read once whatever `given` holds, with no early exit.
bool ConstantTimeEquals(std::string_view given, std::string_view want) {
  unsigned diff = given.size() == want.size() ? 0u : 1u;
  for (size_t i = 0; i < want.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(want[i]);
  }
  return diff == 0;
}

absl::Status Unauthenticated(std::string_view why) {
  return absl::UnauthenticatedError(
      absl::StrCat(absl::string_view(why.data(), why.size()), "; ", kHowTo));
}

}  // namespace

bool IsWellFormedApiKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxApiKeyBytes) return false;
  for (char c : key) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x21 || b > 0x7e) return false;
  }
  return true;
}

absl::Status ValidateTenantSpecs(const std::vector<TenantSpec>& specs) {
  std::set<std::string> names;
  std::set<std::string> keys;
  for (const TenantSpec& t : specs) {
    bool name_ok = !t.name.empty() && t.name.size() <= kMaxTenantNameBytes;
    for (char c : t.name) name_ok = name_ok && IsNameChar(c);
    if (!name_ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("tenant name '", t.name.substr(0, kMaxTenantNameBytes),
                       "': expected 1..", kMaxTenantNameBytes, " characters of [A-Za-z0-9._-]"));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tenant '", t.name, "' is declared twice"));
    }
    if (t.keys.empty() && t.name != kDefaultTenant) {
      return absl::InvalidArgumentError(
          absl::StrCat("tenant '", t.name, "' has no key: nobody could call as it"));
    }
    for (const std::string& k : t.keys) {
      if (!IsWellFormedApiKey(k)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tenant '", t.name, "': an API key must be 1..", kMaxApiKeyBytes,
                         " bytes of visible ASCII (0x21..0x7e: no space, no control byte)"));
      }
      if (!keys.insert(k).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tenant '", t.name, "': an API key is given twice (each key names one tenant)"));
      }
    }
    if (t.max_concurrent_requests < 0 || t.max_kv_chunks < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tenant '", t.name, "': limits must be >= 0 (0: unlimited)"));
    }
  }
  return absl::OkStatus();
}

TenantSlot& TenantSlot::operator=(TenantSlot&& other) noexcept {
  if (this != &other) {
    Release();
    tenant_ = other.tenant_;
    other.tenant_ = nullptr;
  }
  return *this;
}

absl::StatusOr<TenantSlot> TenantSlot::Acquire(const Tenant& tenant) {
  const int limit = tenant.max_concurrent_requests();
  const int before = tenant.in_flight_.fetch_add(1, std::memory_order_acq_rel);
  if (limit > 0 && before >= limit) {
    tenant.in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    return absl::ResourceExhaustedError(
        absl::StrCat("tenant '", tenant.name(), "' already has ", limit,
                     " requests in flight, its limit; retry when one has finished"));
  }
  return TenantSlot(&tenant);
}

void TenantSlot::Release() {
  if (tenant_ == nullptr) return;
  tenant_->in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  tenant_ = nullptr;
}

Auth::Auth() {
  TenantSpec open;
  open.name = kDefaultTenant;
  tenants_.push_back(std::make_shared<const Tenant>(std::move(open)));
}

absl::StatusOr<Auth> Auth::Create(std::vector<TenantSpec> specs) {
  if (absl::Status s = ValidateTenantSpecs(specs); !s.ok()) return s;
  bool any_key = false;
  for (const TenantSpec& t : specs) any_key |= !t.keys.empty();
  Auth auth;
  if (!any_key) {
    // One open tenant; a declared "default" (the only tenant allowed without keys) brings its
    // limits.
    for (TenantSpec& t : specs) {
      if (t.name == kDefaultTenant) auth.tenants_[0] = std::make_shared<const Tenant>(std::move(t));
    }
    return auth;
  }
  auth.tenants_.clear();
  for (TenantSpec& t : specs) {
    if (t.keys.empty()) continue;  // a key-less "default" is unreachable once keys exist
    auto tenant = std::make_shared<const Tenant>(std::move(t));
    for (const std::string& k : tenant->spec_.keys) auth.keys_.push_back({k, tenant.get()});
    auth.tenants_.push_back(std::move(tenant));
  }
  return auth;
}

const Tenant* Auth::Find(std::string_view name) const {
  for (const auto& t : tenants_) {
    if (t->name() == name) return t.get();
  }
  return nullptr;
}

absl::StatusOr<const Tenant*> Auth::Authenticate(
    std::optional<std::string_view> authorization) const {
  if (!keys_required()) return tenants_.front().get();
  if (!authorization.has_value()) return Unauthenticated("missing API key");
  const std::string_view value = StripOptionalWhitespace(*authorization);
  constexpr std::string_view kScheme = "bearer";
  bool scheme_ok = value.size() > kScheme.size() && value[kScheme.size()] == ' ';
  for (size_t i = 0; scheme_ok && i < kScheme.size(); ++i) {
    char c = value[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');  // not locale-dependent
    scheme_ok = c == kScheme[i];
  }
  if (!scheme_ok) {
    return Unauthenticated("the authorization value is not 'Bearer <key>' (one space after "
                           "Bearer)");
  }
  const std::string_view key = value.substr(kScheme.size() + 1);
  if (!IsWellFormedApiKey(key)) {
    return Unauthenticated(
        "invalid API key: a key is 1..256 bytes of visible ASCII, with nothing after it (no "
        "space, tab or control byte)");
  }
  // Every configured key is compared, whichever matches.
  const Tenant* found = nullptr;
  for (const Key& k : keys_) {
    const bool eq = ConstantTimeEquals(key, k.key);
    found = eq ? k.tenant : found;
  }
  if (found == nullptr) return Unauthenticated("incorrect API key");
  return found;
}

}  // namespace banyan::server
