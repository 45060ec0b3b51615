// Loads a TorchScript model saved by export.py and runs it without Python. The spatialgrad operators the
// model calls (torch.ops.spatialgrad.*) are registered when libspatialgrad_torch loads, which linking it
// does. Prints the output in export.py's format ("shape: d0 d1 ..." then one value per line, %.9g), so the two
// programs' outputs can be compared line by line.
//
//   deploy model.pt inputs.pt

#include <torch/script.h>

#include <cstdio>
#include <exception>
#include <vector>

namespace {

void print_tensor(const at::Tensor& output) {
  std::printf("shape:");
  for (const int64_t size : output.sizes()) {
    std::printf(" %lld", static_cast<long long>(size));
  }
  std::printf("\n");
  const at::Tensor values = output.to(at::kDouble).contiguous().flatten();
  const double* data = values.data_ptr<double>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    std::printf("%.9g\n", data[i]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s model.pt inputs.pt (both written by export.py)\n", argv[0]);
    return 2;
  }
  try {
    torch::jit::Module model = torch::jit::load(argv[1]);
    model.eval();
    // export.py saves the example inputs as attributes of a scripted module.
    torch::jit::Module inputs = torch::jit::load(argv[2]);
    const std::vector<torch::jit::IValue> arguments{inputs.attr("images"), inputs.attr("boxes")};
    torch::NoGradGuard no_grad;
    print_tensor(model.forward(arguments).toTensor());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "deploy: %s\n", error.what());
    return 1;
  }
  return 0;
}
