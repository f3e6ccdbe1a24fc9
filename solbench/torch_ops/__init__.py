"""PyTorch baselines, references and input generators, one module per op family.

Specs call implementations as fn(*inputs, **kwargs) and name them `solbench.torch_ops.<family>:<fn>`.
Where torch's own signature already fits (torch.softmax, torch.add, ...) a spec names torch directly;
these modules adapt the rest. References run on inputs upcast to float64 (or the spec's reference
dtype), so they are written with plain, obviously-correct arithmetic rather than fused library calls.
Nothing here imports kernels_ext.
"""
