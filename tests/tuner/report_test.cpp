// The report: the SVG is well-formed enough for a browser (one root, balanced tags, one polyline per path
// and bucket, escaped text) and the text table shows the crossings and the split grid.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "qattn/inflection.hpp"

namespace qattn {
namespace {

InflectionTable sample_table() {
  InflectionTable t;
  t.family = "decode qk=int4:per_token pv=int4:per_token out=bf16 d=128 gqa=4 arch=sm_90a";
  t.paths = {{"gemv", Dataflow::gemv, {Tiling{4, 64, 4, 2}, Tiling{8, 64, 4, 2}}},
             {"mma_bm16", Dataflow::mma, {Tiling{16, 64, 4, 2}}},
             {"mma_bm32", Dataflow::mma, {Tiling{32, 64, 4, 2}}}};
  for (int kv : {1024, 65536}) {
    DataflowBucket b;
    b.kv_len = kv;
    b.rows = {4, 8, 12, 16, 24, 32, 48, 64};
    b.us.resize(3);
    for (int m : b.rows) {
      b.us[0].push_back(m == 48 ? NAN : 5.0 * m * kv / 1024);
      b.us[1].push_back(40.0 * kv / 1024 * (m > 16 ? 2 : 1));
      b.us[2].push_back(60.0 * kv / 1024);
    }
    b.choice = find_crossings(b.rows, b.us);
    t.buckets.push_back(b);
  }
  return t;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(ReportSvg, IsWellFormedWithOnePolylinePerPathAndBucket) {
  const InflectionTable t = sample_table();
  const std::string svg = report_svg(t, "NVIDIA H100 <80GB> & \"friends\"");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count(svg, "<polyline"), 3 * 2);
  // Tags balance: every element opened is closed or self-closed.
  const std::regex open_tag("<[a-z]+(\\s[^>]*[^/>])?>"), self_closed("<[a-z]+[^>]*/>"), close_tag("</[a-z]+>");
  const auto n = [&](const std::regex& r) {
    return std::distance(std::sregex_iterator(svg.begin(), svg.end(), r), std::sregex_iterator());
  };
  EXPECT_EQ(n(open_tag), n(close_tag));
  EXPECT_GT(n(self_closed), 10);
  for (const char* tag : {"svg", "g", "text", "circle", "title"})
    EXPECT_EQ(count(svg, std::string("<") + tag + " ") + count(svg, std::string("<") + tag + ">"),
              count(svg, std::string("</") + tag + ">"))
        << tag;
  // Text is escaped: the device name's markup characters never appear raw.
  EXPECT_NE(svg.find("NVIDIA H100 &lt;80GB&gt; &amp; &quot;friends&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("<80GB>"), std::string::npos);
  // The title names the family; every crossing inside the range is a dashed line with its label.
  EXPECT_NE(svg.find(t.family), std::string::npos);
  EXPECT_NE(svg.find("M1 = 12"), std::string::npos) << svg.substr(0, 400);
  EXPECT_NE(svg.find("M2 = 24"), std::string::npos);
  EXPECT_EQ(count(svg, "stroke-dasharray"), 1 + 2 * 2) << "legend + two crossings per bucket";
  EXPECT_NE(svg.find("log2 scale"), std::string::npos);
  EXPECT_NE(svg.find("time (us, log scale)"), std::string::npos);
  // The failed gemv point at M 48 is left out of the line: 7 of 8 points.
  const std::smatch first = [&] {
    std::smatch m;
    std::regex_search(svg, m, std::regex("<polyline[^>]*points=\"([^\"]*)\""));
    return m;
  }();
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(count(first[1].str(), ","), 7);
}

TEST(ReportSvg, NothingMeasuredStillDrawsAValidPicture) {
  InflectionTable t = sample_table();
  for (auto& b : t.buckets)
    for (auto& curve : b.us)
      for (double& us : curve) us = NAN;
  const std::string svg = report_svg(t, "");
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 6);
}

TEST(ReportText, ShowsCrossingsRangesAndSplits) {
  const InflectionTable t = sample_table();
  SplitTable s;
  s.family = t.family;
  s.cells = {{1, 1024, Dataflow::gemv, Tiling{4, 64, 4, 2}, {1, 2, 4}, {9, 5, 3}, 4},
             {1, 65536, Dataflow::gemv, Tiling{4, 64, 4, 2}, {1, 64}, {NAN, NAN}, 0},
             {64, 1024, Dataflow::gemv, Tiling{4, 64, 4, 2}, {1}, {2}, 1}};
  const std::string text = report_text(&t, &s);
  EXPECT_EQ(text.rfind(t.family + "\n", 0), 0u) << text;
  EXPECT_NE(text.find("gemv 1-11, mma_bm16 12-23, mma_bm32 24-64"), std::string::npos) << text;
  EXPECT_NE(text.find("1.000"), std::string::npos) << "the monotone choice loses nothing here";
  EXPECT_NE(text.find(std::string("  1       ") + "       4" + "       x\n"), std::string::npos)
      << "bh 1: 4 splits at kv 1024, every count failed at 64k\n" << text;
  EXPECT_NE(text.find(std::string("  64      ") + "       1" + "       -\n"), std::string::npos) << "not measured";
  EXPECT_NE(text.find("   65536"), std::string::npos);
  EXPECT_EQ(count(text, t.family), 1) << "the family is printed once for both tables";
  const std::string only_splits = report_text(nullptr, &s);
  EXPECT_EQ(only_splits.rfind(t.family, 0), 0u);
}

}  // namespace
}  // namespace qattn
