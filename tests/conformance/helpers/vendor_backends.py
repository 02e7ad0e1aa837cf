"""Vendor backends written as a vendor would, registered on import (`--import
vendor_backends`): one certifying a subset of the torch backend's schemes, and one that
claims every gptq-int4 case outright, whatever its shape."""

from __future__ import annotations

from moecert.kernels import DelegatingBackend, claim_subset, register_backend


def _no_bias(quant, problem, platform):
    return "bias not supported" if problem.bias else None


class ClaimsAllGptq(DelegatingBackend):
    """Everything torch claims, and every gptq-int4 case without looking at it."""

    def supports(self, scheme, problem, *, platform=None):
        if scheme.scheme == "gptq-int4":
            return None
        return super().supports(scheme, problem, platform=platform)


SUBSET = register_backend(claim_subset("torch", "vendor-subset",
                                       schemes=("gptq-int4", "bf16"),
                                       where=_no_bias))
ALL_GPTQ = register_backend(ClaimsAllGptq("torch", "vendor-gptq-all"))
