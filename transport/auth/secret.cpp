#include "kvroom/api/secret.hpp"

#include <fstream>
#include <iterator>
#include <stdexcept>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include "kvroom/api/errors.hpp"

namespace kvroom {

nonce make_nonce() {
  nonce out(32, '\0');
  // RAND_bytes fails only when the kernel cannot seed it: no safe nonce is
  // possible then, and a guessable one would defeat the handshake.
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) != 1)
    throw std::runtime_error("kvroom: OpenSSL RAND_bytes failed");
  return out;
}

caf::expected<deployment_secret> deployment_secret::from_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return make_error(errc::invalid_config, "secret file " + path + " cannot be read");
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    return make_error(errc::invalid_config, "secret file " + path
                                              + " is readable by other users (chmod 600 it)");
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return make_error(errc::invalid_config, "secret file " + path + " cannot be read");
  std::string key{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  if (!key.empty() && key.back() == '\n')
    key.pop_back();
  if (key.size() < 16)
    return make_error(errc::invalid_config, "secret file " + path
                                              + " holds fewer than 16 bytes");
  return deployment_secret{std::move(key)};
}

void deployment_secret::mac_input::add(std::string_view s) {
  add(static_cast<int64_t>(s.size()));
  bytes.append(s.data(), s.size());
}

void deployment_secret::mac_input::add(int64_t x) {
  for (int i = 0; i < 8; ++i)
    bytes.push_back(static_cast<char>((static_cast<uint64_t>(x) >> (8 * i)) & 0xff));
}

mac_tag deployment_secret::compute(const std::string& input) const {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), out, &len);
  return mac_tag{reinterpret_cast<const char*>(out), len};
}

bool deployment_secret::equal(const mac_tag& x, const mac_tag& y) noexcept {
  return x.size() == y.size() && !x.empty()
         && CRYPTO_memcmp(x.data(), y.data(), x.size()) == 0;
}

} // namespace kvroom
