#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvroom::bench {

/// Percentile of `xs` (copied and sorted), p in [0, 100].
double percentile(std::vector<double> xs, double p);

/// A flat JSON object built field by field; values are numbers, strings or
/// nested raw JSON. Benchmarks print it and write it with `--json`.
class json_object {
public:
  json_object& num(const std::string& key, double value);
  json_object& str(const std::string& key, const std::string& value);
  json_object& raw(const std::string& key, const std::string& json);
  std::string dump(int indent = 2) const;

private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

/// A JSON array of raw JSON values.
std::string json_array(const std::vector<std::string>& items);

/// Writes `text` to `path`; false (with a message on stderr) on failure.
bool write_file(const std::string& path, const std::string& text);

/// Resident set size of this process in bytes.
uint64_t rss_bytes();

} // namespace kvroom::bench
