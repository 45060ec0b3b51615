#include "spatialgrad/grid_sampler_2d.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "detail/checks.h"
#include "detail/float_staging.h"
#include "detail/grid_sampler_2d_checks.h"
#include "detail/grid_sampler_2d_coords.h"
#include "detail/grid_sampler_2d_tables.h"
#include "spatialgrad/parallel.h"

namespace spatialgrad {
namespace {

using namespace detail::grid_sampler;  // the tables: detail/grid_sampler_2d_tables.h

constexpr const char* kForward = "grid_sampler_2d";
constexpr const char* kBackward = "grid_sampler_2d_backward";
// Input-gradient planes per backward task, at most.
constexpr int64_t kMaxChannelBlock = 8;

// ---- drivers -----------------------------------------------------------------------------------------

// Tables are grouped into runs of consecutive blocks of one batch. Kernels loop channels outside and
// the run's points inside, so one input (or input-gradient) plane stays in L1 while the run's tables
// stream from L2. A run has at most kMaxRunBlocks blocks, fewer when there are
// too few runs to give every thread two.
constexpr int64_t kMaxRunBlocks = 16;

// Channels handled per table sweep (each table entry is loaded once per group).
constexpr int kChannelGroup = 4;

// Calls fn(std::integral_constant<int, G>{}, c) for the groups [c, c + G) that cover [c0, c1).
template <class Fn>
void for_channel_groups(int64_t c0, int64_t c1, Fn&& fn) {
  int64_t c = c0;
  for (; c + kChannelGroup <= c1; c += kChannelGroup) fn(std::integral_constant<int, kChannelGroup>{}, c);
  for (; c < c1; ++c) fn(std::integral_constant<int, 1>{}, c);
}

struct Runs {
  int64_t blocks_per_run, per_batch, count;
};

template <class T>
Runs make_runs(const Context<T>& ctx, int64_t threads) {
  const int64_t wanted = (ctx.N * ctx.blocks + 2 * threads - 1) / (2 * threads);
  const int64_t per_run = std::clamp<int64_t>(wanted, 1, kMaxRunBlocks);
  const int64_t per_batch = (ctx.blocks + per_run - 1) / per_run;
  return {per_run, per_batch, ctx.N * per_batch};
}

// Forward: tasks are (batch, run, channel chunk); a task builds its run's tables once and loops its
// channels over them. Channels are chunked only when there are too few runs for the threads.
template <class T, class Table>
void forward_kernel(const Context<T>& ctx, const View4<T>& out) {
  const int64_t threads = get_num_threads();
  const Runs runs = make_runs(ctx, threads);
  int64_t chunk = ctx.C;
  if (runs.count < 2 * threads) chunk = std::max<int64_t>(1, ctx.C * runs.count / (2 * threads));
  const int64_t chunks = (ctx.C + chunk - 1) / chunk;
  const int64_t work =
      std::max<int64_t>(1, std::min(ctx.points, kBlock * runs.blocks_per_run) * (chunk * Table::kCost + 10));
  parallel_for(0, runs.count * chunks, grain_for(work), [&](int64_t lo, int64_t hi) {
    std::unique_ptr<Table[]> tables = new_tables<Table>(runs.blocks_per_run);
    int64_t built = -1, b0 = 0, b1 = 0, n = 0;
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t run = task / chunks, c0 = (task % chunks) * chunk, c1 = std::min(ctx.C, c0 + chunk);
      if (run != built) {
        n = run / runs.per_batch;
        b0 = (run % runs.per_batch) * runs.blocks_per_run;
        b1 = std::min(ctx.blocks, b0 + runs.blocks_per_run);
        for (int64_t b = b0; b < b1; ++b) tables[b - b0].build(ctx, n, b, false);
        built = run;
      }
      for_channel_groups(c0, c1, [&](auto group, int64_t c) {
        const T* src = ctx.input.plane(n, c);
        T* dst = out.plane(n, c);
        for (int64_t b = b0; b < b1; ++b) {
          tables[b - b0].template forward<decltype(group)::value>(ctx, src, ctx.input.s1, dst, out.s1);
        }
      });
    }
  });
}

// Input-gradient planes (n, c), (n, c + 1), ... as dense Acc planes step() apart: grad_input itself
// when its planes are dense rows of W, else scratch planes that finish() copies out through the strides.
template <class T>
struct GradInputPlanes {
  using Acc = AccType<T>;
  View4<T> gi;
  int64_t H, W;
  bool direct;

  GradInputPlanes(const TensorView& grad_input, int64_t H_, int64_t W_)
      : gi(view4<T>(grad_input)),
        H(H_),
        W(W_),
        direct(std::is_same_v<T, Acc> && gi.s3 == 1 && (gi.s2 == W_ || H_ == 1)) {}
  int64_t step() const { return direct ? gi.s1 : H * W; }
  std::vector<Acc> scratch() const { return std::vector<Acc>(direct ? 0 : static_cast<size_t>(kChannelGroup * H * W)); }
  Acc* start(std::vector<Acc>& scratch, int64_t n, int64_t c, int count) const {
    Acc* first = direct ? reinterpret_cast<Acc*>(gi.plane(n, c)) : scratch.data();
    for (int k = 0; k < count; ++k) std::fill(first + k * step(), first + k * step() + H * W, Acc(0));
    return first;
  }
  void finish(const Acc* first, int64_t n, int64_t c, int count) const {
    if (direct) return;
    for (int k = 0; k < count; ++k) {
      const Acc* plane = first + k * H * W;
      T* dst = gi.plane(n, c + k);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) dst[h * gi.s2 + w * gi.s3] = store_as<T>(plane[h * W + w]);
    }
  }
};

template <class T, class Table>
void write_zero_grid_grad(const Context<T>& ctx, const View4<T>& gg) {
  for (int64_t n = 0; n < ctx.N; ++n)
    for (int64_t h = 0; h < ctx.Ho; ++h)
      for (int64_t w = 0; w < ctx.Wo; ++w) {
        T* out = gg.data + n * gg.s0 + h * gg.s1 + w * gg.s2;
        out[0] = out[gg.s3] = store_as<T>(AccType<T>(0));
      }
}

// Backward. Every written element is summed in one fixed order (grid gradient: channels in order;
// input gradient: tables in block order, slots in table order), whatever the split, so results are
// bitwise identical for any thread count and no atomics are needed:
//  - fused, when every thread gets at least two batches: a task owns whole batches and does both
//    gradients in one sweep per channel (one read of grad_output and of the tables);
//  - otherwise two passes: (1) per (batch, run): build the tables and sum the grid gradient of their
//    points; (2) per (batch, channel block): scatter every table of the batch into zeroed planes.
template <class T, class Table>
struct Backward {
  using Acc = AccType<T>;
  const Context<T>& ctx;
  const View4<const T>& go;
  const TensorView* grad_input;  // null: not wanted
  const View4<T>* grad_grid;     // null: not wanted
  bool with_grad;                // grid gradient wanted and not identically zero
  int64_t threads;

  // The grid gradient of the blocks [b0, b1) of batch n, whose tables are `tables` (slots of ax, ay).
  void sum_grid_grad(const Table* tables, int64_t n, int64_t b0, int64_t b1, Acc* ax, Acc* ay) const {
    std::fill(ax, ax + 2 * kBlock * (b1 - b0), Acc(0));
    std::fill(ay, ay + 2 * kBlock * (b1 - b0), Acc(0));
    for_channel_groups(0, ctx.C, [&](auto group, int64_t c) {
      const T* src = ctx.input.plane(n, c);
      const T* g = go.plane(n, c);
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t slots = 2 * kBlock * (b - b0);
        tables[b - b0].template backward<false, true, decltype(group)::value>(ctx, src, ctx.input.s1, g, go.s1, nullptr,
                                                                              0, ax + slots, ay + slots);
      }
    });
    write_grid_grad(tables, n, b0, b1, ax, ay);
  }

  void write_grid_grad(const Table* tables, int64_t n, int64_t b0, int64_t b1, const Acc* ax, const Acc* ay) const {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t slots = 2 * kBlock * (b - b0);
      tables[b - b0].write_grid_grad(ctx, *grad_grid, n, ax + slots, ay + slots);
    }
  }

  // Both gradients of batch n in one sweep per channel group (the fused split).
  void fused_batch(Table* tables, const GradInputPlanes<T>& planes, std::vector<Acc>& scratch, int64_t n, Acc* ax,
                   Acc* ay) const {
    for (int64_t b = 0; b < ctx.blocks; ++b) tables[b].build(ctx, n, b, true);
    std::fill(ax, ax + 2 * kBlock * ctx.blocks, Acc(0));
    std::fill(ay, ay + 2 * kBlock * ctx.blocks, Acc(0));
    for_channel_groups(0, ctx.C, [&](auto group, int64_t c) {
      constexpr int kGroup = decltype(group)::value;
      Acc* gi = planes.start(scratch, n, c, kGroup);
      const T* src = ctx.input.plane(n, c);
      const T* g = go.plane(n, c);
      for (int64_t b = 0; b < ctx.blocks; ++b) {
        const int64_t slots = 2 * kBlock * b;
        tables[b].template backward<true, true, kGroup>(ctx, src, ctx.input.s1, g, go.s1, gi, planes.step(), ax + slots,
                                                        ay + slots);
      }
      planes.finish(gi, n, c, kGroup);
    });
    write_grid_grad(tables, n, 0, ctx.blocks, ax, ay);
  }

  void run_fused() const {
    const GradInputPlanes<T> planes(*grad_input, ctx.H, ctx.W);
    const int64_t work = ctx.points * (ctx.C * 2 * Table::kCost + 10) + ctx.C * ctx.H * ctx.W;
    parallel_for(0, ctx.N, grain_for(work), [&](int64_t lo, int64_t hi) {
      std::unique_ptr<Table[]> tables = new_tables<Table>(std::max<int64_t>(ctx.blocks, 1));
      std::vector<Acc> ax(static_cast<size_t>(2 * kBlock * ctx.blocks)), ay(ax.size()), scratch = planes.scratch();
      for (int64_t n = lo; n < hi; ++n) fused_batch(tables.get(), planes, scratch, n, ax.data(), ay.data());
    });
  }

  // Pass 1: per (batch, run), build the run's tables (into `kept`, the whole call's tables, when pass 2
  // needs them) and sum their grid gradient.
  void run_tables_pass(Table* kept) const {
    const Runs runs = make_runs(ctx, threads);
    const int64_t work =
        std::min(ctx.points, kBlock * runs.blocks_per_run) * (with_grad ? ctx.C * Table::kCost + 10 : 10);
    parallel_for(0, runs.count, grain_for(work), [&](int64_t lo, int64_t hi) {
      std::unique_ptr<Table[]> local;
      if (!kept) local = new_tables<Table>(runs.blocks_per_run);
      std::vector<Acc> ax(with_grad ? 2 * kBlock * runs.blocks_per_run : 0), ay(ax.size());
      for (int64_t run = lo; run < hi; ++run) {
        const int64_t n = run / runs.per_batch, b0 = (run % runs.per_batch) * runs.blocks_per_run;
        const int64_t b1 = std::min(ctx.blocks, b0 + runs.blocks_per_run);
        Table* run_tables = kept ? &kept[n * ctx.blocks + b0] : local.get();
        for (int64_t b = b0; b < b1; ++b) run_tables[b - b0].build(ctx, n, b, with_grad);
        if constexpr (Table::kHasGridGrad) {
          if (with_grad) sum_grid_grad(run_tables, n, b0, b1, ax.data(), ay.data());
        }
      }
    });
  }

  // Pass 2: per (batch, channel block), scatter every table of the batch into zeroed planes.
  void run_scatter_pass(const Table* tables) const {
    const GradInputPlanes<T> planes(*grad_input, ctx.H, ctx.W);
    const int64_t channel_block =
        std::clamp<int64_t>((ctx.N * ctx.C + 2 * threads - 1) / (2 * threads), 1, std::min(ctx.C, kMaxChannelBlock));
    const int64_t cblocks = (ctx.C + channel_block - 1) / channel_block;
    const int64_t work = channel_block * (ctx.H * ctx.W + ctx.points * Table::kCost);
    parallel_for(0, ctx.N * cblocks, grain_for(work), [&](int64_t lo, int64_t hi) {
      std::vector<Acc> scratch = planes.scratch();
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t n = task / cblocks, c0 = (task % cblocks) * channel_block;
        for_channel_groups(c0, std::min(ctx.C, c0 + channel_block), [&](auto group, int64_t c) {
          constexpr int kGroup = decltype(group)::value;
          Acc* gi = planes.start(scratch, n, c, kGroup);
          for (int64_t b = 0; b < ctx.blocks; ++b) {
            tables[n * ctx.blocks + b].template backward<true, false, kGroup>(
                ctx, static_cast<const T*>(nullptr), 0, go.plane(n, c), go.s1, gi, planes.step(), nullptr, nullptr);
          }
          planes.finish(gi, n, c, kGroup);
        });
      }
    });
  }

  void run() const {
    if constexpr (!Table::kHasGridGrad) {
      if (grad_grid != nullptr) write_zero_grid_grad<T, Table>(ctx, *grad_grid);
    }
    const int64_t units = ctx.N * ctx.blocks;
    if (units == 0 && grad_input == nullptr) return;
    if constexpr (Table::kHasGridGrad) {
      if (grad_input != nullptr && with_grad && ctx.N >= 2 * threads) return run_fused();
    }
    std::unique_ptr<Table[]> tables;
    if (grad_input != nullptr && units > 0) tables = new_tables<Table>(units);
    if (units > 0 && (tables || with_grad)) run_tables_pass(tables.get());
    if (grad_input != nullptr) run_scatter_pass(tables.get());
  }
};

template <class T, class Table>
void backward_kernel(const Context<T>& ctx, const View4<const T>& go, const TensorView* grad_input,
                     const View4<T>* grad_grid) {
  const bool with_grad = grad_grid != nullptr && Table::kHasGridGrad;
  Backward<T, Table>{ctx, go, grad_input, grad_grid, with_grad, get_num_threads()}.run();
}

template <class X>
struct TypeTag {
  using type = X;
};

// Calls fn(TypeTag<Table>{}) with the table type of the interpolation mode.
template <class T, class Fn>
void dispatch_table(GridSamplerInterpolation interpolation, Fn&& fn) {
  using Acc = AccType<T>;
  switch (interpolation) {
    case GridSamplerInterpolation::kBilinear:
      return fn(TypeTag<BilinearTable<Acc>>{});
    case GridSamplerInterpolation::kNearest:
      return fn(TypeTag<NearestTable<Acc>>{});
    case GridSamplerInterpolation::kBicubic:
      break;
  }
  return fn(TypeTag<BicubicTable<Acc>>{});
}

template <class T>
void run_forward(const TensorView& input, const TensorView& grid, const TensorView& output,
                 const GridSampler2dParams& params) {
  const Context<T> ctx = make_context<T>(input, grid, output, params);
  dispatch_table<T>(detail::interpolation_of(params), [&](auto table_tag) {
    forward_kernel<T, typename decltype(table_tag)::type>(ctx, view4<T>(output));
  });
}

// grad_input / grad_grid: null when not wanted.
template <class T>
void run_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                  const TensorView* grad_input, const TensorView* grad_grid, const GridSampler2dParams& params) {
  const Context<T> ctx = make_context<T>(input, grid, grad_output, params);
  const View4<T> gg = grad_grid ? view4<T>(*grad_grid) : View4<T>{};
  dispatch_table<T>(detail::interpolation_of(params), [&](auto table_tag) {
    backward_kernel<T, typename decltype(table_tag)::type>(ctx, view4<const T>(grad_output),
                                                           grad_input && !grad_input->is_empty() ? grad_input : nullptr,
                                                           grad_grid ? &gg : nullptr);
  });
}

// float16/bfloat16: staged to float32 (detail/float_staging.h), run in float32, rounded once.
void run_backward_staged(const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                         const TensorView* grad_input, const TensorView* grad_grid, const GridSampler2dParams& params) {
  using detail::FloatStaging;
  const auto staged_grad_output = FloatStaging::copy_of(grad_output);
  const auto staged_input = FloatStaging::copy_of(input), staged_grid = FloatStaging::copy_of(grid);
  const auto staged_grad_input = grad_input ? FloatStaging::like(*grad_input) : FloatStaging();
  const auto staged_grad_grid = grad_grid ? FloatStaging::like(*grad_grid) : FloatStaging();
  run_backward<float>(staged_grad_output.view(), staged_input.view(), staged_grid.view(),
                      grad_input ? &staged_grad_input.view() : nullptr, grad_grid ? &staged_grad_grid.view() : nullptr,
                      params);
  if (grad_input) staged_grad_input.narrow_into(*grad_input);
  if (grad_grid) staged_grad_grid.narrow_into(*grad_grid);
}

}  // namespace

std::vector<int64_t> grid_sampler_2d_output_shape(const std::vector<int64_t>& input_shape,
                                                  const std::vector<int64_t>& grid_shape) {
  return detail::grid_sampler_output_shape(kForward, input_shape, grid_shape);
}

void grid_sampler_2d(const TensorView& input, const TensorView& grid, const TensorView& output,
                     const GridSampler2dParams& params) {
  detail::check_grid_sampler_modes(kForward, params);
  const std::vector<int64_t> expected = detail::grid_sampler_output_shape(kForward, input.sizes(), grid.sizes());
  detail::check_same_dtype(kForward, "grid", grid, "input", input);
  detail::check_shape(kForward, "output", output, expected);
  detail::check_same_dtype(kForward, "output", output, "input", input);
  dispatch_floating(input.dtype(), kForward, "input", [&](auto tag) {
    using T = decltype(tag);
    if (output.is_empty()) return;
    if constexpr (detail::kIsHalfType<T>) {  // detail/float_staging.h
      const auto staged_input = detail::FloatStaging::copy_of(input), staged_grid = detail::FloatStaging::copy_of(grid);
      const auto staged_output = detail::FloatStaging::like(output);
      run_forward<float>(staged_input.view(), staged_grid.view(), staged_output.view(), params);
      staged_output.narrow_into(output);
    } else {
      run_forward<T>(input, grid, output, params);
    }
  });
}

void check_grid_sampler_2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                                    const TensorView& grad_input, const TensorView& grad_grid,
                                    const GridSampler2dParams& params, const std::vector<bool>& output_mask) {
  detail::check_grid_sampler_modes(kBackward, params);
  SG_CHECK(output_mask.size() == 2, kBackward,
           "(): expected output_mask to have 2 entries (grad_input, grad_grid), but got ", output_mask.size());
  const std::vector<int64_t> expected = detail::grid_sampler_output_shape(kBackward, input.sizes(), grid.sizes());
  detail::check_grid_sampler_grad_output(kBackward, grad_output, expected);
  detail::check_same_dtype(kBackward, "input", input, "grad_output", grad_output);
  detail::check_same_dtype(kBackward, "grid", grid, "grad_output", grad_output);
  const bool want_input = output_mask[0], want_grid = output_mask[1];
  if (want_input) {
    detail::check_shape(kBackward, "grad_input", grad_input, input.sizes());
    detail::check_same_dtype(kBackward, "grad_input", grad_input, "grad_output", grad_output);
  }
  if (want_grid) {
    detail::check_shape(kBackward, "grad_grid", grad_grid, grid.sizes());
    detail::check_same_dtype(kBackward, "grad_grid", grad_grid, "grad_output", grad_output);
  }
  dispatch_floating(grad_output.dtype(), kBackward, "grad_output", [](auto) {});
}

void grid_sampler_2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                              const TensorView& grad_input, const TensorView& grad_grid,
                              const GridSampler2dParams& params, const std::vector<bool>& output_mask) {
  check_grid_sampler_2d_backward(grad_output, input, grid, grad_input, grad_grid, params, output_mask);
  const TensorView* wanted_input = output_mask[0] ? &grad_input : nullptr;
  const TensorView* wanted_grid = output_mask[1] ? &grad_grid : nullptr;
  if ((!wanted_input || grad_input.is_empty()) && (!wanted_grid || grad_grid.is_empty())) return;
  if (grad_output.is_empty()) {
    // No output point or no channel: zero gradients, without forming pointers into the empty (possibly
    // null) tensors (found by the aclnn fuzzer).
    if (wanted_input) fill_zeros(grad_input);
    if (wanted_grid) fill_zeros(grad_grid);
    return;
  }
  dispatch_floating(grad_output.dtype(), kBackward, "grad_output", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (detail::kIsHalfType<T>) {
      run_backward_staged(grad_output, input, grid, wanted_input, wanted_grid, params);
    } else {
      run_backward<T>(grad_output, input, grid, wanted_input, wanted_grid, params);
    }
  });
}

}  // namespace spatialgrad
