// The CUDA-core (GEMV) decode kernel's tilings (templates/qattn/decode/decode_gemv_shape.h): which are
// valid, how a warp splits a token row over its lanes, the units a lane reads, shared memory, and the
// gemv candidates and grid points of the search space.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "qattn/decode/decode_gemv_shape.h"
#include "generator/search_space.hpp"
#include "qattn/kernel_name.hpp"
#include "qattn/validate.hpp"

namespace qattn {
namespace {

using decode::gemv_lane_channels;
using decode::gemv_merge_bytes;
using decode::gemv_smem_bytes;
using decode::gemv_step_tokens;
using decode::gemv_tiling_ok;
using decode::gemv_token_lanes;
using decode::gemv_unit_bytes;

const Operand kFormats[] = {{Fmt::fp16, Gran::none},      {Fmt::bf16, Gran::none},     {Fmt::int8, Gran::per_token},
                            {Fmt::int4, Gran::per_token}, {Fmt::int4, Gran::per_group}, {Fmt::fp8e4m3, Gran::per_head}};
const int kDims[] = {64, 128, 256};
const int kBms[] = {1, 2, 4, 8};

std::string name(const Operand& f, int d, int bm) {
  return std::string(to_string(f.fmt)) + ":" + to_string(f.gran) + " d=" + std::to_string(d) + " bm=" + std::to_string(bm);
}

TEST(GemvShape, LanesSplitEveryHeadDimWithinOneWarp) {
  for (int d : kDims)
    for (int bm : kBms) {
      SCOPED_TRACE("d=" + std::to_string(d) + " bm=" + std::to_string(bm));
      const int lanes = gemv_token_lanes(d, bm), ch = gemv_lane_channels(bm);
      EXPECT_EQ(lanes * ch, d);
      EXPECT_EQ(32 % lanes, 0) << "groups of lanes tile the warp";
      EXPECT_EQ(gemv_step_tokens(d, bm) * lanes, 32);
      EXPECT_GE(lanes, bm) << "the transposing reduction leaves one row per lane";
      EXPECT_LE(2 * bm * ch, 128) << "Q and O in registers";
    }
  EXPECT_EQ(gemv_token_lanes(128, 1), 4);
  EXPECT_EQ(gemv_token_lanes(128, 4), 8);
  EXPECT_EQ(gemv_token_lanes(128, 8), 16);
  EXPECT_EQ(gemv_token_lanes(256, 8), 32);
  EXPECT_EQ(gemv_token_lanes(64, 1), 2);
}

TEST(GemvShape, UnitsStayAlignedAndInsideOneScaleGroup) {
  for (const Operand& f : kFormats)
    for (int d : kDims)
      for (int bm : kBms) {
        SCOPED_TRACE(name(f, d, bm));
        const int unit = gemv_unit_bytes(f.fmt, f.gran, d, bm);
        const int row = kv::row_bytes(f.fmt, f.gran, d), hdr = kv::header_bytes(f.fmt, f.gran);
        const int bits = decode::gemv_element_bits(f.fmt);
        ASSERT_TRUE(unit == 4 || unit == 8 || unit == 16);
        EXPECT_EQ(row % unit, 0) << "every row's codes start aligned";
        EXPECT_EQ(hdr % unit, 0);
        const int lane_bytes = gemv_lane_channels(bm) * bits / 8;
        EXPECT_EQ(lane_bytes % unit, 0) << "a lane reads whole units";
        const int group_channels = d / kv::groups(f.fmt, f.gran);
        EXPECT_EQ(group_channels % (unit * 8 / bits), 0) << "a unit never straddles two (scale, shift) groups";
      }
  // Rows of 4 + d bytes (int8, int4 per token) allow 4-byte units only; fp16/bf16 take 8-byte units
  // (4 channels: fewer registers for the decoded values), the other formats up to 16 bytes.
  EXPECT_EQ(gemv_unit_bytes(Fmt::int8, Gran::per_token, 128, 4), 4);
  EXPECT_EQ(gemv_unit_bytes(Fmt::int4, Gran::per_token, 128, 1), 4);
  EXPECT_EQ(gemv_unit_bytes(Fmt::fp16, Gran::none, 128, 8), 8);
  EXPECT_EQ(gemv_unit_bytes(Fmt::bf16, Gran::none, 64, 1), 8);
  EXPECT_EQ(gemv_unit_bytes(Fmt::int4, Gran::per_group, 128, 1), 16);
  EXPECT_EQ(gemv_unit_bytes(Fmt::int4, Gran::per_group, 64, 1), 8);   // 16 channels per group
  EXPECT_EQ(gemv_unit_bytes(Fmt::fp8e4m3, Gran::per_head, 128, 8), 8);
}

TEST(GemvShape, ValidTilings) {
  EXPECT_TRUE(gemv_tiling_ok(Fmt::int8, Gran::per_token, 128, 4, 32, 4, 3));
  EXPECT_TRUE(gemv_tiling_ok(Fmt::fp8e4m3, Gran::per_head, 64, 1, 16, 1, 2));
  EXPECT_TRUE(gemv_tiling_ok(Fmt::int4, Gran::per_group, 256, 8, 64, 4, 2));
  EXPECT_FALSE(gemv_tiling_ok(Fmt::int8, Gran::per_token, 128, 16, 32, 4, 3)) << "bm 16 is the mma kernel's";
  EXPECT_FALSE(gemv_tiling_ok(Fmt::int8, Gran::per_token, 128, 3, 32, 4, 3));
  EXPECT_FALSE(gemv_tiling_ok(Fmt::int8, Gran::per_token, 128, 4, 8, 4, 3));
  EXPECT_FALSE(gemv_tiling_ok(Fmt::int8, Gran::per_token, 128, 4, 128, 4, 2));
  EXPECT_FALSE(gemv_tiling_ok(Fmt::int8, Gran::per_token, 128, 4, 32, 3, 3));
  EXPECT_FALSE(gemv_tiling_ok(Fmt::int8, Gran::per_token, 128, 4, 32, 4, 1));
  EXPECT_FALSE(gemv_tiling_ok(Fmt::int8, Gran::per_token, 128, 4, 32, 4, 5));
  EXPECT_FALSE(gemv_tiling_ok(Fmt::int8, Gran::per_token, 96, 4, 32, 4, 2));
  EXPECT_FALSE(gemv_tiling_ok(Fmt::int8, Gran::per_group, 128, 4, 32, 4, 2)) << "not a cache format";
  EXPECT_TRUE(gemv_tiling_ok(Fmt::flashq, Gran::per_channel, 128, 4, 64, 4, 2));
  EXPECT_FALSE(gemv_tiling_ok(Fmt::flashq, Gran::per_channel, 128, 4, 32, 4, 2)) << "a flashq chunk is a 64-token block";
  // fp16 at d 256: 512-byte rows; 8 warps x 4 stages x (K + V) x 64 rows is 2 MB.
  EXPECT_FALSE(gemv_tiling_ok(Fmt::fp16, Gran::none, 256, 1, 64, 8, 4));
}

TEST(GemvShape, SharedMemoryHoldsThePipelineAndTheMerge) {
  // int8 d 128: rows of 132 bytes; 4 warps x 3 stages x (K + V) x 32 rows.
  EXPECT_EQ(gemv_smem_bytes(Fmt::int8, Gran::per_token, 128, 4, 32, 4, 3), 4 * 3 * 2 * 32 * 132);
  // The merge area: one softmax state per group of lanes of every warp, bm x (d + 3) floats each.
  EXPECT_EQ(gemv_merge_bytes(256, 8, 8), 8 * 1 * 8 * 259 * 4);
  EXPECT_EQ(gemv_merge_bytes(64, 1, 4), 4 * 16 * 1 * 67 * 4);
  for (const Operand& f : kFormats)
    for (int d : kDims)
      for (int bm : kBms)
        for (int bn : {16, 32, 64})
          for (int warps : {1, 2, 4, 8})
            for (int stages : {2, 3, 4}) {
              const int smem = gemv_smem_bytes(f.fmt, f.gran, d, bm, bn, warps, stages);
              ASSERT_GE(smem, decode::pipeline_bytes(f.fmt, f.gran, d, bn, warps, stages)) << name(f, d, bm);
              ASSERT_GE(smem, warps * gemv_step_tokens(d, bm) * bm * (d + 2) * 4) << name(f, d, bm);
              ASSERT_EQ(gemv_tiling_ok(f.fmt, f.gran, d, bm, bn, warps, stages), smem <= decode::kMaxSmemBytes)
                  << name(f, d, bm) << " bn=" << bn << " w=" << warps << " s=" << stages;
            }
}

Spec gemv_spec(const Operand& f, int d, int gqa, Arch arch) {
  Spec s;
  s.phase = Phase::decode;
  s.flow = Dataflow::gemv;
  s.qk = s.pv = f;
  s.out = f.fmt == Fmt::bf16 ? Fmt::bf16 : Fmt::fp16;
  s.head_dim = d;
  s.gqa = gqa;
  s.arch = arch;
  return s;
}

TEST(GemvShape, CandidatesAreValidGemvTilingsWithTheGqaRowsFirst) {
  for (Arch arch : {Arch::sm_80, Arch::sm_86, Arch::sm_89, Arch::sm_90a})
    for (const Operand& f : kFormats)
      for (int d : kDims)
        for (int gqa : {1, 2, 3, 4, 8, 16}) {
          const Spec s = gemv_spec(f, d, gqa, arch);
          SCOPED_TRACE(to_string(s));
          const DeviceLimits limits = default_limits(arch);
          const std::vector<Tiling> c = gen::candidate_tilings(s, limits);
          ASSERT_FALSE(c.empty());
          std::set<int> bms;
          for (const Tiling& t : c) {
            EXPECT_TRUE(gemv_tiling_ok(f.fmt, f.gran, d, t.block_m, t.block_n, t.warps, t.stages)) << to_string(t);
            EXPECT_LE(kernel_smem_bytes(s, t), limits.max_smem_per_block) << to_string(t);
            bms.insert(t.block_m);
          }
          EXPECT_EQ(bms, (std::set<int>{1, 2, 4, 8})) << "every bm is a candidate";
          // The GQA rows, unless the spill sweep's repair (generator/spill_promotions.inc) moved them.
          int want = gqa <= 1 ? 1 : gqa <= 2 ? 2 : gqa <= 4 ? 4 : 8;
          const Tiling chosen = default_tiling(s, limits);
          for (const gen::SpillPromotion& p : gen::spill_promotions())
            if (spec_name(s) == p.stem) want = parse_tiling(p.tiling).block_m;
          EXPECT_EQ(chosen.block_m, want);
        }
  // The mma tilings are not gemv ones and the other way round.
  Spec s = gemv_spec({Fmt::int8, Gran::per_token}, 128, 4, Arch::sm_90a);
  EXPECT_FALSE(validate(s, Tiling{16, 32, 4, 3}, default_limits(s.arch)));
  s.flow = Dataflow::mma;
  EXPECT_FALSE(validate(s, Tiling{4, 32, 4, 3}, default_limits(s.arch)));
  // flashq: only block-sized chunks (bn 64).
  s = gemv_spec({Fmt::flashq, Gran::per_channel}, 128, 4, Arch::sm_90a);
  const std::vector<Tiling> fq = gen::candidate_tilings(s, default_limits(s.arch));
  ASSERT_FALSE(fq.empty());
  for (const Tiling& t : fq) EXPECT_EQ(t.block_n, 64) << to_string(t);
}

TEST(GemvShape, DefaultGridCompilesEveryFormatAndBlockShape) {
  for (Arch arch : {Arch::sm_80, Arch::sm_89, Arch::sm_90a}) {
    std::set<std::string> formats;
    std::set<int> bms, dims;
    std::set<SoftmaxMode> modes;
    bool paged = false;
    for (const Spec& s : gen::default_grid(arch)) {
      if (s.phase != Phase::decode || s.flow != Dataflow::gemv) continue;
      EXPECT_TRUE(validate(s)) << to_string(s);
      formats.insert(std::string(to_string(s.qk.fmt)) + to_string(s.qk.gran));
      bms.insert(default_tiling(s, default_limits(arch)).block_m);
      dims.insert(s.head_dim);
      modes.insert(s.softmax);
      paged |= s.paged && s.causal;
    }
    EXPECT_EQ(formats.size(), 7u) << to_string(arch);
    EXPECT_EQ(bms, (std::set<int>{1, 2, 4, 8})) << to_string(arch);
    EXPECT_EQ(dims, (std::set<int>{64, 128, 256})) << to_string(arch);
    EXPECT_EQ(modes.size(), 3u) << "exact, sas and unified_max";
    EXPECT_TRUE(paged);
  }
}

}  // namespace
}  // namespace qattn
