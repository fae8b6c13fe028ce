// Runner of the conformance body: `transport_conformance_test <transport>
// [catch options]` runs the cases every transport passes ([conformance])
// and those particular to it ([<transport>]). A transport of the table that
// is not compiled in, or cannot run here (no device), prints why and exits
// 77, which CTest reports as skipped, never passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "kvroom/api/backend.hpp"
#include "kvroom/transport/transport_table.hpp"

#include "conformance_selected.hpp"

namespace kvroom::test {

std::string selected_transport;

} // namespace kvroom::test

int main(int argc, char** argv) {
  constexpr int skipped = 77;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <transport> [catch options]\n", argv[0]);
    return 2;
  }
  const kvroom::transport_row* row = nullptr;
  for (auto* r : kvroom::transport_table())
    if (r->name == std::string{argv[1]})
      row = r;
  if (!row) {
    std::fprintf(stderr, "no transport '%s' in the table\n", argv[1]);
    return 2;
  }
  auto probe = row->probe();
  if (!probe.compiled || !probe.available) {
    std::printf("skipped: %s conformance: %s\n", argv[1], probe.detail.c_str());
    return skipped;
  }
  std::printf("%s: %s\n", argv[1], probe.detail.c_str());
  kvroom::test::selected_transport = argv[1];
  std::string tags = "[conformance],[" + kvroom::test::selected_transport + "]";
  std::vector<char*> args{argv[0]};
  for (int i = 2; i < argc; ++i)
    args.push_back(argv[i]);
  args.push_back(tags.data());
  return Catch::Session().run(static_cast<int>(args.size()), args.data());
}
