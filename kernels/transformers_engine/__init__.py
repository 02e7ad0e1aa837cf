"""Hugging Face transformers' own MoE experts and quantizers as moecert backends (issue 36).

    folder.py   a synthesized case's checkpoint written as the model folder its producer
                writes (config.json with the producer's quantization_config, per-expert
                tensors under the file's names), for transformers' from_pretrained to read
    backend.py  the backends `transformers` (eager experts), `transformers-grouped_mm`,
                `transformers-batched_mm`: transformers' loader, quantizer and experts
                implementation run the case; nothing of transformers is re-implemented
"""
