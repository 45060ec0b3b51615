// Threads and executors: how many threads spatialgrad's kernels use, and what runs their tasks
// (parallel.cpp; the kernels' side, parallel_for and parallel_chunks, is csrc/src/detail/parallel_for.h).
//
// Kernels split their work into tasks that take chunks from one shared queue, so results never depend
// on the thread count, on which thread took which chunk, or on the executor that ran the tasks. What runs
// the tasks is an Executor (below): spatialgrad's own pool unless the caller sets another, e.g. a host
// framework's pool. Our pool is fair to a busy machine: a worker claims its place in a call when it wakes,
// and the caller, once it has taken the last chunk, withdraws the places no worker has claimed and waits
// only for the workers that did (a worker the scheduler has not run yet holds nothing up). Waiting threads
// sleep in the kernel (futex) rather than spin, so they take no time slices from the other threads of a
// training process (PyTorch's, a DataLoader's).
//
// Why our own pool rather than OpenMP: libgomp's threads do not survive fork(), and a forked child
// (a DataLoader worker, a multiprocessing Pool) that entered a parallel region hung for ever. Our pool
// is dropped in the child by a pthread_atfork handler and built again on first use. When another
// application thread is using the pool, a call runs on its own thread instead of waiting.
#pragma once

namespace spatialgrad {

// Threads used by later kernel calls (process-wide). n <= 0 restores the default: the count set by
// set_default_num_threads, else SPATIALGRAD_NUM_THREADS, else OMP_NUM_THREADS, else the cores this
// process may run on.
void set_num_threads(int n);
int get_num_threads();
// The count used while set_num_threads has not set one (e.g. an adapter following its framework's
// setting inside a data-loading worker); n <= 0 restores the environment/machine default.
void set_default_num_threads(int n);

// The tasks of one parallel call: job(i) for a task index i in [0, tasks). Every task takes chunks from
// one shared queue until it is empty, so any one task completes the call and a task started after the
// queue ran dry returns at once. A task never throws.
class Job {
 public:
  Job(void (*task)(void* context, int index) noexcept, void* context) : task_(task), context_(context) {}
  void operator()(int index) const noexcept { task_(context_, index); }

 private:
  void (*task_)(void*, int) noexcept;
  void* context_;
};

// What runs a parallel call's tasks. run(tasks, job) calls job(i) for i in [0, tasks), each at most once
// and at least one of them, on any threads (the calling one included), and returns when every call it
// started has returned; it must not throw (a pool that cannot start threads runs the tasks itself).
// Skipping tasks is allowed because of the shared queue: spatialgrad's pool skips the places no worker
// claimed before the caller ran out of chunks. Results are bitwise the same whichever tasks run where.
class Executor {
 public:
  virtual ~Executor() = default;
  virtual void run(int tasks, const Job& job) noexcept = 0;
};

// The executor of later parallel calls (process-wide); nullptr restores spatialgrad's own pool. The
// executor must outlive every call that uses it, and be usable in a forked child if the process forks
// (our pool is). The number of tasks per call still follows set_num_threads.
void set_executor(Executor* executor);
Executor& get_executor();  // this thread's scoped one, else the one set, else spatialgrad's pool

// A thread-scoped executor: while alive, parallel calls made by the constructing thread run their tasks
// on `executor`, with up to `threads` tasks each (threads <= 0: the count set_num_threads gives),
// whatever set_executor and set_num_threads say; other threads are unaffected. A host framework sets it
// for the duration of one call into the kernels (spatialgrad's PyTorch operators run on PyTorch's pool
// this way while NumPy calls in the same process keep spatialgrad's pool). Scopes nest; destroy them in
// reverse order, on the thread that made them.
class ScopedExecutor {
 public:
  ScopedExecutor(Executor& executor, int threads) noexcept;
  ~ScopedExecutor();
  ScopedExecutor(const ScopedExecutor&) = delete;
  ScopedExecutor& operator=(const ScopedExecutor&) = delete;

 private:
  Executor* outer_executor_;
  int outer_threads_;
};

}  // namespace spatialgrad
