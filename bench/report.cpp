#include "report.hpp"

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

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

} // namespace

json_object& json_object::num(const std::string& key, double value) {
  std::ostringstream os;
  if (std::isfinite(value))
    os << value;
  else
    os << "null";
  fields_.emplace_back(key, os.str());
  return *this;
}

json_object& json_object::str(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, quote(value));
  return *this;
}

json_object& json_object::raw(const std::string& key, const std::string& json) {
  fields_.emplace_back(key, json);
  return *this;
}

std::string json_object::dump(int indent) const {
  std::string pad(static_cast<size_t>(indent), ' ');
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    out += i == 0 ? "\n" : ",\n";
    out += pad + quote(fields_[i].first) + ": " + fields_[i].second;
  }
  out += "\n" + std::string(static_cast<size_t>(indent > 2 ? indent - 2 : 0), ' ') + "}";
  return out;
}

std::string json_array(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i)
    out += (i ? ", " : "") + items[i];
  return out + "]";
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

uint64_t rss_bytes() {
  std::ifstream statm{"/proc/self/statm"};
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

} // namespace kvroom::bench
