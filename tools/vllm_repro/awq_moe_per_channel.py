"""vLLM 0.32: an AWQ MoE layer quantized per channel (group_size -1, as GPTQModel writes
`quant_method: awq, group_size: -1`) cannot be built. AutoAWQConfig.get_quant_method hands
the experts to AutoAWQMoEMethod (its Marlin shape check accepts -1), whose create_weights
sizes the scales and zero points as `hidden_size // group_size` = -hidden_size without
normalizing -1 (the AWQ linear methods and the GPTQ MoE method do): torch.empty raises
"Trying to create tensor with negative dimension". Controls: the same AWQ layer with group_size
32 builds, and so does a GPTQ MoE layer with group_size -1. vLLM and torch only."""
from _layer import layer

AWQ = {"quant_method": "awq", "bits": 4, "zero_point": True, "version": "gemm"}
GPTQ = {"quant_method": "gptq", "bits": 4, "desc_act": False, "sym": True}


def build(name, config):
    try:
        r = layer(config, {})  # built and allocated; no tensor loaded
    except RuntimeError as e:
        tb = e.__traceback__  # the quant method vLLM chose: `self` of create_weights
        while tb.tb_next and tb.tb_frame.f_code.co_name != "create_weights":
            tb = tb.tb_next
        qm = tb.tb_frame.f_locals.get("self")
        print(f"{name}: quant method {type(qm).__name__}, experts class the oracle chose "
              f"{getattr(qm.experts_cls, '__name__', None)}; {tb.tb_frame.f_code.co_name} "
              f"raised RuntimeError: {e}")
        return
    re_ = r.routed_experts
    print(f"{name}: quant method {type(re_.quant_method).__name__} built; scales "
          + ", ".join(f"{n} {list(p.shape)}" for n, p in re_.named_parameters()
                      if n.endswith("scales")))


build("awq group_size -1", {**AWQ, "group_size": -1})
build("awq group_size 32 (control)", {**AWQ, "group_size": 32})
build("gptq group_size -1 (control)", {**GPTQ, "group_size": -1})
