#include "report.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace kvroom::bench {

double percentile(std::vector<double> xs, double p) {
  if (xs.empty())
    return 0.0;
  std::sort(xs.begin(), xs.end());
  auto rank = p / 100.0 * static_cast<double>(xs.size() - 1);
  auto lo = static_cast<size_t>(std::floor(rank));
  auto hi = static_cast<size_t>(std::ceil(rank));
  return xs[lo] + (xs[hi] - xs[lo]) * (rank - static_cast<double>(lo));
}

// Every value goes through nlohmann-json: its escaping, its number format.
json_object& json_object::num(const std::string& key, double value) {
  // Counts print as integers, measurements as they are.
  std::string text = "null";
  if (std::isfinite(value))
    text = value == std::floor(value) && std::fabs(value) < 9.0e15
             ? nlohmann::json(static_cast<int64_t>(value)).dump()
             : nlohmann::json(value).dump();
  fields_.emplace_back(key, std::move(text));
  return *this;
}

json_object& json_object::str(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, nlohmann::json(value).dump());
  return *this;
}

json_object& json_object::raw(const std::string& key, const std::string& json) {
  fields_.emplace_back(key, json);
  return *this;
}

std::string json_object::dump(int indent) const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (auto& [key, text] : fields_)
    out[key] = nlohmann::ordered_json::parse(text);
  return out.dump(indent);
}

std::string json_array(const std::vector<std::string>& items) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (auto& x : items)
    out.push_back(nlohmann::ordered_json::parse(x));
  return out.dump();
}

std::string report_goals(const std::vector<goal>& goals) {
  std::vector<std::string> items;
  if (!goals.empty())
    std::printf("goals (ratios within this run):\n");
  for (auto& g : goals) {
    std::printf("  %-66s %8.2f  %s %.2f  %s\n", g.what.c_str(), g.ratio(),
                g.at_most ? "<=" : ">=", g.target, g.met() ? "met" : "NOT MET");
    items.push_back(json_object{}
                      .str("what", g.what)
                      .num("value", g.value)
                      .num("baseline", g.baseline)
                      .num("ratio", g.ratio())
                      .num("target", g.target)
                      .str("compare", g.at_most ? "at_most" : "at_least")
                      .raw("goal_met", g.met() ? "true" : "false")
                      .dump());
  }
  std::fflush(stdout);
  return json_array(items);
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out{path};
  out << text << "\n";
  if (!out) {
    std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

} // namespace kvroom::bench
