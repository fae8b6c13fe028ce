// Runner of the hardware conformance suite: `transport_hw_test <backend>
// [catch options]`. Without the backend compiled in, or without its device,
// it prints why and exits 77, which ctest reports as skipped, never passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "kvroom/transport/factory.hpp"

#include "hw_selected.hpp"

namespace kvroom::test {

std::string selected_backend;

} // namespace kvroom::test

int main(int argc, char** argv) {
  constexpr int skipped = 77;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s verbs|cuda [catch options]\n", argv[0]);
    return 2;
  }
  kvroom::test::selected_backend = argv[1];
  bool known = false;
  for (auto& b : kvroom::probe_backends()) {
    if (b.name != argv[1])
      continue;
    known = true;
    if (!b.compiled || !b.available) {
      std::printf("skipped: %s conformance: %s\n", argv[1], b.detail.c_str());
      return skipped;
    }
    std::printf("%s: %s\n", argv[1], b.detail.c_str());
  }
  if (!known) {
    std::fprintf(stderr, "unknown backend '%s'\n", argv[1]);
    return 2;
  }
  // Catch sees the options after the backend name, and the tests tagged
  // with it.
  std::string tag = "[" + kvroom::test::selected_backend + "]";
  std::vector<char*> args{argv[0]};
  for (int i = 2; i < argc; ++i)
    args.push_back(argv[i]);
  args.push_back(tag.data());
  return Catch::Session().run(static_cast<int>(args.size()), args.data());
}
