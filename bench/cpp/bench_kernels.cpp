// Google Benchmark of the C++ kernels alone (no Python), at the DESIGN standard shapes.
// Run: build/cpp/spatialgrad_bench [--benchmark_filter=avg_pool2d]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "spatialgrad/avg_pool2d.h"
#include "spatialgrad/grid_sampler_2d.h"
#include "spatialgrad/ms_deform_attn.h"
#include "spatialgrad/parallel.h"
#include "spatialgrad/roi_align.h"
#include "spatialgrad/upsample_bilinear2d.h"

namespace sg = spatialgrad;

namespace {

// Uniform values in [-scale, scale) as float32, or rounded to float16/bfloat16 storage.
struct Buffer {
  std::vector<float> data;
  std::vector<uint16_t> half_data;
  sg::TensorView view;
  explicit Buffer(std::vector<int64_t> sizes, uint32_t seed = 0, sg::DType dtype = sg::DType::kFloat32,
                  float scale = 1.0f) {
    data.resize(static_cast<size_t>(sg::checked_numel(sizes)));
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (auto& v : data) v = dist(gen);
    if (dtype == sg::DType::kFloat32) {
      view = sg::TensorView(data.data(), dtype, std::move(sizes));
      return;
    }
    half_data.resize(data.size());
    for (size_t i = 0; i < data.size(); ++i) {
      half_data[i] = dtype == sg::DType::kFloat16 ? sg::to_half(data[i]).bits : sg::to_bfloat16(data[i]).bits;
    }
    data.clear();
    view = sg::TensorView(half_data.data(), dtype, std::move(sizes));
  }
  int64_t bytes() const { return static_cast<int64_t>(data.size() * sizeof(float) + half_data.size() * 2); }
};

void set_threads(benchmark::State& state) { sg::set_num_threads(static_cast<int>(state.range(0))); }

// Last argument of the avg_pool2d and upsample benchmarks: 0 float32, 1 float16, 2 bfloat16.
sg::DType dtype_arg(benchmark::State& state, int index) {
  constexpr sg::DType kDtypes[] = {sg::DType::kFloat32, sg::DType::kFloat16, sg::DType::kBFloat16};
  return kDtypes[state.range(index)];
}

sg::AvgPool2dParams k3s2p1() {
  sg::AvgPool2dParams p;
  p.kernel_size = {3};
  p.stride = {2};
  p.padding = {1};
  return p;
}

// avg_pool2d k3 s2 p1 at (8,64,112,112); arg 0: threads, arg 1: dtype.
void BM_avg_pool2d_forward_k3s2(benchmark::State& state) {
  set_threads(state);
  const sg::AvgPool2dParams p = k3s2p1();
  const sg::DType dtype = dtype_arg(state, 1);
  Buffer x({8, 64, 112, 112}, 1, dtype), y(sg::avg_pool2d_output_shape({8, 64, 112, 112}, p), 0, dtype);
  for (auto _ : state) sg::avg_pool2d(x.view, y.view, p);
  state.SetBytesProcessed(state.iterations() * (x.bytes() + y.bytes()));
}
BENCHMARK(BM_avg_pool2d_forward_k3s2)->ArgsProduct({{1, 2}, {0, 1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_avg_pool2d_backward_k3s2(benchmark::State& state) {
  set_threads(state);
  const sg::AvgPool2dParams p = k3s2p1();
  const sg::DType dtype = dtype_arg(state, 1);
  Buffer x({8, 64, 112, 112}, 1, dtype), g(sg::avg_pool2d_output_shape({8, 64, 112, 112}, p), 2, dtype),
      gi({8, 64, 112, 112}, 0, dtype);
  for (auto _ : state) sg::avg_pool2d_backward(g.view, x.view, gi.view, p);
  state.SetBytesProcessed(state.iterations() * (g.bytes() + gi.bytes()));
}
BENCHMARK(BM_avg_pool2d_backward_k3s2)->ArgsProduct({{1, 2}, {0, 1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

// upsample_bilinear2d (8,64,64,64) -> (128,128), align_corners=False; arg 0: threads, arg 1: 0 NCHW,
// 1 NHWC; arg 2: dtype.
sg::Layout layout_arg(benchmark::State& state) { return state.range(1) ? sg::Layout::kNHWC : sg::Layout::kNCHW; }

std::vector<int64_t> upsample_shape(sg::Layout layout, int64_t h, int64_t w) {
  return layout == sg::Layout::kNCHW ? std::vector<int64_t>{8, 64, h, w} : std::vector<int64_t>{8, h, w, 64};
}

void BM_upsample_bilinear2d_forward(benchmark::State& state) {
  set_threads(state);
  const sg::Layout layout = layout_arg(state);
  const sg::DType dtype = dtype_arg(state, 2);
  Buffer x(upsample_shape(layout, 64, 64), 1, dtype), y(upsample_shape(layout, 128, 128), 0, dtype);
  for (auto _ : state) sg::upsample_bilinear2d(x.view, y.view, {{128, 128}, false, 0.0, 0.0, layout});
  state.SetBytesProcessed(state.iterations() * (x.bytes() + y.bytes()));
}
BENCHMARK(BM_upsample_bilinear2d_forward)
    ->ArgsProduct({{1, 2}, {0, 1}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_upsample_bilinear2d_backward(benchmark::State& state) {
  set_threads(state);
  const sg::Layout layout = layout_arg(state);
  const sg::DType dtype = dtype_arg(state, 2);
  const std::vector<int64_t> in_size = upsample_shape(layout, 64, 64);
  Buffer g(upsample_shape(layout, 128, 128), 2, dtype), gi(in_size, 0, dtype);
  for (auto _ : state)
    sg::upsample_bilinear2d_backward(g.view, in_size, gi.view, {{128, 128}, false, 0.0, 0.0, layout});
  state.SetBytesProcessed(state.iterations() * (g.bytes() + gi.bytes()));
}
BENCHMARK(BM_upsample_bilinear2d_backward)
    ->ArgsProduct({{1, 2}, {0, 1}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// grid_sampler_2d at the standard shape: input (8,32,64,64), grid (8,64,64,2) uniform in [-1.1, 1.1].
// Arg 0: threads; arg 1: interpolation mode (0 bilinear, 1 nearest, 2 bicubic); zeros padding; arg 2:
// dtype (bilinear only in float16 / bfloat16).
void BM_grid_sampler_2d_forward(benchmark::State& state) {
  set_threads(state);
  sg::GridSampler2dParams p;
  p.interpolation_mode = static_cast<spatialgrad::GridSamplerInterpolation>(state.range(1));
  const sg::DType dtype = dtype_arg(state, 2);
  Buffer x({8, 32, 64, 64}, 1, dtype), grid({8, 64, 64, 2}, 2, dtype, 1.1f), y({8, 32, 64, 64}, 0, dtype);
  for (auto _ : state) sg::grid_sampler_2d(x.view, grid.view, y.view, p);
}
BENCHMARK(BM_grid_sampler_2d_forward)
    ->ArgsProduct({{1, 2}, {0, 1, 2}, {0}})
    ->ArgsProduct({{1, 2}, {0}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_grid_sampler_2d_backward(benchmark::State& state) {
  set_threads(state);
  sg::GridSampler2dParams p;
  p.interpolation_mode = static_cast<spatialgrad::GridSamplerInterpolation>(state.range(1));
  const sg::DType dtype = dtype_arg(state, 2);
  Buffer x({8, 32, 64, 64}, 1, dtype), grid({8, 64, 64, 2}, 2, dtype, 1.1f), g({8, 32, 64, 64}, 3, dtype),
      gi({8, 32, 64, 64}, 0, dtype), gg({8, 64, 64, 2}, 0, dtype);
  for (auto _ : state) sg::grid_sampler_2d_backward(g.view, x.view, grid.view, gi.view, gg.view, p);
}
BENCHMARK(BM_grid_sampler_2d_backward)
    ->ArgsProduct({{1, 2}, {0, 1, 2}, {0}})
    ->ArgsProduct({{1, 2}, {0}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// roi_align standard shape: features (2,256,64,64), 512 boxes of 1-16 px, 7x7, sampling_ratio 2, aligned.
std::vector<float> roi_align_standard_boxes() {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> side(1.0f, 16.0f), unit(0.0f, 1.0f);
  std::vector<float> boxes;
  for (int k = 0; k < 512; ++k) {
    const float w = side(gen), h = side(gen);
    const float x = unit(gen) * (64 - w), y = unit(gen) * (64 - h);
    boxes.insert(boxes.end(), {static_cast<float>(k % 2), x, y, x + w, y + h});
  }
  return boxes;
}

sg::RoiAlignParams roi_align_standard_params() {
  sg::RoiAlignParams p;
  p.pooled_height = p.pooled_width = 7;
  p.sampling_ratio = 2;
  p.aligned = true;
  return p;
}

void BM_roi_align_forward(benchmark::State& state) {
  set_threads(state);
  std::vector<float> boxes = roi_align_standard_boxes();
  sg::TensorView rois(boxes.data(), sg::DType::kFloat32, {512, 5});
  const sg::RoiAlignParams p = roi_align_standard_params();
  Buffer x({2, 256, 64, 64}, 1), y({512, 256, 7, 7});
  for (auto _ : state) sg::roi_align(x.view, rois, y.view, p);
}
BENCHMARK(BM_roi_align_forward)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_roi_align_backward(benchmark::State& state) {
  set_threads(state);
  std::vector<float> boxes = roi_align_standard_boxes();
  sg::TensorView rois(boxes.data(), sg::DType::kFloat32, {512, 5});
  const sg::RoiAlignParams p = roi_align_standard_params();
  Buffer g({512, 256, 7, 7}, 2), gi({2, 256, 64, 64});
  for (auto _ : state) sg::roi_align_backward(g.view, rois, {2, 256, 64, 64}, gi.view, p);
}
BENCHMARK(BM_roi_align_backward)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
// ms_deform_attn at the standard shape: bs 2, levels 64x64/32x32/16x16/8x8, nH 8, C 32, Q 1000, P 4.
struct MsDeformAttnProblem {
  std::vector<int64_t> shapes{64, 64, 32, 32, 16, 16, 8, 8}, starts{0, 4096, 5120, 5376};
  sg::TensorView shapes_view{shapes.data(), sg::DType::kInt64, {4, 2}};
  sg::TensorView starts_view{starts.data(), sg::DType::kInt64, {4}};
  Buffer value{{2, 5440, 8, 32}, 1}, loc{{2, 1000, 8, 4, 4, 2}, 2}, attn{{2, 1000, 8, 4, 4}, 3},
      grad{{2, 1000, 256}, 4};
  MsDeformAttnProblem() {
    for (auto& v : loc.data) v = 0.5f + 0.5f * v;  // [0, 1]
  }
};

void BM_ms_deform_attn_forward(benchmark::State& state) {
  set_threads(state);
  MsDeformAttnProblem pb;
  Buffer out({2, 1000, 256});
  for (auto _ : state)
    sg::ms_deform_attn(pb.value.view, pb.shapes_view, pb.starts_view, pb.loc.view, pb.attn.view, out.view);
}
BENCHMARK(BM_ms_deform_attn_forward)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// cold: the caches are filled with other dirty data before each call (untimed), as by the PyTorch ops
// around it in a training step or in bench/compare.py; its time is closer to what the Python bench
// measures than the warm row's.
void run_ms_deform_attn_backward(benchmark::State& state, bool cold) {
  set_threads(state);
  MsDeformAttnProblem pb;
  Buffer grad_value({2, 5440, 8, 32}), grad_loc({2, 1000, 8, 4, 4, 2}), grad_attn({2, 1000, 8, 4, 4});
  std::vector<char> other(cold ? 256 << 20 : 0);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      for (size_t i = 0; i < other.size(); i += 64) other[i] += 1;
      state.ResumeTiming();
    }
    sg::ms_deform_attn_backward(pb.value.view, pb.shapes_view, pb.starts_view, pb.loc.view, pb.attn.view, pb.grad.view,
                                grad_value.view, grad_loc.view, grad_attn.view);
  }
}

void BM_ms_deform_attn_backward(benchmark::State& state) { run_ms_deform_attn_backward(state, false); }
BENCHMARK(BM_ms_deform_attn_backward)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ms_deform_attn_backward_cold(benchmark::State& state) { run_ms_deform_attn_backward(state, true); }
BENCHMARK(BM_ms_deform_attn_backward_cold)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
