"""pydantic 2's dataclass interface over the standard library's dataclasses,
for vLLM's config classes on Debian 12 (whose python3-pydantic is 1.10).

What vLLM's configs need of pydantic at run time: `@dataclass(config=...)`,
`Field(...)` as a field's default, `field_validator` (before, after, wrap,
plain) and `model_validator` (before, after), `TypeAdapter`, `ConfigDict`,
`SkipValidation`. Validators run in pydantic's order (before/wrap/plain
field validators, then after, then `__post_init__`, then model 'after'
validators). What is not done: type coercion and constraint checks
(`ge=`, `Literal[...]`): the suite passes well-typed values.
"""

import dataclasses
import functools
import inspect
import sys
import types

_MISSING = dataclasses.MISSING


class FieldInfo:
    def __init__(self, default=_MISSING, *, default_factory=None, init=True, **kwargs):
        # pydantic's Field(...) with Ellipsis means "required".
        self.default = _MISSING if default is Ellipsis else default
        self.default_factory = default_factory
        self.init = init
        self.kwargs = kwargs


def Field(default=_MISSING, **kwargs):  # noqa: N802 (pydantic's name)
    return FieldInfo(default, **kwargs)


class ConfigDict(dict):
    pass


class _Validator:
    def __init__(self, fn, fields, mode, kind):
        self.fn = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
        self.fields, self.mode, self.kind = fields, mode, kind

    def __get__(self, obj, owner=None):
        # Still callable as the class's method where vLLM calls it directly.
        return types.MethodType(self.fn, owner if obj is None else obj)


def field_validator(*fields, mode="after", **kwargs):
    return lambda fn: _Validator(fn, fields, mode, "field")


def model_validator(*, mode):
    return lambda fn: _Validator(fn, (), mode, "model")


class ValidationInfo:
    def __init__(self, data):
        self.data = data
        self.field_name = None


def _call(fn, cls_or_self, value, info):
    n = len(inspect.signature(fn).parameters)
    return fn(cls_or_self, value, info) if n >= 3 else fn(cls_or_self, value)


def dataclass(cls=None, *, config=None, **kwargs):
    def wrap(cls):
        validators = []
        for klass in reversed(cls.__mro__):
            for name, value in list(vars(klass).items()):
                if isinstance(value, _Validator):
                    validators.append(value)
        for name, value in list(vars(cls).items()):
            if isinstance(value, FieldInfo):
                if value.default_factory is not None:
                    setattr(cls, name, dataclasses.field(default_factory=value.default_factory,
                                                         init=value.init))
                elif value.default is _MISSING and value.init:
                    delattr(cls, name)
                else:
                    setattr(cls, name, dataclasses.field(default=value.default, init=value.init))
        kw = {k: v for k, v in kwargs.items() if k in ("frozen", "kw_only", "eq", "repr", "order")}
        dc = dataclasses.dataclass(cls, **kw)
        if not validators:
            return dc
        init = dc.__init__
        sig = inspect.signature(init)

        @functools.wraps(init)
        def __init__(self, *args, **kw):
            bound = sig.bind(self, *args, **kw)
            values = dict(list(bound.arguments.items())[1:])
            info = ValidationInfo(values)
            for v in validators:
                if v.kind == "model" and v.mode == "before":
                    values = v.fn(type(self), values) or values
            for v in validators:
                if v.kind != "field":
                    continue
                for f in v.fields:
                    if f not in values:
                        continue
                    info.field_name = f
                    if v.mode in ("before", "plain"):
                        values[f] = _call(v.fn, type(self), values[f], info)
                    elif v.mode == "wrap":
                        n = len(inspect.signature(v.fn).parameters)
                        handler = lambda x: x  # noqa: E731
                        values[f] = (v.fn(type(self), values[f], handler, info) if n >= 4
                                     else v.fn(type(self), values[f], handler))
            for v in validators:
                if v.kind == "field" and v.mode == "after":
                    for f in v.fields:
                        if f in values:
                            info.field_name = f
                            values[f] = _call(v.fn, type(self), values[f], info)
            init(self, **values)
            for v in validators:
                if v.kind == "model" and v.mode in ("after", "wrap"):
                    out = v.fn(self) if v.mode == "after" else v.fn(self, lambda s: s)
                    if out is not None and out is not self:
                        self.__dict__.update(out.__dict__)

        dc.__init__ = __init__
        return dc

    return wrap if cls is None else wrap(cls)


class TypeAdapter:
    def __init__(self, tp, **kwargs):
        self.tp = tp

    def validate_python(self, value, **kwargs):
        return value

    def dump_python(self, value, **kwargs):
        if dataclasses.is_dataclass(value):
            return dataclasses.asdict(value)
        return value


class _Passthrough:
    def __class_getitem__(cls, item):
        return item


class SkipValidation(_Passthrough):
    pass


class GetCoreSchemaHandler:
    pass


class GetPydanticSchema:
    def __init__(self, *args, **kwargs):
        pass


class BaseModel:
    """pydantic's BaseModel, as keyword fields on an object (vLLM's API
    server models, not on the suite's paths)."""

    def __init_subclass__(cls, **kwargs):
        pass

    def __init__(self, **data):
        self.__dict__.update(data)

    def model_dump(self, **kwargs):
        return dict(self.__dict__)


class ValidationError(ValueError):
    pass


def install():
    """Puts this module in place of `pydantic` (and its submodules vLLM
    imports) in sys.modules."""
    me = sys.modules[__name__]
    pkg = types.ModuleType("pydantic")
    for name in ("Field", "ConfigDict", "field_validator", "model_validator", "TypeAdapter",
                 "GetCoreSchemaHandler",
                 "SkipValidation", "GetPydanticSchema", "ValidationInfo", "BaseModel",
                 "ValidationError", "dataclass"):
        setattr(pkg, name, getattr(me, name))
    pkg.__path__ = []
    pkg.VERSION = pkg.__version__ = "2.0-shim"
    dcs = types.ModuleType("pydantic.dataclasses")
    dcs.dataclass = dataclass
    fields = types.ModuleType("pydantic.fields")
    fields.Field, fields.FieldInfo = Field, FieldInfo
    pkg.dataclasses, pkg.fields = dcs, fields
    sys.modules.update({"pydantic": pkg, "pydantic.dataclasses": dcs, "pydantic.fields": fields})
