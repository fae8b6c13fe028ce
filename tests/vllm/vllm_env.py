"""Makes vLLM's own scheduler and connector code importable on Debian 12."""
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "sglang"))
sys.path.insert(0, HERE)

import sglang_env  # noqa: E402
import pydantic2_shim  # noqa: E402

STUBBED = ["transformers", "pydantic_core", "triton", "msgspec.msgpack", "msgspec.json",
           "cbor2", "blake3", "openai", "huggingface_hub", "safetensors", "tokenizers",
           "torch._inductor", "torch.distributed._functional_collectives",
           "openai_harmony", "llguidance"]

#: torch 2.x names vLLM imports at module level, on paths the suite never runs
#: (compilation, fake tensors): inert stand-ins on torch 1.13's modules.
TORCH_NAMES = {
    "torch": ["SymInt", "SymFloat", "SymBool", "Event"],
    "torch._subclasses.fake_tensor": ["unset_fake_temporarily"],
    "torch.library": ["impl_abstract"],
    # Model loading (the suite loads no model).
    "torch.nn.modules.module": ["register_module_module_registration_hook"],
    "torch.distributed.distributed_c10d": ["_get_default_timeout", "_unregister_process_group"],
}


def _infer_schema(fn, mutates_args=(), **kwargs):
    """torch 2.x's torch.library.infer_schema, to the degree vLLM's IR op
    registry reads it: one entry per parameter, "Tensor" per tensor output.
    The ops themselves are GPU kernels the suite never calls."""
    import inspect
    import typing
    sig = inspect.signature(fn)

    def name_of(tp):
        text = getattr(tp, "__name__", None) or str(tp)
        return "Tensor" if "Tensor" in text else text

    params = ", ".join(f"{name_of(p.annotation)} {n}" for n, p in sig.parameters.items())
    ret = sig.return_annotation
    if typing.get_origin(ret) is tuple:
        out = "(" + ", ".join(name_of(a) for a in typing.get_args(ret)) + ")"
    elif ret in (None, type(None), inspect.Signature.empty):
        out = "()"
    else:
        out = name_of(ret)
    return f"({params}) -> {out}"


def _typing_names():
    """typing_extensions 4.4 (Debian 12) lacks names vLLM imports."""
    import typing_extensions as te
    if not hasattr(te, "deprecated"):
        te.deprecated = lambda message, **kwargs: (lambda obj: obj)
    if not hasattr(te, "TypeIs"):
        te.TypeIs = te.TypeGuard


def _torch_functions():
    """torch 2.x functions vLLM calls on the suite's paths, by their 1.13
    equivalents."""
    import torch.distributed as dist
    if not getattr(dist.init_process_group, "_kvroom", False):
        # torch 2.x takes timeout=None for its default; 1.13 wants a timedelta.
        original = dist.init_process_group

        def init_process_group(*args, timeout=None, **kwargs):
            if timeout is None:
                from torch.distributed.constants import default_pg_timeout
                timeout = default_pg_timeout
            return original(*args, timeout=timeout, **kwargs)
        init_process_group._kvroom = True
        dist.init_process_group = init_process_group
    if not hasattr(dist, "is_backend_available"):
        dist.is_backend_available = lambda backend: (
            str(backend).lower() == "gloo" and dist.is_gloo_available())


def _torch_names():
    import torch
    import torch.library
    torch.library.infer_schema = _infer_schema
    # Custom-op tags vLLM names (its GPU ops are never dispatched here).
    for tag in ("needs_fixed_stride_order", "cudagraph_unsafe", "pt2_compliant_tag",
                "flexible_layout"):
        if not hasattr(torch._C.Tag, tag):
            setattr(torch._C.Tag, tag, torch._C.Tag.generated)
    for mod, names in TORCH_NAMES.items():
        m = importlib.import_module(mod)
        for n in names:
            if not hasattr(m, n):
                setattr(m, n, sglang_env._InertMeta(n, (sglang_env._Inert,), {}))


#: Versions vLLM reads through importlib.metadata of packages stubbed here.
DIST_VERSIONS = {"transformers": "5.0.0"}


def _dist_info():
    """A folder of dist-info records for the stubbed packages vLLM asks the
    version of, put on sys.path."""
    import tempfile
    root = tempfile.mkdtemp(prefix="kvroom-vllm-dist-")
    for name, version in DIST_VERSIONS.items():
        d = os.path.join(root, f"{name}-{version}.dist-info")
        os.makedirs(d)
        with open(os.path.join(d, "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    sys.path.append(root)


def install(src):
    if src not in sys.path:
        sys.path.insert(0, src)
    pydantic2_shim.install()
    common = [s for s in sglang_env.STUBBED if not s.startswith(("sglang", "pydantic"))]
    sys.meta_path.insert(0, sglang_env._StubFinder(STUBBED + common))
    sglang_env._torch_compat()
    _torch_names()
    _torch_functions()
    _typing_names()
    _dist_info()
