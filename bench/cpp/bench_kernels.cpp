// Google Benchmark of the C++ kernels alone (no Python), at the DESIGN standard shapes.
// Run: build/cpp/spatialgrad_bench [--benchmark_filter=avg_pool2d]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "spatialgrad/avg_pool2d.h"
#include "spatialgrad/ms_deform_attn.h"
#include "spatialgrad/parallel.h"

namespace sg = spatialgrad;

namespace {

struct Buffer {
  std::vector<float> data;
  sg::TensorView view;
  explicit Buffer(std::vector<int64_t> sizes, uint32_t seed = 0) {
    data.resize(static_cast<size_t>(sg::checked_numel(sizes)));
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto& v : data) v = dist(gen);
    view = sg::TensorView(data.data(), sg::DType::kFloat32, std::move(sizes));
  }
};

void set_threads(benchmark::State& state) { sg::set_num_threads(static_cast<int>(state.range(0))); }

void BM_avg_pool2d_forward_k3s2(benchmark::State& state) {
  set_threads(state);
  sg::AvgPool2dParams p;
  p.kernel_size = {3};
  p.stride = {2};
  p.padding = {1};
  Buffer x({8, 64, 112, 112}, 1), y(sg::avg_pool2d_output_shape({8, 64, 112, 112}, p));
  for (auto _ : state) sg::avg_pool2d(x.view, y.view, p);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>((x.data.size() + y.data.size()) * sizeof(float)));
}
BENCHMARK(BM_avg_pool2d_forward_k3s2)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_avg_pool2d_backward_k3s2(benchmark::State& state) {
  set_threads(state);
  sg::AvgPool2dParams p;
  p.kernel_size = {3};
  p.stride = {2};
  p.padding = {1};
  Buffer x({8, 64, 112, 112}, 1), g(sg::avg_pool2d_output_shape({8, 64, 112, 112}, p), 2), gi({8, 64, 112, 112});
  for (auto _ : state) sg::avg_pool2d_backward(g.view, x.view, gi.view, p);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>((g.data.size() + gi.data.size()) * sizeof(float)));
}
BENCHMARK(BM_avg_pool2d_backward_k3s2)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// ms_deform_attn at the standard shape: bs 2, levels 64x64/32x32/16x16/8x8, nH 8, C 32, Q 1000, P 4.
struct MsDeformAttnProblem {
  std::vector<int64_t> shapes{64, 64, 32, 32, 16, 16, 8, 8}, starts{0, 4096, 5120, 5376};
  sg::TensorView shapes_view{shapes.data(), sg::DType::kInt64, {4, 2}};
  sg::TensorView starts_view{starts.data(), sg::DType::kInt64, {4}};
  Buffer value{{2, 5440, 8, 32}, 1}, loc{{2, 1000, 8, 4, 4, 2}, 2}, attn{{2, 1000, 8, 4, 4}, 3}, grad{{2, 1000, 256}, 4};
  MsDeformAttnProblem() {
    for (auto& v : loc.data) v = 0.5f + 0.5f * v;  // [0, 1]
  }
};

void BM_ms_deform_attn_forward(benchmark::State& state) {
  set_threads(state);
  MsDeformAttnProblem pb;
  Buffer out({2, 1000, 256});
  for (auto _ : state) sg::ms_deform_attn(pb.value.view, pb.shapes_view, pb.starts_view, pb.loc.view, pb.attn.view, out.view);
}
BENCHMARK(BM_ms_deform_attn_forward)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ms_deform_attn_backward(benchmark::State& state) {
  set_threads(state);
  MsDeformAttnProblem pb;
  Buffer grad_value({2, 5440, 8, 32}), grad_loc({2, 1000, 8, 4, 4, 2}), grad_attn({2, 1000, 8, 4, 4});
  for (auto _ : state) {
    sg::ms_deform_attn_backward(pb.value.view, pb.shapes_view, pb.starts_view, pb.loc.view, pb.attn.view, pb.grad.view,
                                grad_value.view, grad_loc.view, grad_attn.view);
  }
}
BENCHMARK(BM_ms_deform_attn_backward)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
