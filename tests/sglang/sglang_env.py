"""Makes SGLang's own scheduler code importable on Debian 12 (CPU only,
Debian's python3-torch 1.13): stubs only for GPU kernels and third-party
packages that are not installable here, and the torch 2.x names SGLang
touches at import time. SGLang's disaggregation logic runs unmodified: not
one of its files is copied or patched. Imported first by the conformance
suite; `install(src)` puts SGLang's python/ (KVROOM_SGLANG_SRC) on sys.path.
"""

import importlib.abc
import importlib.machinery
import sys
import types

#: Modules replaced by empty stand-ins: GPU kernels and packages Debian
#: does not ship. Each name also covers its submodules.
STUBBED = [
    "orjson", "pybase64", "triton", "torchvision", "transformers", "safetensors", "openai",
    "pydantic",  # Debian's is 1.10; SGLang's API models need 2.x
    "partial_json_parser", "xgrammar", "huggingface_hub", "pydantic_core", "einops", "msgspec.structs", "msgspec.msgpack", "msgspec.json",
    "torch.func", "compressed_tensors", "gguf", "torch.distributed._symmetric_memory",
    "torch.utils._contextlib",
    # SGLang's GPU kernels (flash-linear-attention, Triton) and NCCL.
    "sglang.kernels.ops.attention.fla",
    "sglang.srt.distributed.device_communicators.pynccl_allocator",
]


def _msgspec():
    """msgspec (not in Debian): its Struct as a dataclass, which is what
    SGLang's kernel registry uses it for."""
    import dataclasses
    m = types.ModuleType("msgspec")

    class Struct:
        def __init_subclass__(cls, frozen=False, kw_only=False, **kwargs):
            # msgspec copies an empty list, dict or set default per object.
            for name in getattr(cls, "__annotations__", {}):
                value = cls.__dict__.get(name)
                if isinstance(value, (list, dict, set)):
                    setattr(cls, name, dataclasses.field(
                        default_factory=lambda v=value: type(v)(v)))
            dataclasses.dataclass(frozen=frozen, kw_only=kw_only)(cls)
            # msgspec's names for the fields (SGLang's load snapshots read it).
            cls.__struct_fields__ = tuple(f.name for f in dataclasses.fields(cls))

    m.Struct = Struct
    m.field = dataclasses.field
    m.UNSET = None
    # Wire encoding between SGLang's processes: not on the suite's paths.
    m.msgpack = _Stub("msgspec.msgpack")
    m.json = _Stub("msgspec.json")
    m.structs = _Stub("msgspec.structs")
    return m


class _TritonLaunch:
    """`kernel[grid](*args)` of a Triton kernel, run by a CPU function."""

    def __init__(self, run):
        self.run = run

    def __getitem__(self, grid):
        return self.run


def _allocator_kernels():
    """SGLang's Triton page-allocator kernels, done by SGLang's own CPU
    reference (alloc_extend_naive in mem_cache/allocator/paged.py)."""
    m = types.ModuleType("sglang.kernels.ops.memory.allocator")

    def extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, bs_pow2, page_size):
        from sglang.srt.mem_cache.allocator.paged import alloc_extend_naive
        alloc_extend_naive(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size,
                           out_indices.device)

    def decode(seq_lens, last_loc, free_pages, out_indices, bs_pow2, page_size):
        import torch
        # One token per request: the next slot of its last page, or a new page.
        need = (seq_lens - 1) % page_size == 0
        pages = torch.cumsum(need.to(torch.int64), 0) - 1
        for i in range(len(seq_lens)):
            out_indices[i] = (free_pages[pages[i]] * page_size if need[i]
                              else last_loc[i] + 1)

    m.alloc_extend_kernel = _TritonLaunch(extend)
    m.alloc_decode_kernel = _TritonLaunch(decode)
    return m


#: Dunder attributes SGLang reads of stubbed modules.
STUB_ATTRS = {"triton": {"__version__": "2.1.0"}}

#: Small stand-ins with the behaviour SGLang relies on.
FAKED = {"msgspec": _msgspec, "sglang.kernels.ops.memory.allocator": _allocator_kernels}


class _InertMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _InertMeta(name, (_Inert,), {})
        setattr(cls, name, value)
        return value

    def __getitem__(cls, key):
        return cls

    def __setitem__(cls, key, value):
        pass

    def __iter__(cls):
        return iter(())

    def __contains__(cls, key):
        return False


class _Inert(metaclass=_InertMeta):
    """What a stubbed module's names are: classes that can be subclassed
    (with class keywords), parametrized, made, called and asked for any
    attribute, doing nothing."""

    def __init_subclass__(cls, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(type(self), name)

    def __getitem__(self, key):
        return type(self)

    def __setitem__(self, key, value):
        pass

    def __iter__(self):
        return iter(())

    def __contains__(self, key):
        return False

    def __class_getitem__(cls, item):
        return cls

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return None


class _Stub(types.ModuleType):
    """A module whose every attribute is an inert class: importable, never
    called on the paths the suite drives."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _InertMeta(name, (_Inert,), {})
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names):
        self.names = list(names)

    def find_spec(self, name, path, target=None):
        if name in FAKED or any(name == s or name.startswith(s + ".") for s in self.names):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = FAKED[spec.name]() if spec.name in FAKED else _Stub(spec.name)
        m.__path__ = []
        for k, v in STUB_ATTRS.get(spec.name, {}).items():
            setattr(m, k, v)
        return m

    def exec_module(self, module):
        pass


class _PyOp:
    """One such op: calls the Python function. `.default` is the op itself
    and `.<overload>` the function registered as "<op>.<overload>", as
    torch 2.x's OpOverloadPacket has them."""

    def __init__(self, fns, name):
        self._fns, self._name = fns, name
        self.default = self

    def __call__(self, *args, **kwargs):
        fn = self._fns.get(self._name)
        return fn(*args, **kwargs) if fn is not None else None

    def __getattr__(self, overload):
        if overload.startswith("_"):
            raise AttributeError(overload)
        return _PyOp(self._fns, self._name + "." + overload)


class _PyOps:
    """torch.ops.<ns> for ops registered on a FRAGMENT library here: the
    Python function itself (no dispatcher in torch 1.13 for them)."""

    def __init__(self, ns):
        self._ns = ns
        self._fns = {}

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _PyOp(self.__dict__["_fns"], name)


def _torch_compat():
    import torch
    # torch 2.x dtypes SGLang names at import time (its fp8 paths are GPU).
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "float8_e8m0fnu", "float4_e2m1fn_x2"):
        if not hasattr(torch, name):
            setattr(torch, name, torch.float16)
    for name in ("uint16", "uint32", "uint64"):
        if not hasattr(torch, name):
            setattr(torch, name, torch.int64)
    if not hasattr(torch.dtype, "itemsize"):
        # torch.dtype is a C type: its dict is patched the way CPython's own
        # test helpers do, then the type cache is told.
        import ctypes
        import gc
        gc.get_referents(torch.dtype.__dict__)[0]["itemsize"] = property(
            lambda self: torch.empty((), dtype=self).element_size())
        ctypes.pythonapi.PyType_Modified(ctypes.py_object(torch.dtype))
    if not hasattr(torch.Tensor, "nbytes"):
        torch.Tensor.nbytes = property(lambda t: t.numel() * t.element_size())
    if not hasattr(torch.Tensor, "itemsize"):
        torch.Tensor.itemsize = property(lambda t: t.element_size())
    if not hasattr(torch, "compile"):
        # @torch.compile and @torch.compile(...): the function as it is.
        def compile(fn=None, **kwargs):
            return fn if fn is not None else (lambda f: f)
        torch.compile = compile
    if not hasattr(torch, "get_device_module"):
        torch.get_device_module = lambda device=None: torch.cuda
    import torch.cuda.memory
    for name in ("CUDAPluggableAllocator", "MemPool"):
        if not hasattr(torch.cuda.memory, name):
            setattr(torch.cuda.memory, name, _InertMeta(name, (_Inert,), {}))
            setattr(torch.cuda, name, getattr(torch.cuda.memory, name))
    import torch.cpu
    if not hasattr(torch.cpu, "is_available"):
        torch.cpu.is_available = lambda: True
    if int(torch.__version__.split(".")[0]) < 2:
        # torch 2.x indexes with int32 tensors (SGLang's req_to_token rows
        # are int32, and it indexes pools with them: the SWA mapping);
        # torch 1.13 takes long, byte or bool only.
        def widened(i):
            return i.long() if isinstance(i, torch.Tensor) and i.dtype == torch.int32 else i

        get, put = torch.Tensor.__getitem__, torch.Tensor.__setitem__
        torch.Tensor.__getitem__ = lambda self, i: get(self, widened(i))
        torch.Tensor.__setitem__ = lambda self, i, v: put(self, widened(i), v)
    if not hasattr(torch, "xpu"):
        # SGLang's platform discovery (sglang.srt.platforms, 2026-07-29 on)
        # asks torch.xpu.is_available(); torch 1.13 has no XPU module.
        xpu = types.ModuleType("torch.xpu")
        xpu.is_available = lambda: False
        xpu.device_count = lambda: 0
        torch.xpu = xpu
        sys.modules["torch.xpu"] = xpu
    if not hasattr(torch, "compiler"):
        # torch 2.x's torch.compiler: @disable (bare or called) leaves the
        # function as it is; nothing here compiles.
        compiler = types.ModuleType("torch.compiler")

        def disable(fn=None, *args, **kwargs):
            return fn if callable(fn) else (lambda f: f)
        compiler.disable = disable
        compiler.is_compiling = lambda: False
        compiler.is_dynamo_compiling = lambda: False
        compiler.assume_constant_result = lambda fn: fn
        compiler.allow_in_graph = lambda fn: fn
        torch.compiler = compiler
        sys.modules["torch.compiler"] = compiler
    import torch.distributed as dist
    red = dist.ReduceOp
    if hasattr(red, "RedOpType"):
        # int(ReduceOp.SUM) in torch 2.x; 1.13's enum values live one level
        # down, and all_reduce takes them as they are.
        for name in red.RedOpType.__members__:
            setattr(red, name, getattr(red.RedOpType, name))
    import torch.library
    original = torch.library.Library

    class Library(original):
        """torch 1.13 knows DEF and IMPL only; SGLang's custom ops
        (FRAGMENT) are GPU kernels the suite never calls."""

        def __init__(self, ns, kind, dispatch_key=""):
            if kind == "FRAGMENT":
                self.ns, self.kind, self.dispatch_key = ns, kind, dispatch_key
                self.m = None
                if not isinstance(getattr(torch.ops, ns, None), _PyOps):
                    setattr(torch.ops, ns, _PyOps(ns))
                return
            super().__init__(ns, kind, dispatch_key)

        def define(self, *a, **k):
            if self.kind == "FRAGMENT":
                return None
            return super().define(*a, **k)

        def impl(self, name, fn=None, *a, **k):
            if self.kind == "FRAGMENT":
                # torch.ops.<ns>.<name> calls the Python function directly.
                getattr(torch.ops, self.ns)._fns[name] = fn
                return None
            return super().impl(name, fn, *a, **k)

        def __del__(self):
            if self.kind != "FRAGMENT":
                super().__del__()

        def _register_fake(self, *a, **k):
            return None

    torch.library.Library = Library
    if not hasattr(torch.library, "infer_schema"):
        # Registers SGLang's GPU ops on a FRAGMENT library: never dispatched.
        torch.library.infer_schema = lambda fn, mutates_args=(), **k: "() -> ()"


def install(src):
    """SGLang's python/ on sys.path, the stubs and the torch names in place."""
    path = src.rstrip("/") + "/python"
    if path not in sys.path:
        sys.path.insert(0, path)
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder(STUBBED))
    _torch_compat()
