// FlashQ cache, the host side that needs no GPU: block and buffer sizes, the head table, the head-wise
// bit choice and the universal scales (include/qattn/flashq.hpp).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "qattn/decode/kv_layout.h"
#include "qattn/error.hpp"
#include "qattn/flashq.hpp"

namespace qattn {
namespace {

void check_stats(const FlashQChannelStats& s) {
  const size_t n = static_cast<size_t>(s.heads_kv) * s.d;
  if (s.heads_kv < 1 || s.d < 1 || s.min.size() != n || s.max.size() != n)
    throw_bad_input("flashq statistics need heads_kv >= 1, d >= 1 and heads_kv x d entries of min and max (got " +
                    std::to_string(s.heads_kv) + " heads, d " + std::to_string(s.d) + ", " + std::to_string(s.min.size()) +
                    " / " + std::to_string(s.max.size()) + " entries)");
}

}  // namespace

std::vector<double> flashq_priority(const FlashQChannelStats& s) {
  check_stats(s);
  std::vector<double> priority(static_cast<size_t>(s.heads_kv));
  for (int h = 0; h < s.heads_kv; ++h) {
    const float* mn = s.min.data() + static_cast<size_t>(h) * s.d;
    const float* mx = s.max.data() + static_cast<size_t>(h) * s.d;
    double lo = mn[0], hi = mx[0], sum = 0;
    for (int c = 0; c < s.d; ++c) {
      lo = std::min(lo, double(mn[c]));
      hi = std::max(hi, double(mx[c]));
      sum += double(mx[c]) - double(mn[c]);
    }
    const double mean = sum / s.d;
    double var = 0;
    for (int c = 0; c < s.d; ++c) {
      const double dev = double(mx[c]) - double(mn[c]) - mean;
      var += dev * dev;
    }
    priority[static_cast<size_t>(h)] = (hi - lo) * std::sqrt(var / s.d);
  }
  return priority;
}

std::vector<int> flashq_choose_bits(const std::vector<double>& priority, int n_low) {
  const int heads = static_cast<int>(priority.size());
  if (n_low < -1 || n_low > heads)
    throw_bad_input("flashq: n_low (heads at 2 bits) must be in [0, " + std::to_string(heads) + "] or -1 for half, got " +
                    std::to_string(n_low));
  if (n_low == -1) n_low = heads / 2;
  std::vector<int> order(static_cast<size_t>(heads));
  std::iota(order.begin(), order.end(), 0);
  // Ascending priority, the lower head index first among equals (a NaN priority sorts last).
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const double pa = priority[static_cast<size_t>(a)], pb = priority[static_cast<size_t>(b)];
    if (std::isnan(pa) || std::isnan(pb)) return !std::isnan(pa) && std::isnan(pb);
    return pa < pb;
  });
  std::vector<int> bits(static_cast<size_t>(heads), 4);
  for (int i = 0; i < n_low; ++i) bits[static_cast<size_t>(order[static_cast<size_t>(i)])] = 2;
  return bits;
}

FlashQHeads flashq_choose_heads(const FlashQChannelStats& k, const FlashQChannelStats& v, int n_low) {
  return FlashQHeads{flashq_choose_bits(flashq_priority(k), n_low), flashq_choose_bits(flashq_priority(v), n_low)};
}

std::vector<float> flashq_universal_scales(const FlashQChannelStats& s) {
  check_stats(s);
  std::vector<float> scales(static_cast<size_t>(s.heads_kv));
  for (int h = 0; h < s.heads_kv; ++h) {
    float amax = 0.f;
    for (int c = 0; c < s.d; ++c) {
      const size_t i = static_cast<size_t>(h) * s.d + c;
      amax = std::max({amax, std::fabs(s.min[i]), std::fabs(s.max[i])});
    }
    scales[static_cast<size_t>(h)] = (amax > 0.f ? amax : 1.f) / 127.f;
  }
  return scales;
}

FlashQLayout flashq_layout(int d, const std::vector<int>& bits) {
  if (d != 64 && d != 128 && d != 256) throw_bad_input("flashq: d=" + std::to_string(d) + " is not supported; accepted: 64, 128, 256");
  if (bits.empty()) throw_bad_input("flashq: the layout needs the bit width of every KV head (got none)");
  FlashQLayout l;
  l.d = d;
  l.bits = bits;
  for (size_t h = 0; h < bits.size(); ++h) {
    if (bits[h] != 2 && bits[h] != 4)
      throw_bad_input("flashq: head " + std::to_string(h) + " has " + std::to_string(bits[h]) + " bits; accepted: 2, 4");
    l.head_offset.push_back(l.page_bytes);
    l.block_bytes.push_back(kv::flashq_block_bytes(bits[h], d));
    l.page_bytes += l.block_bytes.back();
  }
  return l;
}

long long flashq_max_page_bytes(int d, int heads_kv) {
  return flashq_layout(d, std::vector<int>(static_cast<size_t>(std::max(1, heads_kv)), 4)).page_bytes;
}

std::vector<int> flashq_head_table(const FlashQLayout& k, const FlashQLayout& v) {
  if (k.bits.size() != v.bits.size()) throw_bad_input("flashq: the K and V layouts have different head counts");
  std::vector<int> table;
  for (const FlashQLayout* l : {&k, &v})
    for (size_t h = 0; h < l->bits.size(); ++h) {
      table.push_back(l->bits[h]);
      table.push_back(static_cast<int>(l->head_offset[h]));
    }
  return table;
}

int flashq_buffer_row_bytes(int d) { return kv::row_bytes(Fmt::int8, Gran::per_token, d); }

long long flashq_buffer_head_stride(int d) { return 1LL * kv::kFlashQBufferRows * flashq_buffer_row_bytes(d); }

long long flashq_buffer_bytes(int d, int batch, int heads_kv) {
  return 1LL * batch * heads_kv * flashq_buffer_head_stride(d);
}

}  // namespace qattn
