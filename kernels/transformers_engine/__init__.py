"""Hugging Face transformers' own MoE experts and quantizers as moecert backends (issue 36).

    folder.py     a synthesized case's checkpoint written as the model folder its producer
                  writes (config.json with the producer's quantization_config, the expert
                  tensors under the file's names: Qwen3-MoE per-expert, gpt-oss fused for
                  swigluoai), for transformers' from_pretrained to read
    one_layer.py  decoder layer L of a model folder alone: a one-layer config of L's kind and
                  the lazy safetensors slices of L's tensors, for from_pretrained(state_dict=)
    backend.py    the backends `transformers` (eager experts), `transformers-grouped_mm`,
                  `transformers-batched_mm`: transformers' loader, quantizer and experts
                  implementation run the case; nothing of transformers is re-implemented
"""
