"""The runtime layer: the concrete torch module built from a spec, and what running it measures.

The builder and its work budget, the runtime counter (FlopCounterMode plus CUDA-core kinds),
self-validation (the spec vs its own module), layer hooks and timing. torch is imported lazily
(`torch_build.import_torch`), never at package import. May import every layer below it.
"""
