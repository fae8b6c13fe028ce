#include "kvroom/api/logging.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace kvroom {

namespace {

std::atomic<bool> json_lines{false};

std::string iso_time(spdlog::log_clock::time_point t) {
  using namespace std::chrono;
  auto secs = system_clock::to_time_t(t);
  auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

/// One JSON object per line on stderr: one fwrite per line, which stdio
/// serializes against other writers, so the sink needs no lock of its own.
class json_sink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    auto level = spdlog::level::to_string_view(msg.level);
    auto line = json_log_line(iso_time(msg.time), std::string(level.data(), level.size()),
                              std::string(msg.logger_name.data(), msg.logger_name.size()),
                              std::string(msg.payload.data(), msg.payload.size()));
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stderr);
  }

  void flush_() override {
    std::fflush(stderr);
  }
};

} // namespace

std::shared_ptr<spdlog::logger> logger() {
  static auto instance = [] {
    if (auto existing = spdlog::get("kvroom"))
      return existing;
    auto created = spdlog::stderr_color_mt("kvroom");
    created->set_level(spdlog::level::info);
    return created;
  }();
  return instance;
}

bool known_log_level(const std::string& level) {
  // spdlog reads an unknown name as "off".
  return spdlog::level::from_str(level) != spdlog::level::off || level == "off";
}

bool set_log_level(const std::string& level) {
  if (!known_log_level(level))
    return false;
  logger()->set_level(spdlog::level::from_str(level));
  return true;
}

bool set_log_format(const std::string& format) {
  if (format != "text" && format != "json")
    return false;
  bool json = format == "json";
  if (json_lines.exchange(json) == json)
    return true;
  auto& sinks = logger()->sinks();
  sinks.clear();
  if (json)
    sinks.push_back(std::make_shared<json_sink>());
  else
    sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  return true;
}

bool log_json() noexcept {
  return json_lines.load(std::memory_order_relaxed);
}

std::string json_log_line(const std::string& time, const std::string& level,
                          const std::string& logger_name, const std::string& payload) {
  nlohmann::ordered_json line;
  line["time"] = time;
  line["level"] = level;
  line["logger"] = logger_name;
  auto event = nlohmann::ordered_json::parse(payload, nullptr, false);
  if (!payload.empty() && payload.front() == '{' && event.is_object()) {
    for (auto& [k, v] : event.items())
      line[k] = v;
  } else {
    line["msg"] = payload;
  }
  // Reasons carry whatever a peer or a scheduler wrote: never a broken line.
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace kvroom
