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

/// A performance goal of the project (issue #33), checked as a ratio
/// measured in one run against a baseline of the same run: `value` over
/// `baseline`, met when at least `target` (or at most, with `at_most`).
struct goal {
  std::string what;
  double value = 0;
  double baseline = 0;
  double target = 0;
  bool at_most = false;

  double ratio() const noexcept {
    return baseline > 0 ? value / baseline : 0.0;
  }

  bool met() const noexcept {
    return baseline > 0 && (at_most ? ratio() <= target : ratio() >= target);
  }
};

/// Prints each goal on a line of its own (ratio, target, met or not) and
/// returns them as a JSON array (`what`, `value`, `baseline`, `ratio`,
/// `target`, `goal_met`).
std::string report_goals(const std::vector<goal>& goals);

/// Writes `text` to `path`; false (with a message on stderr) on failure.
bool write_file(const std::string& path, const std::string& text);

} // namespace kvroom::bench
