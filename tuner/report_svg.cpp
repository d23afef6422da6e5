// `qattn report` output: a text table of the decisions and a hand-written SVG of the dataflow sweep
// (no plotting library: the picture is a few panels of polylines, and a browser renders it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <vector>
#include <sstream>

#include "qattn/inflection.hpp"
#include "qattn/linear_inflection.hpp"

namespace qattn {
namespace {

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string crossing_text(int m) { return m >= kNeverRows ? "-" : std::to_string(m); }
std::string crossing_text_linear(int m) { return m > kMaxLinearTunedRows ? "never" : std::to_string(m); }

// "gemv 1-7, mma_bm16 8-23, mma_bm32 24-64, mma_bm64 never": what each path serves.
std::string ranges_text(const InflectionTable& t, const DataflowBucket& b) {
  std::string out;
  for (size_t k = 0; k < t.paths.size(); ++k) {
    const int lo = k == 0 ? 1 : b.choice.crossings[k - 1];
    const int hi = k + 1 < t.paths.size() ? std::min(b.choice.crossings[k], kNeverRows) - 1 : kMaxDecodeRows;
    out += (k ? ", " : "") + t.paths[k].name + " ";
    out += lo > hi || lo > kMaxDecodeRows ? "never" : std::to_string(lo) + "-" + std::to_string(hi);
  }
  return out;
}

// Distinguishable on white and for the common colour-vision deficiencies (Okabe-Ito).
const char* kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"};
const char* colour(size_t k) { return kColours[k % (sizeof kColours / sizeof kColours[0])]; }

}  // namespace

std::string report_text(const InflectionTable* dataflow, const SplitTable* splits) {
  std::ostringstream os;
  if (dataflow) {
    const InflectionTable& t = *dataflow;
    os << t.family << "\n  dataflow (batch " << t.batch << ", heads_kv " << t.heads_kv << "), paths:";
    for (const DecodePath& p : t.paths) os << ' ' << p.name;
    os << "\n  ";
    char line[64];
    std::snprintf(line, sizeof line, "%-9s", "kv");
    os << line;
    for (size_t k = 1; k < t.paths.size(); ++k) {
      std::snprintf(line, sizeof line, " %5s", ("M" + std::to_string(k)).c_str());
      os << line;
    }
    os << "  cost   M served by each path\n";
    for (const DataflowBucket& b : t.buckets) {
      std::snprintf(line, sizeof line, "  %-9d", b.kv_len);
      os << line;
      for (int c : b.choice.crossings) {
        std::snprintf(line, sizeof line, " %5s", crossing_text(c).c_str());
        os << line;
      }
      // Relative to always taking each point's fastest path: 1.00 = the monotone choice loses nothing.
      const double per_point = b.rows.empty() ? 1.0 : b.choice.cost / static_cast<double>(b.rows.size());
      os << "  " << fmt("%.3f", per_point) << "  " << ranges_text(t, b) << "\n";
    }
  }
  if (splits) {
    const SplitTable& t = *splits;
    if (!dataflow || dataflow->family != t.family) os << t.family << "\n";
    os << "  splits (q_len " << t.q_len << ", within " << fmt("%.0f", t.tolerance * 100)
       << "% of the fastest take the fewest; - not measured, x every count failed)\n";
    std::set<long long> bhs;
    std::set<int> kvs;
    for (const SplitCell& c : t.cells) bhs.insert(c.batch_heads), kvs.insert(c.kv_len);
    char cell[64];
    os << "  bh \\ kv ";
    for (int kv : kvs) {
      std::snprintf(cell, sizeof cell, " %7d", kv);
      os << cell;
    }
    os << "\n";
    for (long long bh : bhs) {
      std::snprintf(cell, sizeof cell, "  %-8lld", bh);
      os << cell;
      for (int kv : kvs) {
        std::string v = "-";
        for (const SplitCell& c : t.cells)
          if (c.batch_heads == bh && c.kv_len == kv) v = c.chosen > 0 ? std::to_string(c.chosen) : "x";
        std::snprintf(cell, sizeof cell, " %7s", v.c_str());
        os << cell;
      }
      os << "\n";
    }
  }
  return os.str();
}

namespace {

// One panel's data: curves over a shared x (log2 of M) and the crossings between them.
struct Panel {
  std::string title;
  const std::vector<int>* rows;
  const std::vector<std::vector<double>>* us;   // [curve][point]
  std::vector<std::string> names;               // [curve]
  const std::vector<int>* crossings;
  std::string x_label;
};

struct Frame {
  double width = 960, left = 80, right = 30, panel_h = 260, gap = 70, top = 90;
  double plot_w() const { return width - left - right; }
};

// The page: title, subtitle and legend on top, then the panels stacked.
std::string draw(const std::string& title, const std::string& subtitle, const std::vector<Panel>& panels, int max_m) {
  const Frame f;
  const double plot_w = f.plot_w(), left = f.left, panel_h = f.panel_h;
  const double height = f.top + static_cast<double>(panels.size()) * (panel_h + f.gap) + 20;
  int lo_m = max_m, hi_m = 1;
  for (const Panel& p : panels)
    for (int m : *p.rows) lo_m = std::min(lo_m, m), hi_m = std::max(hi_m, m);
  if (lo_m >= hi_m) lo_m = 1, hi_m = std::max(hi_m, 2);
  const double x_lo = std::log2(lo_m), x_hi = std::log2(hi_m);
  const auto x_of = [&](double m) { return left + (std::log2(m) - x_lo) / (x_hi - x_lo) * plot_w; };

  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << f.width << "\" height=\"" << height << "\" viewBox=\"0 0 "
     << f.width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  os << "<rect x=\"0\" y=\"0\" width=\"" << f.width << "\" height=\"" << height << "\" fill=\"white\"/>\n";
  os << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">" << escape_xml(title) << "</text>\n";
  os << "<text x=\"" << left << "\" y=\"44\">" << escape_xml(subtitle) << "</text>\n";
  double lx = left;
  const std::vector<std::string> names = panels.empty() ? std::vector<std::string>{} : panels.front().names;
  for (size_t k = 0; k < names.size(); ++k) {   // legend
    os << "<line x1=\"" << lx << "\" y1=\"64\" x2=\"" << lx + 24 << "\" y2=\"64\" stroke=\"" << colour(k)
       << "\" stroke-width=\"3\"/>\n<text x=\"" << lx + 30 << "\" y=\"68\">" << escape_xml(names[k]) << "</text>\n";
    lx += 40 + 8.0 * static_cast<double>(names[k].size()) + 20;
  }
  os << "<line x1=\"" << lx << "\" y1=\"64\" x2=\"" << lx + 24
     << "\" y2=\"64\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>\n<text x=\"" << lx + 30
     << "\" y=\"68\">crossing (next path from this M on)</text>\n";

  for (size_t pi = 0; pi < panels.size(); ++pi) {
    const Panel& p = panels[pi];
    const double y0 = f.top + static_cast<double>(pi) * (panel_h + f.gap) + 20, y1 = y0 + panel_h;
    // Log y: the decision weighs ratios (time / best), and on a log axis a ratio is a fixed distance.
    double y_min = INFINITY, y_max = 0;
    for (const auto& curve : *p.us)
      for (double us : curve)
        if (std::isfinite(us) && us > 0) y_min = std::min(y_min, us), y_max = std::max(y_max, us);
    if (!(y_max > 0)) y_min = 1, y_max = 10;
    const double ly_lo = std::log10(y_min / 1.15), ly_hi = std::log10(y_max * 1.15);
    const auto y_of = [&](double us) { return y1 - (std::log10(us) - ly_lo) / (ly_hi - ly_lo) * panel_h; };

    os << "<g>\n<text x=\"" << left << "\" y=\"" << y0 - 8 << "\" font-weight=\"bold\">" << escape_xml(p.title) << "</text>\n";
    os << "<rect x=\"" << left << "\" y=\"" << y0 << "\" width=\"" << plot_w << "\" height=\"" << panel_h
       << "\" fill=\"none\" stroke=\"#999\"/>\n";
    std::vector<double> ticks;   // 1-2-5 steps inside the range, thinned to at most 8
    for (double decade = std::pow(10.0, std::floor(ly_lo)); decade <= std::pow(10.0, ly_hi); decade *= 10)
      for (double m : {1.0, 2.0, 5.0})
        if (std::log10(decade * m) >= ly_lo && std::log10(decade * m) <= ly_hi) ticks.push_back(decade * m);
    const size_t stride = ticks.size() > 8 ? (ticks.size() + 7) / 8 : 1;
    for (size_t i = 0; i < ticks.size(); i += stride) {   // y grid and labels
      const double us = ticks[i], y = y_of(us);
      os << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + plot_w << "\" y2=\"" << y
         << "\" stroke=\"#eee\"/>\n<text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
         << fmt("%.3g", us) << "</text>\n";
    }
    for (int m = 1; m <= max_m; m *= 2) {   // x ticks at powers of two
      if (m < lo_m || m > hi_m) continue;
      const double x = x_of(m);
      os << "<line x1=\"" << x << "\" y1=\"" << y1 << "\" x2=\"" << x << "\" y2=\"" << y1 + 5
         << "\" stroke=\"#999\"/>\n<text x=\"" << x << "\" y=\"" << y1 + 18 << "\" text-anchor=\"middle\">" << m
         << "</text>\n";
    }
    os << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << y1 + 34 << "\" text-anchor=\"middle\">" << escape_xml(p.x_label)
       << "</text>\n";
    os << "<text transform=\"translate(" << left - 52 << ' ' << (y0 + y1) / 2
       << ") rotate(-90)\" text-anchor=\"middle\">time (us, log scale)</text>\n";
    const std::vector<int>& rows = *p.rows;
    for (size_t k = 0; k < p.us->size(); ++k) {   // one polyline per path; failed points are left out
      const std::vector<double>& curve = (*p.us)[k];
      os << "<polyline fill=\"none\" stroke=\"" << colour(k) << "\" stroke-width=\"2\" points=\"";
      bool first = true;
      for (size_t i = 0; i < rows.size(); ++i)
        if (std::isfinite(curve[i])) {
          os << (first ? "" : " ") << fmt("%.1f", x_of(rows[i])) << ',' << fmt("%.1f", y_of(curve[i]));
          first = false;
        }
      os << "\"/>\n";
      for (size_t i = 0; i < rows.size(); ++i)
        if (std::isfinite(curve[i]))
          os << "<circle cx=\"" << fmt("%.1f", x_of(rows[i])) << "\" cy=\"" << fmt("%.1f", y_of(curve[i]))
             << "\" r=\"2.5\" fill=\"" << colour(k) << "\"><title>"
             << escape_xml(p.names[k] + " M " + std::to_string(rows[i]) + ": " + fmt("%.2f", curve[i]) + " us")
             << "</title></circle>\n";
    }
    for (size_t k = 0; k < p.crossings->size(); ++k) {   // dashed crossings inside the measured range
      const int m = (*p.crossings)[k];
      if (m <= lo_m || m > hi_m) continue;
      const double x = x_of(m);
      os << "<line x1=\"" << x << "\" y1=\"" << y0 << "\" x2=\"" << x << "\" y2=\"" << y1
         << "\" stroke=\"#555\" stroke-dasharray=\"5,4\"/>\n<text x=\"" << x + 4 << "\" y=\"" << y0 + 14 + 14.0 * k
         << "\">" << escape_xml("M" + std::to_string(k + 1) + " = " + std::to_string(m)) << "</text>\n";
    }
    os << "</g>\n";
  }
  os << "</svg>\n";
  return os.str();
}

std::string linear_ranges_text(const LinearTable& t) {
  const int m1 = t.m1(), m2 = t.m2(), top = kMaxLinearTunedRows;
  const auto range = [&](int lo, int hi) {
    return lo > hi || lo > top ? std::string("never") : std::to_string(lo) + "-" + (hi >= top ? std::string("...") : std::to_string(hi));
  };
  return "gemv " + range(1, m1 - 1) + ", flat " + range(m1, m2 - 1) + ", gemm " + range(m2, top);
}

}  // namespace

std::string report_svg(const InflectionTable& t, const std::string& device) {
  std::vector<Panel> panels;
  std::vector<std::string> names;
  for (const DecodePath& p : t.paths) names.push_back(p.name);
  for (const DataflowBucket& b : t.buckets)
    panels.push_back({kv_bucket_text(b.kv_len) + ": " + ranges_text(t, b), &b.rows, &b.us, names, &b.choice.crossings,
                      "M = gqa x q_len (rows per KV head, log2 scale)"});
  return draw("Decode dataflow: " + t.family,
              "device: " + (device.empty() ? std::string("unknown") : device) + "; batch " + std::to_string(t.batch) +
                  ", heads_kv " + std::to_string(t.heads_kv) + "; median time per call",
              panels, kMaxDecodeRows);
}

std::string report_text(const LinearTable& t) {
  std::ostringstream os;
  os << t.family << "\n  dataflow: M1 " << crossing_text_linear(t.m1()) << ", M2 " << crossing_text_linear(t.m2()) << "  ("
     << linear_ranges_text(t) << ")\n  " << "m        gemv us  flat us  gemm us  chosen (splits)\n";
  for (size_t i = 0; i < t.rows.size(); ++i) {
    char line[160];
    const size_t k = static_cast<size_t>(t.choice.chosen[i]);
    const auto us = [&](size_t p) { return std::isfinite(t.us[p][i]) ? fmt("%8.2f", t.us[p][i]) : std::string("       -"); };
    std::snprintf(line, sizeof line, "  %-6d %s %s %s  %s (%d)\n", t.rows[i], us(0).c_str(), us(1).c_str(), us(2).c_str(),
                  to_string(kLinearPaths[k]), t.splits[k][i]);
    os << line;
  }
  return os.str();
}

std::string report_svg(const LinearTable& t, const std::string& device) {
  const Panel p{"M1 = " + crossing_text_linear(t.m1()) + ", M2 = " + crossing_text_linear(t.m2()) + ": " + linear_ranges_text(t),
                &t.rows, &t.us, {"gemv", "flat", "gemm"}, &t.choice.crossings, "M = tokens (log2 scale)"};
  return draw("Linear dataflow: " + t.family,
              "device: " + (device.empty() ? std::string("unknown") : device) +
                  "; median time per call at each dataflow's best split-K",
              {p}, kMaxLinearTunedRows);
}

}  // namespace qattn
