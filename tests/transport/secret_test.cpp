#include <catch2/catch.hpp>

#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

#include "kvroom/api/secret.hpp"

using namespace kvroom;

TEST_CASE("deployment secret: proofs bind key, label, order and every part") {
  deployment_secret a{"0123456789abcdef-one"}, b{"0123456789abcdef-two"};
  auto n = make_nonce();
  REQUIRE(n.size() == 32);
  CHECK(make_nonce() != n);
  auto tag = a.mac("label", n, int64_t{1}, int64_t{2});
  CHECK(tag.size() == 32);
  CHECK(deployment_secret::equal(tag, a.mac("label", n, int64_t{1}, int64_t{2})));
  CHECK_FALSE(deployment_secret::equal(tag, b.mac("label", n, int64_t{1}, int64_t{2})));
  CHECK_FALSE(deployment_secret::equal(tag, a.mac("other", n, int64_t{1}, int64_t{2})));
  CHECK_FALSE(deployment_secret::equal(tag, a.mac("label", n, int64_t{2}, int64_t{1})));
  // Length prefixes: moving a byte between parts changes the proof.
  CHECK_FALSE(deployment_secret::equal(a.mac("l", std::string{"ab"}, std::string{"c"}),
                                       a.mac("l", std::string{"a"}, std::string{"bc"})));
  CHECK_FALSE(deployment_secret::equal(tag, tag.substr(0, 16)));
  CHECK_FALSE(deployment_secret::equal(std::string{}, std::string{}));
}

TEST_CASE("deployment secret: files must be private and long enough") {
  char dir[] = "/tmp/kvroom-secret-XXXXXX";
  REQUIRE(::mkdtemp(dir));
  std::string path = std::string{dir} + "/s";
  auto write = [&](const std::string& text, mode_t mode) {
    std::ofstream{path} << text;
    ::chmod(path.c_str(), mode);
  };
  write("a long enough deployment secret\n", 0600);
  auto ok = deployment_secret::from_file(path);
  REQUIRE(ok);
  CHECK_FALSE(ok->insecure());
  CHECK(deployment_secret::equal(ok->mac("x"), deployment_secret{"a long enough deployment secret"}.mac("x")));
  write("a long enough deployment secret\n", 0644);
  CHECK_FALSE(deployment_secret::from_file(path));
  write("short\n", 0600);
  CHECK_FALSE(deployment_secret::from_file(path));
  CHECK_FALSE(deployment_secret::from_file(path + ".missing"));
  ::unlink(path.c_str());
  ::rmdir(dir);
}

#include <atomic>
#include <thread>

#include "kvroom/transport/grants.hpp"

TEST_CASE("grant table: writes inside a sender's grant for a live room only") {
  grant_table t;
  REQUIRE(t.grant(7, 1, {byte_range{1000, 100}, byte_range{1100, 50}, byte_range{2000, 10}}));
  std::string why;
  CHECK(t.admit(7, 1, {{1000, 150}}, why)); // merged ranges
  CHECK(t.admit(7, 1, {{2000, 10}, {1049, 1}}, why));
  CHECK_FALSE(t.admit(7, 1, {{1100, 51}}, why));
  CHECK_FALSE(t.admit(7, 1, {{999, 2}}, why));
  CHECK_FALSE(t.admit(7, 1, {{2005, 10}}, why));
  CHECK_FALSE(t.admit(7, 2, {{1000, 1}}, why));
  CHECK_FALSE(t.admit(8, 1, {{1000, 1}}, why));
  // Huge sizes do not wrap around.
  CHECK_FALSE(t.admit(7, 1, {{1000, ~uint64_t{0}}}, why));
  t.revoke(7);
  CHECK_FALSE(t.admit(7, 1, {{1000, 1}}, why));
  CHECK(t.size() == 0);
  grant_table small{1};
  CHECK(small.grant(1, 1, {byte_range{0, 1}}));
  CHECK_FALSE(small.grant(2, 1, {byte_range{0, 1}}));
}

TEST_CASE("grant table: revoke waits for the batch being received, then it sees the revoke") {
  grant_table t;
  REQUIRE(t.grant(7, 1, {byte_range{0, 4096}}));
  std::string why;
  auto permit = t.admit(7, 1, {{0, 4096}}, why);
  REQUIRE(permit);
  std::atomic<bool> revoked{false};
  std::thread other{[&] {
    t.revoke(7);
    revoked = true;
  }};
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(revoked);
  CHECK(permit.revoked());
  permit = grant_table::permit{};
  other.join();
  CHECK(revoked);
}
