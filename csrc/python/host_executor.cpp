// NumPy calls on a host framework's thread pool: spatialgrad.torch hands _core PyTorch's intra-op pool, so that
// in a process that runs PyTorch our NumPy calls use the threads PyTorch's own calls use, instead of waking
// our pool's threads beside PyTorch's OpenMP threads, which spin for a while after each of its calls (libgomp's
// default without OMP_WAIT_POLICY) and took the second core from our worker (issue 32).
#include <sys/types.h>
#include <unistd.h>

#include "numpy_view.h"
#include "spatialgrad/parallel.h"

namespace spatialgrad::python {

namespace {

// The host's executor in the process that installed it; spatialgrad's own pool in a forked child, where the
// host's threads do not exist (libgomp's pool hangs a child that enters a parallel region).
class HostExecutor final : public Executor {
 public:
  HostExecutor(Executor& host, Executor& own) : host_(host), own_(own), owner_(getpid()) {}
  void run(int tasks, const Job& job) noexcept override { (getpid() == owner_ ? host_ : own_).run(tasks, job); }
  bool runs_on(const Executor& host) const { return &host == &host_; }

 private:
  Executor& host_;
  Executor& own_;
  const pid_t owner_;
};

constexpr const char* kCapsuleName = "spatialgrad.Executor";

void use_host_executor(const py::object& argument) {
  static HostExecutor* installed = nullptr;  // never freed: a call may still run on it while the process exits
  if (argument.is_none()) {
    set_executor(nullptr);
    return;
  }
  const auto capsule = py::reinterpret_borrow<py::capsule>(argument);
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName)) {
    throw py::type_error("_use_host_executor(): expected a capsule named 'spatialgrad.Executor' or None");
  }
  auto* host = static_cast<Executor*>(capsule.get_pointer());
  if (installed == nullptr) {
    set_executor(nullptr);  // get_executor() is then spatialgrad's pool
    installed = new HostExecutor(*host, get_executor());
  } else if (!installed->runs_on(*host)) {
    throw py::value_error("_use_host_executor(): another host executor is installed already (one per process)");
  }
  set_executor(installed);
}

}  // namespace

void bind_host_executor(py::module_& m) {
  m.def("_use_host_executor", &use_host_executor, py::arg("capsule"),
        "Runs later NumPy calls' tasks on a host framework's pool (a capsule named 'spatialgrad.Executor' holding "
        "a spatialgrad::Executor* that lives as long as the process), or on spatialgrad's pool again with None. "
        "Internal: spatialgrad.torch installs PyTorch's pool.");
}

}  // namespace spatialgrad::python
