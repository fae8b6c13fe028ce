#pragma once

// Base64, standard alphabet, padded (OpenSSL's): how a signed entry carries
// CAF's binary form, and how etcd's JSON gateway writes keys and values.

#include <optional>
#include <string>

namespace kvroom {

std::string base64_encode(const std::string& bytes);

/// Nothing for text that is not base64.
std::optional<std::string> base64_decode(const std::string& text);

} // namespace kvroom
