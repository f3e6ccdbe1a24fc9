// The operator schemas. TORCH_LIBRARY may appear once per namespace, so it lives
// here; CUDA implementations are registered by the other binding files.
#include <torch/library.h>

TORCH_LIBRARY(solbench_kernels, m) {
  // Fake (meta) implementations for torch.compile live in this Python module; torch
  // imports it on demand when the library is loaded on its own.
  m.set_python_module("kernels_ext._fake");

  m.def("add(Tensor a, Tensor b) -> Tensor");
  m.def("mul(Tensor a, Tensor b) -> Tensor");
  m.def("relu(Tensor x) -> Tensor");
  m.def("gelu(Tensor x, str approximate='none') -> Tensor");
  m.def("silu(Tensor x) -> Tensor");
  m.def("sigmoid(Tensor x) -> Tensor");
  m.def("swiglu(Tensor a, Tensor b) -> Tensor");
  m.def("row_sum(Tensor x) -> Tensor");
  m.def("row_max(Tensor x) -> Tensor");
  m.def("sum_all(Tensor x) -> Tensor");
  m.def("max_all(Tensor x) -> Tensor");
  m.def("softmax(Tensor x) -> Tensor");
  m.def("rmsnorm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor");
  m.def("add_rmsnorm(Tensor x, Tensor residual, Tensor weight, float eps=1e-06) -> (Tensor, Tensor)");
  m.def("layernorm(Tensor x, Tensor weight, Tensor bias, float eps=1e-05) -> Tensor");
}
