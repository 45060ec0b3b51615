// The rules of the Ascend aclnn operators per chip, as data (docs/ascend.md: sources and disagreements).
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <sstream>

#include "spatialgrad/ascend.h"
#include "spatialgrad/dtype.h"
#include "spatialgrad/error.h"

namespace spatialgrad::ascend {
namespace {

constexpr const char* kChipNames[] = {"910", "910B", "910_93", "310P", "950"};
constexpr const char* kKnownChips = "'910', '910B', '910_93', '310P', '950'";

constexpr double dtypes(std::initializer_list<DType> list) {
  unsigned mask = 0;
  for (DType d : list) mask |= 1u << static_cast<unsigned>(d);
  return mask;
}

constexpr DType kF16 = DType::kFloat16, kBF16 = DType::kBFloat16, kF32 = DType::kFloat32, kF64 = DType::kFloat64;
constexpr uint8_t kTrainingOld = k910 | k310P;  // the chips without bfloat16 (Atlas training / inference series)
constexpr uint8_t kA2A3 = k910B | k910_93 | k950;

constexpr const char* kGridSamplerCode =
    "ops-cv image/grid_sampler2_d_grad/op_host/op_api/aclnn_grid_sampler2d_backward.cpp";
constexpr const char* kGridSamplerDoc = "ops-cv image/grid_sampler2_d_grad/docs/aclnnGridSampler2DBackward.md";
constexpr const char* kDeformCode =
    "ops-nn vfusion/multi_scale_deformable_attention_grad/op_api/aclnn_multi_scale_deformable_attention_grad.cpp";
constexpr const char* kDeformDoc = "ops-nn vfusion/multi_scale_deformable_attention_grad/README.md";
constexpr const char* kRoiAlignCode = "ops-cv objdetect/roi_align_grad/op_host/op_api/aclnn_roi_align_v2_backward.cpp";
constexpr const char* kRoiAlignDoc = "ops-cv objdetect/roi_align_grad/docs/aclnnRoiAlignV2Backward.md";
constexpr const char* kUpsampleCode =
    "ops-cv image/upsample_bilinear2d_grad/op_host/op_api/aclnn_upsample_bilinear_2d_backward_v2.cpp";
constexpr const char* kAvgPoolCode = "ops-nn pooling/avg_pool3_d_grad/op_api/aclnn_avgpool2d_backward.cpp";
constexpr const char* kAvgPoolDoc = "ops-nn pooling/avg_pool3_d_grad/docs/aclnnAvgPool2dBackward.md";

// {op, chips, argument, test, limit, other, rejects, text, source}
const std::vector<Rule> kRules = {
    // aclnnGridSampler2DBackward
    {"grid_sampler_2d_backward", k310P, "", Test::kUnsupported, 0, "", true,
     "a chip with aclnnGridSampler2DBackward (910, 910B, 910_93, 950)", kGridSamplerDoc},
    {"grid_sampler_2d_backward", k910 | k910_93 | k950, "dtype", Test::kDtypeIn, dtypes({kF16, kF32, kF64}), "", true,
     "dtype float16, float32 or float64", kGridSamplerCode},
    {"grid_sampler_2d_backward", k910B, "dtype", Test::kDtypeIn, dtypes({kF16, kBF16, kF32, kF64}), "", true,
     "dtype float16, bfloat16, float32 or float64", kGridSamplerCode},
    {"grid_sampler_2d_backward", kAllChips & ~k310P, "interpolationMode", Test::kAtMost, 1, "", true,
     "interpolationMode 0 (bilinear) or 1 (nearest), not bicubic (2)", kGridSamplerCode},
    // aclnnMultiScaleDeformableAttentionGrad
    {"ms_deform_attn_backward", k910 | k310P, "", Test::kUnsupported, 0, "", true,
     "a chip with aclnnMultiScaleDeformableAttentionGrad (910B, 910_93, 950)", kDeformDoc},
    {"ms_deform_attn_backward", kA2A3, "dtype", Test::kDtypeIn, dtypes({kF16, kBF16, kF32}), "", true,
     "dtype float16, bfloat16 or float32", kDeformCode},
    {"ms_deform_attn_backward", kA2A3, "channels", Test::kMultipleOf, 8, "", true, "channels % 8 == 0", kDeformCode},
    {"ms_deform_attn_backward", kA2A3, "channels", Test::kAtMost, 256, "", true, "channels <= 256", kDeformCode},
    {"ms_deform_attn_backward", kA2A3, "num_queries", Test::kAtMost, 499999, "", true, "num_queries < 500000",
     kDeformCode},
    {"ms_deform_attn_backward", kA2A3, "num_levels", Test::kAtMost, 16, "", true, "num_levels <= 16", kDeformCode},
    {"ms_deform_attn_backward", kA2A3, "num_heads", Test::kAtMost, 16, "", true, "num_heads <= 16", kDeformCode},
    {"ms_deform_attn_backward", kA2A3, "num_points", Test::kAtMost, 16, "", true, "num_points <= 16", kDeformCode},
    // aclnnRoiAlignV2Backward
    {"roi_align_backward", k310P, "", Test::kUnsupported, 0, "", true,
     "a chip with aclnnRoiAlignV2Backward (910, 910B, 910_93, 950)", kRoiAlignDoc},
    {"roi_align_backward", kAllChips & ~k310P, "dtype", Test::kDtypeIn, dtypes({kF32}), "", true, "dtype float32",
     kRoiAlignCode},
    {"roi_align_backward", kAllChips & ~k310P, "samplingRatio", Test::kAtLeast, 0, "", true, "samplingRatio >= 0",
     kRoiAlignCode},
    {"roi_align_backward", kAllChips & ~k310P, "spatialScale", Test::kAbove, FLT_MIN, "", true,
     "spatialScale > FLT_MIN", kRoiAlignCode},
    // aclnnUpsampleBilinear2dBackwardV2
    {"upsample_bilinear2d_backward", kTrainingOld, "dtype", Test::kDtypeIn, dtypes({kF16, kF32}), "", true,
     "dtype float16 or float32", kUpsampleCode},
    {"upsample_bilinear2d_backward", kA2A3, "dtype", Test::kDtypeIn, dtypes({kF16, kBF16, kF32}), "", true,
     "dtype float16, bfloat16 or float32", kUpsampleCode},
    // With a scale given (either), both axes are compared; a mismatch selects ResizeBilinearV2Grad instead.
    {"upsample_bilinear2d_backward", k910B | k910_93, "outputSize[0]", Test::kEquals, 0, "floor(inputH*scalesH)",
     false, "outputSize[0] == floor(input H * scalesH) once a scale is given (else another kernel runs)",
     kUpsampleCode},
    {"upsample_bilinear2d_backward", k910B | k910_93, "outputSize[1]", Test::kEquals, 0, "floor(inputW*scalesW)",
     false, "outputSize[1] == floor(input W * scalesW) once a scale is given (else another kernel runs)",
     kUpsampleCode},
    // aclnnAvgPool2dBackward
    {"avg_pool2d_backward", kTrainingOld, "dtype", Test::kDtypeIn, dtypes({kF16, kF32}), "", true,
     "dtype float16 or float32", kAvgPoolCode},
    {"avg_pool2d_backward", kA2A3, "dtype", Test::kDtypeIn, dtypes({kF16, kBF16, kF32}), "", true,
     "dtype float16, bfloat16 or float32", kAvgPoolCode},
    {"avg_pool2d_backward", kTrainingOld, "dtype", Test::kDtypeIn, dtypes({kF16}), "", false,
     "dtype float16: float32 is computed in float16 (cubeMathType 1)", kAvgPoolDoc},
    {"avg_pool2d_backward", kAllChips, "padding[0]", Test::kHalfOf, 0, "kernelSize[0]", true,
     "2 * padding[0] <= kernelSize[0]", kAvgPoolCode},
    {"avg_pool2d_backward", kAllChips, "padding[1]", Test::kHalfOf, 0, "kernelSize[1]", true,
     "2 * padding[1] <= kernelSize[1]", kAvgPoolCode},
    {"avg_pool2d_backward", kTrainingOld, "divisorOverride", Test::kAbsAtMost, 255, "", true,
     "divisorOverride in [-255, 255]", kAvgPoolDoc},
};

const double* find(const Facts& facts, const char* name) {
  for (const auto& [key, value] : facts) {
    if (key == name) return &value;
  }
  return nullptr;
}

// Whether the rule holds for argument value v (other: the value of rule.other, when it has one).
bool holds(const Rule& rule, double v, double other) {
  switch (rule.test) {
    case Test::kUnsupported:
      return false;
    case Test::kDtypeIn:
      return (static_cast<unsigned>(rule.limit) >> static_cast<unsigned>(v)) & 1u;
    case Test::kAtMost:
      return v <= rule.limit;
    case Test::kAtLeast:
      return v >= rule.limit;
    case Test::kAbove:
      return v > rule.limit;
    case Test::kMultipleOf:
      return std::fmod(v, rule.limit) == 0;
    case Test::kAbsAtMost:
      return std::fabs(v) <= rule.limit;
    case Test::kHalfOf:
      return 2 * v <= other;
    case Test::kEquals:
      return v == other;
  }
  return true;
}

std::string value_text(const Rule& rule, double value) {
  if (rule.test == Test::kDtypeIn) return dtype_name(static_cast<DType>(static_cast<int>(value)));
  std::ostringstream text;
  text.precision(9);
  text << value;
  return text.str();
}

}  // namespace

Chip chip_from_name(const std::string& name) {
  for (unsigned i = 0; i < sizeof(kChipNames) / sizeof(kChipNames[0]); ++i) {
    if (name == kChipNames[i]) return static_cast<Chip>(1u << i);
  }
  detail::fail(ErrorKind::kInvalidArgument, "spatialgrad.ascend: expected chip to be one of ", kKnownChips,
               ", but got '", name, "'");
}

const char* chip_name(Chip chip) {
  for (unsigned i = 0; i < sizeof(kChipNames) / sizeof(kChipNames[0]); ++i) {
    if (chip == (1u << i)) return kChipNames[i];
  }
  return "?";
}

const std::vector<Rule>& rules() { return kRules; }

std::vector<Finding> check(const std::string& op, Chip chip, const Facts& facts) {
  std::vector<Finding> findings;
  for (const Rule& rule : kRules) {
    if (op != rule.op || !(rule.chips & chip)) continue;
    if (rule.test == Test::kUnsupported) {
      findings.push_back({&rule, 0});
      continue;
    }
    const double* value = find(facts, rule.argument);
    const double* other = *rule.other ? find(facts, rule.other) : value;
    if (value && other && !holds(rule, *value, *other)) findings.push_back({&rule, *value});
  }
  return findings;
}

std::string message(const Finding& finding, Chip chip) {
  const Rule& rule = *finding.rule;
  // The file's last two path components (e.g. op_api/aclnn_x.cpp, x_grad/README.md): Rule::source has the path.
  const std::string source = rule.source;
  const size_t last = source.rfind('/');
  const size_t cut = last == 0 || last == std::string::npos ? std::string::npos : source.rfind('/', last - 1);
  const std::string file = cut == std::string::npos ? source : source.substr(cut + 1);
  const char* effect = rule.rejects ? "rejects this call (161002)" : "computes this call differently";
  if (rule.test == Test::kUnsupported) {
    return detail::concat(rule.op, "(): on Ascend ", chip_name(chip), " the NPU ", effect, ": expected ", rule.text,
                          ", but the operator does not exist there (", file, ")");
  }
  return detail::concat(rule.op, "(): on Ascend ", chip_name(chip), " the NPU ", effect, ": expected ", rule.text,
                        ", but got ", rule.argument, " = ", value_text(rule, finding.value), " (", file, ")");
}

uint8_t chip_from_environment() {
  // Read once per process: a phase one then pays one initialised-static test (getenv scans the whole
  // environment, ~100 ns). An unknown name throws, so the static stays uninitialised and every call reports it.
  static const uint8_t chip = [] {
    const char* name = std::getenv("SPATIALGRAD_ASCEND_CHIP");
    return name == nullptr || *name == '\0' ? uint8_t{0} : uint8_t{chip_from_name(name)};
  }();
  return chip;
}

}  // namespace spatialgrad::ascend
