#include "kvroom/actors/control/directory/base64.hpp"

#include <cstdint>

#include <openssl/evp.h>

namespace kvroom {

std::string base64_encode(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  auto n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                           reinterpret_cast<const unsigned char*>(bytes.data()),
                           static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> base64_decode(const std::string& text) {
  if (text.size() % 4 != 0)
    return std::nullopt;
  if (text.empty())
    return std::string{};
  std::string out(3 * text.size() / 4, '\0');
  auto n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                           reinterpret_cast<const unsigned char*>(text.data()),
                           static_cast<int>(text.size()));
  if (n < 0)
    return std::nullopt;
  // EVP_DecodeBlock counts padding as zero bytes.
  size_t pad = text[text.size() - 1] == '=' ? (text[text.size() - 2] == '=' ? 2 : 1) : 0;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

} // namespace kvroom
