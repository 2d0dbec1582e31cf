#include <gtest/gtest.h>

#include "scenarios/units.h"

namespace clustersim {
namespace {

TEST(Units, Sizes) {
  int64_t b = 0;
  std::string why;
  ASSERT_TRUE(parse_size("64MiB", b, why));
  EXPECT_EQ(b, 64LL << 20);
  ASSERT_TRUE(parse_size("1GiB", b, why));
  EXPECT_EQ(b, 1LL << 30);
  ASSERT_TRUE(parse_size("1.5KB", b, why));
  EXPECT_EQ(b, 1500);
  ASSERT_TRUE(parse_size("4096", b, why));
  EXPECT_EQ(b, 4096);
  ASSERT_TRUE(parse_size(" 8 GiB ", b, why));
  EXPECT_EQ(b, 8LL << 30);
  EXPECT_FALSE(parse_size("12 parsecs", b, why));
  EXPECT_NE(why.find("unknown size unit"), std::string::npos);
  EXPECT_FALSE(parse_size("-1MiB", b, why));
  EXPECT_NE(why.find("negative"), std::string::npos);
  EXPECT_FALSE(parse_size("MiB", b, why));
  EXPECT_FALSE(parse_size("0.5B", b, why));
  EXPECT_FALSE(parse_size("1e30B", b, why));
}

TEST(Units, Times) {
  double s = 0;
  std::string why;
  ASSERT_TRUE(parse_time("5us", s, why));
  EXPECT_DOUBLE_EQ(s, 5e-6);
  ASSERT_TRUE(parse_time("2ms", s, why));
  EXPECT_DOUBLE_EQ(s, 2e-3);
  ASSERT_TRUE(parse_time("1.5s", s, why));
  EXPECT_DOUBLE_EQ(s, 1.5);
  ASSERT_TRUE(parse_time("800ns", s, why));
  EXPECT_DOUBLE_EQ(s, 800e-9);
  EXPECT_FALSE(parse_time("2", s, why));  // a bare number is ambiguous
  EXPECT_NE(why.find("no unit"), std::string::npos);
  EXPECT_FALSE(parse_time("2 fortnights", s, why));
  EXPECT_FALSE(parse_time("-2us", s, why));
}

TEST(Units, Bandwidths) {
  double bps = 0;
  std::string why;
  ASSERT_TRUE(parse_bandwidth("400Gbps", bps, why));
  EXPECT_DOUBLE_EQ(bps, 50e9);  // bits per second / 8
  ASSERT_TRUE(parse_bandwidth("450GB/s", bps, why));
  EXPECT_DOUBLE_EQ(bps, 450e9);
  ASSERT_TRUE(parse_bandwidth("25GBps", bps, why));
  EXPECT_DOUBLE_EQ(bps, 25e9);
  ASSERT_TRUE(parse_bandwidth("1GiB/s", bps, why));
  EXPECT_DOUBLE_EQ(bps, 1024.0 * 1024 * 1024);
  EXPECT_FALSE(parse_bandwidth("400", bps, why));
  EXPECT_NE(why.find("no unit"), std::string::npos);
  EXPECT_FALSE(parse_bandwidth("0Gbps", bps, why));
  EXPECT_FALSE(parse_bandwidth("400 furlongs", bps, why));
}

TEST(Units, FormatSize) {
  EXPECT_EQ(format_size(512), "512 B");
  EXPECT_EQ(format_size(64LL << 20), "64 MiB");
  EXPECT_EQ(format_size(3LL << 29), "1.50 GiB");
}

}  // namespace
}  // namespace clustersim

namespace clustersim {
namespace {

// Found by fuzzing: a finite number times its unit could overflow to infinity.
TEST(Units, ValuesThatOverflowWithTheirUnitAreRefused) {
  std::string why;
  double v = 0;
  EXPECT_FALSE(parse_time("1.7e308min", v, why));
  EXPECT_NE(why.find("out of range"), std::string::npos) << why;
  EXPECT_FALSE(parse_bandwidth("1e308Gbps", v, why));
  EXPECT_NE(why.find("out of range"), std::string::npos) << why;
  EXPECT_FALSE(parse_bandwidth("1e308TB/s", v, why));
  EXPECT_FALSE(parse_time("1.7e308s", v, why));  // finite, but past the documented range
}

// Every quantity that becomes picoseconds or bytes has a documented range (units.h): a
// 1 bps NIC or a 1e7 s latency would overflow int64 picoseconds downstream and make a
// run faster, so they are refused where they are read.
TEST(Units, DocumentedRangesAreCheckedAtLoad) {
  std::string why;
  double v = 0;
  int64_t b = 0;
  EXPECT_TRUE(parse_time("1e6s", v, why));
  EXPECT_FALSE(parse_time("1e7s", v, why));
  EXPECT_NE(why.find("at most 1e6 s"), std::string::npos) << why;
  EXPECT_FALSE(parse_bandwidth("1bps", v, why));
  EXPECT_NE(why.find("1Mbps to 1PB/s"), std::string::npos) << why;
  EXPECT_TRUE(parse_bandwidth("1Mbps", v, why));
  // A microsecond in either sign: MICRO SIGN (U+00B5) or GREEK SMALL LETTER MU (U+03BC).
  EXPECT_TRUE(parse_time("5\u00b5s", v, why)) << why;
  EXPECT_DOUBLE_EQ(v, 5e-6);
  EXPECT_TRUE(parse_time("5\u03bcs", v, why)) << why;
  EXPECT_DOUBLE_EQ(v, 5e-6);
  EXPECT_TRUE(parse_bandwidth("1PB/s", v, why)) << why;  // the range's own end, in its own unit
  EXPECT_DOUBLE_EQ(v, 1e15);
  EXPECT_FALSE(parse_bandwidth("2PB/s", v, why));
  EXPECT_NE(why.find("out of range"), std::string::npos) << why;
  EXPECT_TRUE(parse_size("1024TiB", b, why));
  EXPECT_TRUE(parse_size("1PiB", b, why)) << why;
  EXPECT_EQ(b, int64_t{1} << 50);
  EXPECT_FALSE(parse_size("1025TiB", b, why));
  EXPECT_FALSE(parse_size("2PB", b, why));
  EXPECT_NE(why.find("out of range"), std::string::npos) << why;
}

}  // namespace
}  // namespace clustersim
