#include "spatialgrad/grid_sampler_2d.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <vector>

#include "detail/checks.h"
#include "detail/entry.h"
#include "detail/grid_sampler_2d_checks.h"
#include "detail/grid_sampler_2d_coords.h"
#include "detail/grid_sampler_2d_planes.h"
#include "detail/strategy.h"
#include "detail/grid_sampler_2d_tables.h"
#include "detail/grid_sampler_2d_vectors.h"
#include "detail/parallel_for.h"
#include "detail/rows.h"
#include "detail/scratch_bound.h"

namespace spatialgrad {
namespace {

using namespace detail::grid_sampler;  // the tables: detail/grid_sampler_2d_tables.h

constexpr const char* kForward = "grid_sampler_2d";
constexpr const char* kBackward = "grid_sampler_2d_backward";
// ---- tiles ---------------------------------------------------------------------------------------------

// A thread's tiles (grid_sampler_2d_tables.h): an input tile and an input-gradient tile of
// ctx.layout.pixels pixels, a point tile of a table block, and the scratch of pack_lanes / unpack_lanes,
// all of kTileLanes channels. Allocated once per thread and task loop; the input tile's framing pixels
// are zero from here on (packing writes only the image's pixels).
template <class T>
struct Tiles {
  using Acc = AccType<T>;
  static constexpr int64_t kLanes = kTileLanes<Acc>;
  const Context<T>& ctx;
  std::vector<Acc> input, grad_input, points, scratch;

  Tiles(const Context<T>& c, bool with_input, bool with_grad_input)
      : ctx(c),
        input(with_input ? static_cast<size_t>(c.layout.pixels * kLanes) : 0),
        grad_input(with_grad_input ? static_cast<size_t>(c.layout.pixels * kLanes) : 0),
        points(static_cast<size_t>(kBlock * kLanes)),
        scratch(static_cast<size_t>(std::max(c.W, kBlock) * kLanes)) {}

  Acc* image_row(std::vector<Acc>& tile, int64_t h) const {
    return tile.data() + int64_t{ctx.layout.pixel(static_cast<int32_t>(h), 0)} * kLanes;
  }
  // The input tile of channels [c, c + count) of batch n.
  void pack_input(int64_t n, int64_t c, int64_t count) {
    const View4<const T>& in = ctx.input;
    for (int64_t h = 0; h < ctx.H; ++h) {
      detail::pack_lanes<kLanes>(in.plane(n, c) + h * in.s2, in.s1, count, in.s3, ctx.W, scratch.data(),
                                 image_row(input, h));
    }
  }
  void zero_grad_input() { std::fill(grad_input.begin(), grad_input.end(), Acc(0)); }
  // Writes the image pixels of the input-gradient tile to channels [c, c + count) of batch n of gi.
  void unpack_grad_input(const View4<T>& gi, int64_t n, int64_t c, int64_t count) {
    for (int64_t h = 0; h < ctx.H; ++h) {
      detail::unpack_lanes<kLanes>(image_row(grad_input, h), ctx.W, count, scratch.data(), gi.plane(n, c) + h * gi.s2,
                                   gi.s1, gi.s3);
    }
  }

  // Calls fn(h, w, first, len) for the runs of points of block b along the rows of the point planes:
  // points [first, first + len) of the block are (h, w), (h, w + 1), ...
  template <class Fn>
  void for_block_rows(int64_t b, Fn&& fn) const {
    const int64_t begin = b * kBlock, end = ctx.block_end(b);
    for (int64_t p = begin; p < end;) {
      const int64_t h = p / ctx.Wo, w = p % ctx.Wo, len = std::min(end - p, ctx.Wo - w);
      fn(h, w, p - begin, len);
      p += len;
    }
  }
  // The point tile of block b from channels [c, c + count) of batch n of the point planes (grad_output).
  void pack_points(const View4<const T>& planes, int64_t n, int64_t c, int64_t count, int64_t b) {
    for_block_rows(b, [&](int64_t h, int64_t w, int64_t first, int64_t len) {
      detail::pack_lanes<kLanes>(planes.plane(n, c) + h * ctx.point_s2 + w * ctx.point_s3, planes.s1, count,
                                 ctx.point_s3, len, scratch.data(), points.data() + first * kLanes);
    });
  }
  // Writes the point tile of block b to channels [c, c + count) of batch n of the point planes (output).
  void unpack_points(const View4<T>& planes, int64_t n, int64_t c, int64_t count, int64_t b) {
    for_block_rows(b, [&](int64_t h, int64_t w, int64_t first, int64_t len) {
      detail::unpack_lanes<kLanes>(points.data() + first * kLanes, len, count, scratch.data(),
                                   planes.plane(n, c) + h * ctx.point_s2 + w * ctx.point_s3, planes.s1, ctx.point_s3);
    });
  }
};

// Calls fn(c, count) for the tiles of channels [c0, c1).
template <class Acc, class Fn>
void for_channel_tiles(int64_t c0, int64_t c1, Fn&& fn) {
  for (int64_t c = c0; c < c1; c += kTileLanes<Acc>) fn(c, std::min(kTileLanes<Acc>, c1 - c));
}

// ---- drivers -----------------------------------------------------------------------------------------

// Tables are grouped into runs of consecutive blocks of one batch. Kernels loop channel tiles outside
// and the run's points inside, so one input (or input-gradient) tile stays in L2 while the run's
// tables stream. A run has at most kMaxRunBlocks blocks, fewer when there are too few runs to give
// every thread two, but at least as many points as the tile has pixels (up to the whole batch): each
// run packs its tiles again, and with fewer points than pixels the packing would cost more than the
// sweep (the plane (8,3,256,256) with a 256^2 grid was packed 16 times per batch: 5x the sweep).
constexpr int64_t kMaxRunBlocks = 16;

struct Runs {
  int64_t blocks_per_run, per_batch, count;
};

template <class T>
int64_t min_run_blocks(const Context<T>& ctx) {
  return std::min(ctx.blocks, (int64_t{ctx.layout.pixels} + kBlock - 1) / kBlock);
}

template <class T>
Runs make_runs(const Context<T>& ctx, int64_t threads) {
  const int64_t wanted = (ctx.N * ctx.blocks + 2 * threads - 1) / (2 * threads);
  const int64_t per_run = std::max({std::min(wanted, kMaxRunBlocks), min_run_blocks(ctx), int64_t{1}});
  const int64_t per_batch = (ctx.blocks + per_run - 1) / per_run;
  return {per_run, per_batch, ctx.N * per_batch};
}

// Forward: tasks are (batch, run, channel chunk); a task builds its run's tables once and, per channel
// tile, packs the input tile and sweeps the run's tables over it. Channels are chunked (in whole
// tiles) only when there are too few runs for the threads.
template <class T, class Table>
void forward_kernel(const Context<T>& ctx, const View4<T>& out) {
  using Acc = AccType<T>;
  const int64_t threads = get_num_threads(), lanes = kTileLanes<Acc>;
  const Runs runs = make_runs(ctx, threads);
  const int64_t tiles = (ctx.C + lanes - 1) / lanes;
  int64_t chunk = tiles;
  if (runs.count < 2 * threads) chunk = std::max<int64_t>(1, tiles * runs.count / (2 * threads));
  const int64_t chunks = (tiles + chunk - 1) / chunk;
  const int64_t points = std::min(ctx.points, kBlock * runs.blocks_per_run);
  const int64_t work = std::max<int64_t>(1, chunk * (points * Table::kCost + ctx.H * ctx.W) + points * 10);
  parallel_for(0, runs.count * chunks, grain_for(work), [&](int64_t lo, int64_t hi) {
    std::unique_ptr<Table[]> tables = new_tables<Table>(runs.blocks_per_run);
    Tiles<T> tile(ctx, true, false);
    int64_t built = -1, b0 = 0, b1 = 0, n = 0;
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t run = task / chunks, c0 = (task % chunks) * chunk * lanes;
      const int64_t c1 = std::min(ctx.C, c0 + chunk * lanes);
      if (run != built) {
        n = run / runs.per_batch;
        b0 = (run % runs.per_batch) * runs.blocks_per_run;
        b1 = std::min(ctx.blocks, b0 + runs.blocks_per_run);
        for (int64_t b = b0; b < b1; ++b) tables[b - b0].build(ctx, n, b, false);
        built = run;
      }
      for_channel_tiles<Acc>(c0, c1, [&](int64_t c, int64_t count) {
        tile.pack_input(n, c, count);
        for (int64_t b = b0; b < b1; ++b) {
          tables[b - b0].forward(tile.input.data(), ctx.layout.row, tile.points.data());
          tile.unpack_points(out, n, c, count, b);
        }
      });
    }
  });
}

template <class T>
void write_zero_grid_grad(const Context<T>& ctx, const View4<T>& gg) {
  if (ctx.dense_pairs(gg) && gg.s0 == 2 * ctx.points) {
    std::fill(gg.data, gg.data + 2 * ctx.N * ctx.points, store_as<T>(AccType<T>(0)));
    return;
  }
  for (int64_t n = 0; n < ctx.N; ++n)
    for (int64_t h = 0; h < ctx.Ho; ++h)
      for (int64_t w = 0; w < ctx.Wo; ++w) {
        T* out = gg.data + n * gg.s0 + h * gg.s1 + w * gg.s2;
        out[0] = out[gg.s3] = store_as<T>(AccType<T>(0));
      }
}

// The grid-gradient sums of a run of tables: per point, a vector of kTileLanes per axis that adds up the
// channel tiles lane by lane; write_grid_grad sums its lanes at the end. The fused backward keeps a whole
// batch's (16 KB per block of points), which was still faster than the two-pass split past L2 (measured,
// grids of 36, 64 and 256 blocks: 2.5 vs 3.3, 5.3 vs 6.6, 19.2 vs 23.6 ms).
template <class Acc>
struct GridSums {
  static constexpr int64_t kPerBlock = kBlock * kTileLanes<Acc>;
  std::vector<Acc> x, y;

  explicit GridSums(int64_t blocks) : x(static_cast<size_t>(blocks * kPerBlock)), y(x.size()) {}
  void zero(int64_t blocks) {
    std::fill(x.begin(), x.begin() + blocks * kPerBlock, Acc(0));
    std::fill(y.begin(), y.begin() + blocks * kPerBlock, Acc(0));
  }
  Acc* x_of(int64_t block) { return x.data() + block * kPerBlock; }
  Acc* y_of(int64_t block) { return y.data() + block * kPerBlock; }
};

// Backward. Every written element is summed in one fixed order (grid gradient: per lane the channel
// tiles in order, then the lanes in lane order (rows.h add_lane_sums); input gradient: tables in block
// order, points in table order), whatever the split, so results are bitwise identical for any thread
// count and no atomics are needed:
//  - fused, when every thread gets at least two batches: a task owns whole batches and does both
//    gradients in one sweep per channel tile (one read of grad_output and of the tables);
//  - otherwise two passes: (1) per (batch, run): build the tables and sum the grid gradient of their
//    points; (2) per (batch, channel tile): scatter every table of the batch into a zeroed tile.
template <class T, class Table>
struct Backward {
  using Acc = AccType<T>;
  const Context<T>& ctx;
  const View4<const T>& go;
  const View4<T>* grad_input;  // null: not wanted
  const View4<T>* grad_grid;   // null: not wanted
  bool with_grad;              // grid gradient wanted and not identically zero
  int64_t threads;

  // One table's backward for channels [c, c + count) of batch n: packs block b of grad_output, then
  // kScatter adds into the tile's input gradient, kGrid adds to the block's grid sums vx, vy.
  template <bool kScatter, bool kGrid>
  void sweep_block(const Table& table, Tiles<T>& tile, int64_t n, int64_t c, int64_t count, int64_t b, Acc* vx,
                   Acc* vy) const {
    tile.pack_points(go, n, c, count, b);
    table.template backward<kScatter, kGrid>(kGrid ? tile.input.data() : nullptr, tile.points.data(),
                                             kScatter ? tile.grad_input.data() : nullptr, ctx.layout.row, vx, vy);
  }

  // The grid gradient of the blocks [b0, b1) of batch n, whose tables are `tables`.
  void sum_grid_grad(const Table* tables, Tiles<T>& tile, int64_t n, int64_t b0, int64_t b1,
                     GridSums<Acc>& sums) const {
    sums.zero(b1 - b0);
    for_channel_tiles<Acc>(0, ctx.C, [&](int64_t c, int64_t count) {
      tile.pack_input(n, c, count);
      for (int64_t b = b0; b < b1; ++b) {
        sweep_block<false, true>(tables[b - b0], tile, n, c, count, b, sums.x_of(b - b0), sums.y_of(b - b0));
      }
    });
    write_grid_grads(tables, tile, n, b0, b1, sums);
  }

  void write_grid_grads(const Table* tables, Tiles<T>& tile, int64_t n, int64_t b0, int64_t b1,
                        GridSums<Acc>& sums) const {
    for (int64_t b = b0; b < b1; ++b) {
      write_grid_grad(tables[b - b0], ctx, *grad_grid, n, b, sums.x_of(b - b0), sums.y_of(b - b0), tile.scratch.data());
    }
  }

  // Both gradients of batch n in one sweep per channel tile (the fused split).
  void fused_batch(Table* tables, Tiles<T>& tile, int64_t n, GridSums<Acc>& sums) const {
    for (int64_t b = 0; b < ctx.blocks; ++b) tables[b].build(ctx, n, b, true);
    sums.zero(ctx.blocks);
    for_channel_tiles<Acc>(0, ctx.C, [&](int64_t c, int64_t count) {
      tile.pack_input(n, c, count);
      tile.zero_grad_input();
      for (int64_t b = 0; b < ctx.blocks; ++b) {
        sweep_block<true, true>(tables[b], tile, n, c, count, b, sums.x_of(b), sums.y_of(b));
      }
      tile.unpack_grad_input(*grad_input, n, c, count);
    });
    write_grid_grads(tables, tile, n, 0, ctx.blocks, sums);
  }

  void run_fused() const {
    const int64_t work = ctx.points * (ctx.C * 2 * Table::kCost + 10) + 3 * ctx.C * ctx.H * ctx.W;
    parallel_for(0, ctx.N, grain_for(work), [&](int64_t lo, int64_t hi) {
      std::unique_ptr<Table[]> tables = new_tables<Table>(std::max<int64_t>(ctx.blocks, 1));
      GridSums<Acc> sums(ctx.blocks);
      Tiles<T> tile(ctx, true, true);
      for (int64_t n = lo; n < hi; ++n) fused_batch(tables.get(), tile, n, sums);
    });
  }

  // Pass 1: per (batch, run), build the run's tables (into `kept`, the whole call's tables, when pass 2
  // needs them) and sum their grid gradient.
  void run_tables_pass(Table* kept) const {
    const Runs runs = make_runs(ctx, threads);
    const int64_t points = std::min(ctx.points, kBlock * runs.blocks_per_run);
    const int64_t work = with_grad ? points * (ctx.C * Table::kCost + 10) + ctx.C * ctx.H * ctx.W : points * 10;
    parallel_for(0, runs.count, grain_for(work), [&](int64_t lo, int64_t hi) {
      std::unique_ptr<Table[]> local;
      if (!kept) local = new_tables<Table>(runs.blocks_per_run);
      GridSums<Acc> sums(with_grad ? runs.blocks_per_run : 0);
      std::unique_ptr<Tiles<T>> tile;
      if (with_grad) tile = std::make_unique<Tiles<T>>(ctx, true, false);
      for (int64_t run = lo; run < hi; ++run) {
        const int64_t n = run / runs.per_batch, b0 = (run % runs.per_batch) * runs.blocks_per_run;
        const int64_t b1 = std::min(ctx.blocks, b0 + runs.blocks_per_run);
        Table* run_tables = kept ? &kept[n * ctx.blocks + b0] : local.get();
        for (int64_t b = b0; b < b1; ++b) run_tables[b - b0].build(ctx, n, b, with_grad);
        if constexpr (Table::kHasGridGrad) {
          if (with_grad) sum_grid_grad(run_tables, *tile, n, b0, b1, sums);
        }
      }
    });
  }

  // Pass 2: per (batch, channel tile), scatter every table of the batch into a zeroed tile.
  void run_scatter_pass(const Table* tables) const {
    const int64_t lanes = kTileLanes<Acc>, tiles = (ctx.C + lanes - 1) / lanes;
    const int64_t work = lanes * (ctx.H * ctx.W) + ctx.points * Table::kCost;
    parallel_for(0, ctx.N * tiles, grain_for(work), [&](int64_t lo, int64_t hi) {
      Tiles<T> tile(ctx, false, true);
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t n = task / tiles, c = (task % tiles) * lanes, count = std::min(lanes, ctx.C - c);
        tile.zero_grad_input();
        for (int64_t b = 0; b < ctx.blocks; ++b) {
          sweep_block<true, false>(tables[n * ctx.blocks + b], tile, n, c, count, b, nullptr, nullptr);
        }
        tile.unpack_grad_input(*grad_input, n, c, count);
      }
    });
  }

  void run() const {
    if constexpr (!Table::kHasGridGrad) {
      if (grad_grid != nullptr) write_zero_grid_grad<T>(ctx, *grad_grid);
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
void backward_kernel(const Context<T>& ctx, const View4<const T>& go, const View4<T>* grad_input,
                     const View4<T>* grad_grid) {
  const bool with_grad = grad_grid != nullptr && Table::kHasGridGrad;
  Backward<T, Table>{ctx, go, grad_input, grad_grid, with_grad, get_num_threads()}.run();
}

// ---- the plane strategy (detail/grid_sampler_2d_planes.h) -------------------------------------------

template <class T>
PlaneGeometry plane_geometry(const Context<T>& ctx) {
  return PlaneGeometry(ctx.input.s2, ctx.input.s3, ctx.H, ctx.W, kGathers<T>);
}

// A group of at most kBlock points of one batch that share a table: block b (points b * kBlock, ...), or a
// list of points (the points of a bin of rows, below).
template <class Acc>
struct PointGroup {
  int64_t first = 0;              // a block's first point
  const int32_t* list = nullptr;  // or the points
  int64_t count = 0;
  const Acc* gx = nullptr;        // with a list: the listed points' grid values (kept by the bins)
  const Acc* gy = nullptr;
  int64_t point(int64_t i) const { return list != nullptr ? list[i] : first + i; }
};

template <class T>
PointGroup<AccType<T>> block_group(const Context<T>& ctx, int64_t b) {
  return {b * kBlock, nullptr, ctx.block_end(b) - b * kBlock};
}

// The table of a group's points (bicubic's built as point vectors, grid_sampler_2d_vectors.h: the same values).
template <class T, class Table>
void build_table(Table& table, const Context<T>& ctx, int64_t n, const PointGroup<AccType<T>>& group,
                 const PlaneGeometry& g, bool with_grad) {
  using Acc = AccType<T>;
  Acc gx[kBlock], gy[kBlock];
  const Acc* x = group.gx;
  const Acc* y = group.gy;
  if (group.list == nullptr) {
    ctx.grid_block(n, group.first / kBlock, gx, gy);
    x = gx;
    y = gy;
  }
  if constexpr (std::is_same_v<Table, PlaneBicubic<Acc>>) {
    SG_SIMD_DISPATCH(bicubic_vectors_build(isa, x, y, group.count, ctx, g, with_grad, table));
  } else {
    table.build(ctx, x, y, group.count, g, with_grad);
  }
}

// The offsets of a group's points in the point planes (output or grad_output); true when they are one
// run (offset[i] = offset[0] + i), so that the sweeps may write a channel's values straight. Known here
// once per group: checking per channel cost 19% of a nearest forward on (8,3,256,256).
template <class T>
bool point_offsets(const Context<T>& ctx, const PointGroup<AccType<T>>& group, int64_t* __restrict offset) {
  const bool dense = ctx.point_s3 == 1 && ctx.point_s2 == ctx.Wo;  // offsets are the points' own numbers
  const int64_t first = group.first, count = group.count;          // locals: the stores cannot alias them
  if (group.list == nullptr && dense) {
    for (int64_t i = 0; i < count; ++i) offset[i] = first + i;
    return true;
  }
  if (group.list == nullptr) {
    const int64_t b = first / kBlock;
    ctx.for_points(b, [&](int64_t p, int64_t h, int64_t w) { offset[p - first] = h * ctx.point_s2 + w * ctx.point_s3; });
  } else {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t p = group.list[i];
      offset[i] = dense ? p : p / ctx.Wo * ctx.point_s2 + p % ctx.Wo * ctx.point_s3;
    }
  }
  return count > 0 && consecutive(offset, count);
}

// Large planes are swept bin by bin: a bin is a run of rows whose planes (input, and input gradient in
// the backward) fit in kBinBytes, and lists the points of a batch that read (or own) its rows, in point
// order. A task sweeping a bin then finds its taps in L2 instead of across the whole plane: on a random
// 1024^2 grid over (2,3,1024,1024), the gathers and scatters took 70% of the backward, cache misses.
constexpr int64_t kBinBytes = int64_t{1} << 20;
// Bins are used when the planes that the block sweep would touch at once (one batch per thread) overflow
// the last-level cache, and the lists (4 bytes a point and its grid values, more for the points read by two
// bins) stay within kBinMaxListBytes. Below that, listing the points (two more table builds a point) and
// the bins' uneven split over the threads cost more than the L3 misses they save. Measured with each
// forced, 2 threads, core call, uniform grids, this machine's 32 MiB L3 (nobins/bins time, above 1: bins
// pay): bilinear, both gradients, by bytes swept at once: (4,3,512,384) 256x192 9.4 MiB 0.59x,
// (2,3,512,512) 512^2 12.6 MiB 0.64x, (2,16,256,256) 1024^2 16.8 MiB 1.42x, (4,8,512,384) 256x192 25 MiB
// 2.05x, (2,3,1024,1024) 1024^2 50 MiB 1.60x, (1,1,8000,8000) 256^2 1.33x. Scatters (the input gradient)
// miss at a higher cost than reads: with the grid gradient alone (one plane read) 25 MiB was 0.55x and
// 33.5 MiB 1.10x. Nearest reads one tap a point and channel, and pays later: 46-50 MiB 0.55-0.90x,
// (1,3,2048,2048) 224^2 (100 MiB) 1.38x.
constexpr int64_t kBinMinSweptBytes = int64_t{16} << 20;
constexpr int64_t kBinMaxListBytes = int64_t{48} << 20;

template <class Acc>
struct RowBins {
  int32_t rows = 0;            // per bin
  int64_t count = 0;           // bins
  std::vector<int64_t> start;  // bin k lists points[start[k], start[k + 1])
  std::vector<int32_t> points;
  std::vector<Acc> gx, gy;  // their grid values, so that the bins read them in order, not across the grid
  PointGroup<Acc> group(int64_t k, int64_t first) const {
    const int64_t at = start[static_cast<size_t>(k)] + first;
    return {0, points.data() + at, std::min(kBlock, size(k) - first), gx.data() + at, gy.data() + at};
  }
  int64_t size(int64_t k) const { return start[static_cast<size_t>(k) + 1] - start[static_cast<size_t>(k)]; }
};

// Rows per bin, or 0 when the call is better swept block by block. bytes_per_row: of every plane a bin
// task touches; scatters: the input gradient is wanted; threads: of the block sweep.
template <class T, class Table>
int32_t rows_per_bin(const Context<T>& ctx, int64_t bytes_per_row, bool scatters, int64_t threads) {
  const int64_t swept_at_once = bytes_per_row * ctx.H * std::min(threads, ctx.N);
  const int64_t threshold = kBinMinSweptBytes * (scatters ? 1 : 2) * (Table::kTaps == 1 ? 4 : 1);
  if (swept_at_once <= threshold || ctx.points < ctx.H) return 0;
  const int64_t entry = sizeof(int32_t) + 2 * sizeof(AccType<T>);
  if (2 * ctx.points * entry > kBinMaxListBytes) return 0;
  return static_cast<int32_t>(std::clamp<int64_t>(kBinBytes / bytes_per_row, 1, ctx.H));
}

// Bins pay only when a block's points are scattered over the plane: on a smooth grid (a flow field, an
// affine crop) consecutive points read neighbouring rows, the blocks already sweep the plane in order, and
// listing the points cost more than it saved ((2,3,1024,1024) flow forward 34 vs 20 ms for PyTorch; a
// 256^2 crop of a 10000^2 plane put every point in one or two bins, and so on one thread). Sampled: the
// rows spanned by up to kBinSampleBlocks blocks of batch 0; bins when the median span passes
// kBinScatterBins bins.
constexpr int64_t kBinSampleBlocks = 16;
constexpr int64_t kBinScatterBins = 4;

template <class T, class Table>
bool scattered(const Context<T>& ctx, int32_t rows) {
  const PlaneGeometry g = plane_geometry(ctx);
  const std::unique_ptr<Table> table(new Table);
  const int64_t samples = std::min(kBinSampleBlocks, ctx.blocks);
  std::vector<int64_t> spans;
  for (int64_t k = 0; k < samples; ++k) {
    const int64_t b = k * ctx.blocks / samples;
    build_table(*table, ctx, 0, block_group(ctx, b), g, false);
    int32_t lo = INT32_MAX, hi = 0;
    for (int64_t i = 0; i < table->count; ++i) {
      int32_t first, last;
      table->rows(i, g, first, last);
      lo = std::min(lo, first);
      hi = std::max(hi, last);
    }
    spans.push_back(int64_t{hi} - lo);
  }
  std::nth_element(spans.begin(), spans.begin() + samples / 2, spans.end());
  return spans[static_cast<size_t>(samples / 2)] > kBinScatterBins * rows;
}

// The rows per bin of a call whose bin tasks touch bytes_per_row per row, or 0: swept block by block. A band
// size pinned by a test (set_strategy_for_testing("grid_sampler_2d", "planes", rows)) bins any call by
// that many rows, so that tests reach the bins on small planes.
template <class T, class Table>
int32_t bin_rows(const Context<T>& ctx, int64_t bytes_per_row, bool scatters, int64_t threads) {
  const int64_t pinned = detail::pinned_band<detail::GridSampler2dStrategy>();
  if (pinned > 0) return static_cast<int32_t>(std::min<int64_t>(pinned, ctx.H));
  const int32_t rows = rows_per_bin<T, Table>(ctx, bytes_per_row, scatters, threads);
  return rows > 0 && scattered<T, Table>(ctx, rows) ? rows : 0;
}

// Lists batch n's points by bins of `rows` rows: each point in the bins of the rows it reads and of its
// home row. Two passes over the blocks (count, then place), so each bin lists its points in order
// whatever the thread count.
template <class T, class Table>
RowBins<AccType<T>> make_bins(const Context<T>& ctx, int64_t n, int32_t rows, bool with_grad) {
  RowBins<AccType<T>> bins;
  bins.rows = rows;
  bins.count = (ctx.H + rows - 1) / rows;
  const PlaneGeometry g = plane_geometry(ctx);
  std::vector<int64_t> at(static_cast<size_t>(ctx.blocks * bins.count), 0);  // per (block, bin)
  auto for_point_bins = [&](auto&& fn) {
    parallel_for(0, ctx.blocks, grain_for(kBlock * 20), [&](int64_t lo, int64_t hi) {
      const std::unique_ptr<Table> table(new Table);  // not zero-filled: build() writes what is read
      AccType<T> gx[kBlock], gy[kBlock];
      for (int64_t b = lo; b < hi; ++b) {
        ctx.grid_block(n, b, gx, gy);
        table->build(ctx, gx, gy, ctx.block_end(b) - b * kBlock, g, with_grad);
        for (int64_t i = 0; i < table->count; ++i) {
          int32_t first, last;
          table->rows(i, g, first, last);
          for (int64_t k = first / rows; k <= last / rows; ++k) fn(b, k, i, gx[i], gy[i]);
        }
      }
    });
  };
  for_point_bins([&](int64_t b, int64_t k, int64_t, AccType<T>, AccType<T>) { ++at[static_cast<size_t>(b * bins.count + k)]; });
  bins.start.assign(static_cast<size_t>(bins.count + 1), 0);
  int64_t total = 0;
  for (int64_t k = 0; k < bins.count; ++k) {
    bins.start[static_cast<size_t>(k)] = total;
    for (int64_t b = 0; b < ctx.blocks; ++b) {  // count -> where block b's points of bin k start
      int64_t& slot = at[static_cast<size_t>(b * bins.count + k)];
      const int64_t count = slot;
      slot = total;
      total += count;
    }
  }
  bins.start[static_cast<size_t>(bins.count)] = total;
  bins.points.resize(static_cast<size_t>(total));
  bins.gx.resize(static_cast<size_t>(total));
  bins.gy.resize(static_cast<size_t>(total));
  for_point_bins([&](int64_t b, int64_t k, int64_t i, AccType<T> x, AccType<T> y) {
    const auto slot = static_cast<size_t>(at[static_cast<size_t>(b * bins.count + k)]++);
    bins.points[slot] = static_cast<int32_t>(b * kBlock + i);
    bins.gx[slot] = x;
    bins.gy[slot] = y;
  });
  return bins;
}

// A task's table (not zero-filled: build() writes what is read): the one its thread kept from an earlier
// task when there is one, else a new one, kept by the thread when the task ends (one per table type and
// thread: 8-61 KiB each, at most 170 KiB for all six). A new table per task cost a small call its malloc and
// a consolidation of the allocator's free lists: (1,2,8,8) bilinear, 2 threads, core call, forward 0.84 ->
// 0.68 us, backward 1.20 -> 1.06 us.
template <class Table>
class TableLease {
 public:
  TableLease() : table_(kept().release()) {
    if (!table_) table_.reset(new Table);
  }
  ~TableLease() {
    if (!kept()) kept() = std::move(table_);
  }
  TableLease(const TableLease&) = delete;
  TableLease& operator=(const TableLease&) = delete;
  Table& operator*() const { return *table_; }
  Table* operator->() const { return table_.get(); }

 private:
  static std::unique_ptr<Table>& kept() {
    thread_local std::unique_ptr<Table> table;
    return table;
  }
  std::unique_ptr<Table> table_;
};

// Forward: tasks are (batch, block); a task builds the table of its points and sweeps it over every
// channel. (Bins of rows, as in the backward, did not pay in the forward: on a random 1024^2 grid over
// (2,3,1024,1024), 2 threads, 49 ms binned against 30 ms in block order, PyTorch 46 ms; the gathers hit
// the L3 cache, and listing the points cost more than the misses it saved.)
// The plane strategy's forward of float and double planes read by gathers: tasks are (batch, block), each
// block's points swept as point vectors over every channel (grid_sampler_2d_vectors.h), no table stored.
template <class T, class Table>
void forward_point_vectors(const Context<T>& ctx, const View4<T>& out, const PlaneGeometry& g) {
  const int64_t work = kBlock * (ctx.C * Table::kCost + 10);
  const bool dense = ctx.point_s3 == 1 && ctx.point_s2 == ctx.Wo;  // a block's outputs are one run
  parallel_for(0, ctx.N * ctx.blocks, grain_for(work), [&](int64_t lo, int64_t hi) {
    int64_t offsets[kBlock];
    T gx[kBlock], gy[kBlock], cx[kBlock], cy[kBlock];
    for (int64_t task = lo, run = 1; task < hi; task += run) {
      const int64_t n = task / ctx.blocks, b = task % ctx.blocks;
      int64_t count;
      const PointCoordinates<T> at = block_coordinates<Table>(ctx, n, b, gx, gy, cx, cy, count);
      // Where the grid's pairs and the outputs are each one run, the task's following blocks of the batch go
      // in the same call: the points are the same vectors, less the per-block setup.
      run = dense && at.pairs != nullptr ? std::min(hi - task, ctx.blocks - b) : 1;
      count = ctx.block_end(b + run - 1) - b * kBlock;
      offsets[0] = b * kBlock;
      const bool straight = dense || point_offsets(ctx, block_group(ctx, b), offsets);
      const PointInputs<T> in{ctx.input.plane(n, 0), ctx.input.s1, ctx.C};
      const PointOutputs<T> to{out.plane(n, 0), out.s1, offsets, straight};
      forward_vectors<Table>(ctx, at, count, g, in, to);
    }
  });
}

template <class T, class Table>
void forward_planes(const Context<T>& ctx, const View4<T>& out) {
  const PlaneGeometry g = plane_geometry(ctx);
  if constexpr (kGathers<T>) {
    if (g.gathers) return forward_point_vectors<T, Table>(ctx, out, g);
  }
  const int64_t work = kBlock * (ctx.C * Table::kCost + 10);
  parallel_for(0, ctx.N * ctx.blocks, grain_for(work), [&](int64_t lo, int64_t hi) {
    const TableLease<Table> table;
    int64_t offsets[kBlock];
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t n = task / ctx.blocks;
      const PointGroup<AccType<T>> group = block_group(ctx, task % ctx.blocks);
      build_table(*table, ctx, n, group, g, false);
      const bool straight = point_offsets(ctx, group, offsets);
      for (int64_t c = 0; c < ctx.C; ++c) table->forward(ctx.input.plane(n, c), g, out.plane(n, c), offsets, straight);
    }
  });
}

// Backward: tasks are (batch, band of rows). A task zeroes its band of the input gradient, then visits
// every block of the batch in order: it builds the table, scatters the taps that fall in its band and
// sums the grid gradient of the points whose home row is in its band (planes.h). Bands are only for
// parallelism (one band per batch when the batches keep every thread busy) and, for float16/bfloat16,
// to bound the float buffer in which a band's gradient is summed before it is rounded once.
template <class T, class Table>
struct PlaneBackward {
  using Acc = AccType<T>;
  static constexpr bool kStaged = !std::is_same_v<T, Acc>;
  static constexpr int64_t kStagedBandBytes = int64_t{8} << 20;  // per task
  const Context<T>& ctx;
  const View4<const T>& go;
  const View4<T>* grad_input;  // null: not wanted
  const View4<T>* grad_grid;   // null: not wanted
  bool with_grad;              // grid gradient wanted and not identically zero
  PlaneGeometry g;

  // The grid-gradient sums are kept per lane as in the tiles (channel c adds to lane c % kLanes, the
  // lanes are summed in lane order at the end), so that both strategies give the same bits.
  static constexpr int64_t kLanes = kTileLanes<Acc>;
  struct Scratch {
    TableLease<Table> table;
    std::vector<Acc> staged;  // the band's input gradient (kStaged)
    int64_t offsets[kBlock];
    bool owned[kBlock];
    Acc sx[kLanes][kBlock], sy[kLanes][kBlock];
  };

  // The lanes that receive a channel. The tiles add the others too, but those hold +0 (lanes start at +0
  // and never become -0), and x + 0 == x for every other x.
  int64_t used_lanes() const { return std::min(kLanes, ctx.C); }

  int64_t band_count(int64_t threads) const {
    // A band per batch once the batches give every thread one: every further band builds its batch's
    // tables again ((2,3,1024,1024), a flow grid, 2 threads: 2 bands a batch ran 0.69x PyTorch).
    int64_t bands = (threads + ctx.N - 1) / ctx.N;
    // Every band builds the batch's tables again: no more bands than the work fills (a 7x7 call had 4).
    const int64_t work = ctx.points * (ctx.C * Table::kCost + 10) + ctx.C * ctx.H * ctx.W;
    bands = std::min(bands, std::max<int64_t>(1, work / kMinWorkPerTask));
    if (kStaged && grad_input != nullptr) {
      const int64_t bytes = ctx.C * ctx.H * ctx.W * static_cast<int64_t>(sizeof(Acc));
      bands = std::max(bands, (bytes + kStagedBandBytes - 1) / kStagedBandBytes);
    }
    return std::clamp<int64_t>(bands, 1, ctx.H);
  }

  void run(int64_t threads) const {
    if (grad_input == nullptr && !with_grad) return;
    const int64_t planes = grad_input != nullptr ? 2 : 1;
    const int64_t bytes_per_row = planes * ctx.C * ctx.W * static_cast<int64_t>(sizeof(T));
    const int32_t rows = kStaged ? 0 : bin_rows<T, Table>(ctx, bytes_per_row, grad_input != nullptr, threads);
    if (rows > 0) return run_bins(rows);
    const int64_t bands = band_count(threads);
    const int64_t work = ctx.points * (ctx.C * Table::kCost + 10) + ctx.C * ctx.H * ctx.W / bands;
    parallel_for(0, ctx.N * bands, grain_for(work), [&](int64_t lo, int64_t hi) {
      Scratch scratch;
      for (int64_t task = lo; task < hi; ++task) {
        const int64_t n = task / bands, k = task % bands;
        const auto begin = static_cast<int32_t>(k * ctx.H / bands), end = static_cast<int32_t>((k + 1) * ctx.H / bands);
        auto blocks = [&](auto&& fn) {
          for (int64_t b = 0; b < ctx.blocks; ++b) fn(block_group(ctx, b));
        };
        if (bands == 1) {
          run_band<false>(n, begin, end, blocks, scratch);
        } else {
          run_band<true>(n, begin, end, blocks, scratch);
        }
      }
    });
  }

  // Large planes: per batch, its points listed by bins of rows (make_bins), then a task per bin.
  void run_bins(int32_t rows) const {
    for (int64_t n = 0; n < ctx.N; ++n) {
      const RowBins<Acc> bins = make_bins<T, Table>(ctx, n, rows, with_grad);
      parallel_for(0, bins.count, 1, [&](int64_t lo, int64_t hi) {
        Scratch scratch;
        for (int64_t k = lo; k < hi; ++k) {
          const auto begin = static_cast<int32_t>(k * rows);
          const auto end = static_cast<int32_t>(std::min<int64_t>(ctx.H, (k + 1) * int64_t{rows}));
          auto groups = [&](auto&& fn) {
            for (int64_t first = 0; first < bins.size(k); first += kBlock) fn(bins.group(k, first));
          };
          run_band<true>(n, begin, end, groups, scratch);
        }
      });
    }
  }

  // Where channel c's gradient of rows [begin, end) of batch n goes (zeroed here).
  GradTarget<Acc> target(int64_t n, int64_t c, int32_t begin, int32_t end, Scratch& scratch) const {
    if constexpr (kStaged) {
      const int64_t band = int64_t{end - begin} * ctx.W;
      Acc* base = scratch.staged.data() + c * band;
      std::fill(base, base + band, Acc(0));
      return {base, ctx.W, 1, begin, begin, end};
    } else {
      T* plane = grad_input->plane(n, c);
      for (int64_t y = begin; y < end; ++y) {
        T* row = plane + y * grad_input->s2;
        if (grad_input->s3 == 1) {
          std::fill(row, row + ctx.W, T(0));
        } else {
          for (int64_t x = 0; x < ctx.W; ++x) row[x * grad_input->s3] = T(0);
        }
      }
      return {plane, grad_input->s2, grad_input->s3, 0, begin, end};
    }
  }

  // Rows [begin, end) of batch n: zeroes them, then for each group of points that for_groups gives (in
  // point order) builds the table and sweeps the channels.
  template <bool kBanded, class ForGroups>
  void run_band(int64_t n, int32_t begin, int32_t end, ForGroups&& for_groups, Scratch& scratch) const {
    std::vector<GradTarget<Acc>> targets;
    if (grad_input != nullptr) {
      if (kStaged) scratch.staged.resize(static_cast<size_t>(ctx.C * (end - begin) * ctx.W));
      for (int64_t c = 0; c < ctx.C; ++c) targets.push_back(target(n, c, begin, end, scratch));
    }
    for_groups([&](const PointGroup<Acc>& group) {
      if constexpr (!kBanded) {
        if (fused()) return fused_group(n, group, targets, scratch);
      }
      Table& table = *scratch.table;
      build_table(table, ctx, n, group, g, with_grad);
      point_offsets(ctx, group, scratch.offsets);
      for (int64_t i = 0; i < table.count; ++i) scratch.owned[i] = table.home[i] >= begin && table.home[i] < end;
      if (with_grad) {
        for (int64_t l = 0; l < used_lanes(); ++l) {
          std::fill(scratch.sx[l], scratch.sx[l] + table.count, Acc(0));
          std::fill(scratch.sy[l], scratch.sy[l] + table.count, Acc(0));
        }
      }
      sweep_channels<kBanded>(n, targets, scratch);
      if (with_grad) write_owned_grid_grad(n, group, scratch);
    });
    if constexpr (kStaged) {
      if (grad_input != nullptr) store_staged(n, begin, end, scratch);
    }
  }

  // Bilinear, zeros padding, one or two float channels read by gathers: without bands, a group's points go
  // through the fused point vectors (grid_sampler_2d_vectors.h bilinear_vectors_backward), no table.
  bool fused() const {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Table, PlaneBilinear<float>>) {
      return g.gathers && ctx.padding == GridSamplerPadding::kZeros && ctx.C <= kFusedBackwardChannels;
    }
    return false;
  }

  void fused_group(int64_t n, const PointGroup<Acc>& group, const std::vector<GradTarget<Acc>>& targets,
                   Scratch& s) const {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Table, PlaneBilinear<float>>) {
      T gx[kBlock], gy[kBlock], cx[kBlock], cy[kBlock];
      int64_t count;
      const PointCoordinates<T> at = block_coordinates<Table>(ctx, n, group.first / kBlock, gx, gy, cx, cy, count);
      const bool straight = point_offsets(ctx, group, s.offsets);
      const GradTarget<Acc>* to = targets.empty() ? nullptr : targets.data();
      const FusedBackwardIo io{go.plane(n, 0), go.s1, s.offsets, straight, to, with_grad, at.scale_x, at.scale_y,
                               s.sx[0], s.sy[0]};
      const PointInputs<T> in{ctx.input.plane(n, 0), ctx.input.s1, ctx.C};
      SG_SIMD_DISPATCH(bilinear_vectors_backward(isa, at, count, g, in, io));
      if (with_grad) {
        std::fill(s.owned, s.owned + count, true);
        store_grid_grad(n, group, s.owned, s.sx[0], s.sy[0]);
      }
    }
  }

  template <bool kBanded>
  void sweep_channels(int64_t n, const std::vector<GradTarget<Acc>>& targets, Scratch& s) const {
    const Table& t = *s.table;
    const bool scatter = grad_input != nullptr;
    for (int64_t c = 0; c < ctx.C; ++c) {
      const T* plane = ctx.input.plane(n, c);
      const T* gop = go.plane(n, c);
      const GradTarget<Acc> target = scatter ? targets[static_cast<size_t>(c)] : GradTarget<Acc>{};
      Acc* sx = s.sx[c % kLanes];
      Acc* sy = s.sy[c % kLanes];
      if constexpr (std::is_same_v<Table, PlaneBicubic<Acc>> && kGathers<T>) {
        if (with_grad && g.gathers) {  // the grid terms as point vectors, then the scalar scatter
          SG_SIMD_DISPATCH(bicubic_vectors_grid_terms<kBanded>(isa, t, plane, g, gop, s.offsets, s.owned, sx, sy));
          if (scatter) t.template backward<kBanded, true, false>(plane, g, gop, s.offsets, target, s.owned, sx, sy);
          continue;
        }
      }
      if constexpr (Table::kHasGridGrad) {
        if (scatter && with_grad) {
          t.template backward<kBanded, true, true>(plane, g, gop, s.offsets, target, s.owned, sx, sy);
          continue;
        }
        if (with_grad) {
          t.template backward<kBanded, false, true>(plane, g, gop, s.offsets, target, s.owned, sx, sy);
          continue;
        }
      }
      if (scatter) t.template backward<kBanded, true, false>(plane, g, gop, s.offsets, target, s.owned, sx, sy);
    }
  }

  void write_owned_grid_grad(int64_t n, const PointGroup<Acc>& group, const Scratch& s) const {
    const Table& t = *s.table;
    Acc x[kBlock], y[kBlock];
    sum_lanes(s.sx, used_lanes(), t.mult[0], t.count, x);
    sum_lanes(s.sy, used_lanes(), t.mult[1], t.count, y);
    store_grid_grad(n, group, s.owned, x, y);
  }

  // The grid gradient x, y of a group's points, where `owned`.
  void store_grid_grad(int64_t n, const PointGroup<Acc>& group, const bool* owned, const Acc* x, const Acc* y) const {
    const View4<T>& gg = *grad_grid;
    const int64_t count = group.count;
    const bool dense = ctx.dense_pairs(gg);  // (x, y) pairs in point order
    T* batch = gg.data + n * gg.s0;
    if (dense && group.list == nullptr && std::find(owned, owned + count, false) == owned + count) {
      return detail::store_pairs(x, y, count, batch + 2 * group.first);  // one run of pairs
    }
    for (int64_t i = 0; i < count; ++i) {
      if (!owned[i]) continue;
      const int64_t p = group.point(i);
      T* out = batch + (dense ? 2 * p : p / ctx.Wo * gg.s1 + p % ctx.Wo * gg.s2);
      out[0] = store_as<T>(x[i]);
      out[gg.s3] = store_as<T>(y[i]);
    }
  }

  // The band's float sums, rounded once into the float16/bfloat16 input gradient.
  void store_staged(int64_t n, int32_t begin, int32_t end, const Scratch& s) const {
    const int64_t band = int64_t{end - begin} * ctx.W;
    for (int64_t c = 0; c < ctx.C; ++c) {
      for (int64_t y = begin; y < end; ++y) {
        const Acc* row = s.staged.data() + c * band + (y - begin) * ctx.W;
        detail::store_row(row, ctx.W, grad_input->plane(n, c) + y * grad_input->s2, grad_input->s3);
      }
    }
  }
};

// The two strategies' tables of one interpolation mode.
template <class TileTable, class PlaneTable>
struct Tables {
  using Tile = TileTable;
  using Plane = PlaneTable;
};

// Calls fn(Tables<...>{}) with the table types of the interpolation mode.
template <class T, class Fn>
void dispatch_tables(GridSamplerInterpolation interpolation, Fn&& fn) {
  using Acc = AccType<T>;
  switch (interpolation) {
    case GridSamplerInterpolation::kBilinear:
      return fn(Tables<BilinearTable<Acc>, PlaneBilinear<Acc>>{});
    case GridSamplerInterpolation::kNearest:
      return fn(Tables<NearestTable<Acc>, PlaneNearest<Acc>>{});
    case GridSamplerInterpolation::kBicubic:
      break;
  }
  return fn(Tables<BicubicTable<Acc>, PlaneBicubic<Acc>>{});
}

// The strategy of a call (docs/design.md, "grid_sampler_2d: tiles or planes"). Both give the same bits,
// so the choice may follow the thread count. Tiles pay when a tile's lanes are shared by channels and a
// packed plane is swept by at least as many points as it has pixels (runs, above); they are refused when
// their scratch would pass the call's bound, max(64 MiB, 25% of inputs + outputs) (docs/operators.md).
// The plane strategy gathers in place: its cost and scratch follow the points, whatever the plane.
// The fewest channels that take the tiles: one fills one lane of 8, and the planes won (measured). Bilinear
// tiles, and nearest ones forward, need half their lanes filled: with 2-3 float channels the planes won
// (2 threads, core call, planes vs tiles: bilinear (1,2,8,8) backward 1.2 vs 3.2 us, forward 0.84 vs 1.1 us;
// (1,2,16,16) 3.7 vs 7.8 / 1.6 vs 2.6 us; (16,3,32,32) 0.15 vs 0.19 / 0.06 vs 0.14 ms; (4,3,64,64) 0.17 vs
// 0.76 / 0.07 vs 0.13 ms; nearest forward (1,2,8,8) 0.22 vs 0.94 us, (16,3,32,32) 18 vs 52 us), while at 4
// channels each won one direction. Bicubic's 16 taps per point still pay on 2-3 channels ((16,3,32,32):
// 0.61 vs 0.37 ms forward, 1.18 vs 0.69 ms backward); the nearest backward is left as it was (64 vs 53 us in
// one run, 45 vs 53 us in another).
// With the planes' point vectors (the forward of float and double planes, issue 44), nearest and bicubic
// tiles pay only once the channels fill them (1 and 2 threads, core call, point vectors vs tiles, ms: bicubic
// (64,3,32,32) 1.21 vs 2.51, (16,4,32,32) 0.38 vs 0.60, (8,8,64,64) 1.49 vs 1.23; nearest (16,4,32,32) 0.044
// vs 0.061, (8,8,64,64) 0.19 vs 0.15); bilinear's crossover stays at half a tile ((16,4,32,32) 0.095 vs 0.087).
template <class Acc, class Table>
int64_t tile_min_channels(bool backward, bool point_vectors) {
  constexpr int64_t kHalfTile = std::max<int64_t>(2, kTileLanes<Acc> / 2);
  if constexpr (std::is_same_v<Table, BilinearTable<Acc>>) return kHalfTile;
  if (!backward && point_vectors) return kTileLanes<Acc>;
  if constexpr (std::is_same_v<Table, NearestTable<Acc>>) return backward ? 2 : kHalfTile;
  return 2;
}
constexpr int64_t kTileMaxPixelsPerPoint = 4;  // tile pixels / points per batch, at most (measured)
// A tile within kTileCachedBytes stays in L2. In the backward it then pays up to 16 pixels per point (the
// planes' scatter costs more there): (2,256,128,128) with a 2048 x 1 grid, 8 pixels per point, backward:
// tiles 15 ms, planes 40 ms (forward: 21 vs 12 ms). A tile whose lanes are partly empty (fewer channels
// than lanes) is larger than the planes it holds: past kTileCachedBytes its random taps miss more than
// the planes' do, and the planes won ((8,3,256,256), a 2 MB tile: forward 17 vs 23 ms, backward 67 vs
// 136 ms, 2 threads; (64,3,32,32), a 35 KB tile: equal).
constexpr int64_t kTileMaxPixelsPerPointCached = 16;
constexpr int64_t kTileCachedBytes = int64_t{1} << 20;


// Scratch of the tile strategy: per thread, the input tile (and input-gradient tile) and the tables of a
// run (of a whole batch, with its grid sums, in the fused backward); the two-pass backward keeps every
// table of the call.
// Nearest has no grid gradient: its backward keeps no grid sums and no input tile, and always takes the two
// passes (counting them made (2,8,600,600) take the planes at 2 threads, 17 ms against 8 ms as tiles at 1).
template <class T, class Table>
int64_t tile_scratch_bytes(const Context<T>& ctx, bool backward, int64_t threads) {
  using Acc = AccType<T>;
  const int64_t tile = ctx.tile_pixels * kTileLanes<Acc> * static_cast<int64_t>(sizeof(Acc));
  const int64_t table = sizeof(Table), sums = 2 * kBlock * kTileLanes<Acc> * static_cast<int64_t>(sizeof(Acc));
  if (!backward) return threads * (tile + make_runs(ctx, threads).blocks_per_run * table);
  if (!Table::kHasGridGrad) return ctx.N * ctx.blocks * table + threads * tile;
  if (ctx.N >= 2 * threads) return threads * (2 * tile + ctx.blocks * (table + sums));
  return ctx.N * ctx.blocks * table + threads * (2 * tile + make_runs(ctx, threads).blocks_per_run * sums);
}

// The cost model of the tiles (the plane strategy takes every other call).
template <class T, class Table>
bool tiles_pay(const Context<T>& ctx, bool backward, int64_t in_out_bytes) {
  const bool point_vectors = kGathers<T> && plane_geometry(ctx).gathers;
  if (ctx.C < tile_min_channels<AccType<T>, Table>(backward, point_vectors)) return false;
  const int64_t tile_bytes = ctx.tile_pixels * kTileBytes;
  const bool cached = tile_bytes <= kTileCachedBytes;
  const int64_t pixels_per_point = backward && cached ? kTileMaxPixelsPerPointCached : kTileMaxPixelsPerPoint;
  if (ctx.tile_pixels > pixels_per_point * ctx.points) return false;
  if (ctx.C < kTileLanes<AccType<T>> && !cached) return false;
  return tile_scratch_bytes<T, Table>(ctx, backward, get_num_threads()) <= detail::scratch_bound(in_out_bytes);
}

// A pinned strategy takes any call but tiles of more than INT32_MAX pixels (their pixel numbers are int32).
template <class T, class Table>
bool use_tiles(const Context<T>& ctx, bool backward, int64_t in_out_bytes) {
  using detail::GridSampler2dStrategy;
  const bool tiles_fit = ctx.tile_pixels <= INT32_MAX;
  return detail::choose_strategy<GridSampler2dStrategy>(
             [&](GridSampler2dStrategy pinned) { return pinned == GridSampler2dStrategy::kPlanes || tiles_fit; },
             [&] {
               return tiles_fit && tiles_pay<T, Table>(ctx, backward, in_out_bytes) ? GridSampler2dStrategy::kTiles
                                                                                    : GridSampler2dStrategy::kPlanes;
             }) == GridSampler2dStrategy::kTiles;
}

template <class T>
void run_forward(const TensorView& input, const TensorView& grid, const TensorView& output,
                 const GridSampler2dParams& params) {
  const Context<T> ctx = make_context<T>(input, grid, output, params);
  const View4<T> out = view4<T>(output);
  dispatch_tables<T>(params.interpolation_mode, [&](auto tables) {
    using Tables = decltype(tables);
    const int64_t in_out = detail::bytes_of({&input, &grid, &output});
    if (use_tiles<T, typename Tables::Tile>(ctx, false, in_out)) return forward_kernel<T, typename Tables::Tile>(ctx, out);
    forward_planes<T, typename Tables::Plane>(ctx, out);
  });
}

// grad_input / grad_grid: null when not wanted. float16/bfloat16 run here too: tiles and the plane
// strategy's band buffers are float32 (rounded once as they are written; rows.h).
template <class T>
void run_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                  const TensorView* grad_input, const TensorView* grad_grid, const GridSampler2dParams& params) {
  const Context<T> ctx = make_context<T>(input, grid, grad_output, params);
  const bool want_input = grad_input != nullptr && !grad_input->is_empty();
  const View4<T> gi = want_input ? view4<T>(*grad_input) : View4<T>{};
  const View4<T> gg = grad_grid ? view4<T>(*grad_grid) : View4<T>{};
  const View4<const T> go = view4<const T>(grad_output);
  dispatch_tables<T>(params.interpolation_mode, [&](auto tables) {
    using Tile = typename decltype(tables)::Tile;
    using Plane = typename decltype(tables)::Plane;
    const int64_t in_out = detail::bytes_of({&grad_output, &input, &grid, grad_input, grad_grid});
    if (use_tiles<T, Tile>(ctx, true, in_out)) {
      return backward_kernel<T, Tile>(ctx, go, want_input ? &gi : nullptr, grad_grid ? &gg : nullptr);
    }
    if (grad_grid != nullptr && !Plane::kHasGridGrad) write_zero_grid_grad<T>(ctx, gg);
    const bool with_grad = grad_grid != nullptr && Plane::kHasGridGrad;
    PlaneBackward<T, Plane>{ctx, go, want_input ? &gi : nullptr, with_grad ? &gg : nullptr, with_grad,
                            plane_geometry(ctx)}
        .run(get_num_threads());
  });
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
  detail::check_grid_sampler_plane(kForward, input.sizes());
  detail::check_same_dtype(kForward, "grid", grid, "input", input);
  detail::check_shape(kForward, "output", output, expected);
  detail::check_same_dtype(kForward, "output", output, "input", input);
  // Half precision converted as the kernels pack and unpack their tiles and planes (no staging).
  detail::run_entry(kForward, "input", input.dtype(), [&](auto tag, auto&) {
    if (output.is_empty()) return;
    run_forward<typename decltype(tag)::type>(input, grid, output, params);
  });
}

void check_grid_sampler_2d_backward(const TensorView& grad_output, const TensorView& input, const TensorView& grid,
                                    const TensorView& grad_input, const TensorView& grad_grid,
                                    const GridSampler2dParams& params, const std::vector<bool>& output_mask) {
  detail::check_grid_sampler_modes(kBackward, params);
  SG_CHECK(output_mask.size() == 2, kBackward,
           "(): expected output_mask to have 2 entries (grad_input, grad_grid), but got ", output_mask.size());
  const std::vector<int64_t> expected = detail::grid_sampler_output_shape(kBackward, input.sizes(), grid.sizes());
  detail::check_grid_sampler_plane(kBackward, input.sizes());
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
  detail::check_floating(kBackward, "grad_output", grad_output.dtype());
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
  detail::run_entry(kBackward, "grad_output", grad_output.dtype(), [&](auto tag, auto&) {
    run_backward<typename decltype(tag)::type>(grad_output, input, grid, wanted_input, wanted_grid, params);
  });
}

}  // namespace spatialgrad
