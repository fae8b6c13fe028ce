#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "caf/expected.hpp"

namespace kvroom {

/// 32 random bytes from OpenSSL's CSPRNG. Strings, so messages carry them
/// as they are.
using nonce = std::string;

/// An HMAC-SHA256 tag (32 bytes).
using mac_tag = std::string;

nonce make_nonce();

/// The deployment secret every member holds. Membership is proven by
/// answering a fresh nonce with an HMAC keyed by it; the secret itself never
/// travels. An empty secret is an *insecure* deployment: the same
/// handshakes run with a key everyone knows, so one code path serves both
/// and the only difference is what a stranger can compute.
class deployment_secret {
public:
  deployment_secret() = default;

  explicit deployment_secret(std::string key) : key_(std::move(key)) {
    // nop
  }

  /// Reads a secret file: its bytes, less one trailing newline. Refuses an
  /// empty file, one shorter than 16 bytes and one other users can read.
  static caf::expected<deployment_secret> from_file(const std::string& path);

  bool insecure() const noexcept {
    return key_.empty();
  }

  /// HMAC-SHA256 over `label` and then each part, each part prefixed with
  /// its length so no two different part lists give the same input.
  template <class... Parts>
  mac_tag mac(std::string_view label, const Parts&... parts) const {
    mac_input in;
    in.add(label);
    (in.add(parts), ...);
    return compute(in.bytes);
  }

  /// Compares in constant time; tags of another length never match.
  static bool equal(const mac_tag& x, const mac_tag& y) noexcept;

private:
  struct mac_input {
    std::string bytes;
    void add(std::string_view s);
    void add(int64_t x);
    void add(int32_t x) {
      add(static_cast<int64_t>(x));
    }
    void add(uint64_t x) {
      add(static_cast<int64_t>(x));
    }
    void add(const std::string& s) {
      add(std::string_view{s});
    }
  };

  mac_tag compute(const std::string& input) const;

  std::string key_;
};

} // namespace kvroom
