"""State-space mixers: `mamba` (Mamba's selective scan, Gu & Dao 2023) and `mamba2` (Mamba-2's chunked
state-space duality, Dao & Gu 2024), each counted as transformers 5 runs it without the CUDA kernels
(the torch path `validate --against hf:MambaModel / hf:Mamba2Model` measures on meta or cpu).

`common` holds what both share: the aten ops their modules run beyond the plain pointwise ones (the
runtime footprint), the causal depthwise convolution, and the inference state they keep.
"""
from costspec.ops.ssm import mamba, mamba2  # noqa: F401
