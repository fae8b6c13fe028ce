#include <cstdio>

#include "kvroom/api/backend.hpp"

#include "commands.hpp"

namespace kvroom::cli {

int run_doctor(int, char**) {
  std::printf("%-8s %-10s %-10s %s\n", "transport", "compiled", "available",
              "detail");
  for (auto& b : probe_backends())
    std::printf("%-9s %-10s %-10s %s\n", b.name.c_str(),
                b.compiled ? "yes" : "no", b.available ? "yes" : "no",
                b.detail.c_str());
  return 0;
}

} // namespace kvroom::cli
