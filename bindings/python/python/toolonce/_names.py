"""A write tool's name, part of every key: the default a function gets (``module.qualname``,
the same in every process however its module was loaded), refused with a hint to pass
``name=`` for a callable that has no such name; and one tool per name on a store."""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
from typing import Any, Callable, Optional

from ._errors import ConfigError

# The names a script's module runs under: ``__main__``, and ``__mp_main__`` in a child that
# multiprocessing's spawn or forkserver start method made (it imports the parent's script so).
_MAINS = ("__main__", "__mp_main__")

_registering = threading.Lock()


def default_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of ``fn``, with the module as ``import`` names it, so that the name
    is the same however the module was loaded. A function of ``__main__`` (``python qs.py`` or
    ``python -m qs``) gets its module's importable name (``qs``, or ``pkg.qs`` inside a
    package): from ``__main__.__spec__`` when run with ``-m``, else from the script's path,
    through the packages (directories with ``__init__.py``) that hold it.

    Refused (``ConfigError`` naming ``name=``), when the name would not be stable and unique: a
    lambda, a function defined inside a function, a ``functools.partial``, a callable object,
    a bound method, and a function of ``__main__`` without a file of an importable name."""
    why = _why_unnamed(fn)
    if why is not None:
        raise _refusal(fn, why)
    qualname = fn.__qualname__
    module = getattr(fn, "__module__", None)
    if module in _MAINS:
        main = module
        module = _main_module_name(main)
        if module is None:
            raise _refusal(fn, f"{qualname} is defined in {_main_file(main)}")
    if not module:
        raise _refusal(fn, f"{qualname} has no module")
    return f"{module}.{qualname}"


def _why_unnamed(fn: Any) -> Optional[str]:
    """Why ``fn``'s qualified name cannot be a tool name (``None`` if it can): what it is and
    why the name would not be stable (the same in every process) and unique."""
    if isinstance(fn, functools.partial):
        return (
            f"{describe(fn)} is a functools.partial, which has no name of its own: its default "
            "name would be its repr, with memory addresses that differ in every process"
        )
    owner = getattr(fn, "__self__", None)
    if owner is not None and not inspect.ismodule(owner):
        return (
            f"{describe(fn)} is a bound method: its qualified name is the same for every object "
            "it is bound to (every instance, every subclass), which may each hold other state "
            "and so be other tools"
        )
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str):
        return (
            f"{describe(fn)} has no name of its own (no __qualname__): its default name would "
            "be its repr, with a memory address that differs in every process"
        )
    if "<lambda>" in qualname:
        return (
            f"{describe(fn)} is a lambda: every lambda is named <lambda>, so two of one module "
            "would be one tool, and a call of one would replay the other's result"
        )
    if "<locals>" in qualname:
        outer = qualname.rsplit(".<locals>", 1)[0]
        return (
            f"{describe(fn)} is defined inside the function {outer}: each call of {outer} makes "
            "another function of this name, which may hold other values and so be another tool"
        )
    return None


def _refusal(fn: Any, why: str) -> ConfigError:
    return ConfigError(
        f"{why}. It has no stable and unique default tool name (part of every key): pass "
        "name=, one that stays the same in every process and that no other tool of the store "
        f"has, as @toolonce.write(store, name={_suggestion(fn)!r})"
    )


def _suggestion(fn: Any) -> str:
    """A name to show in a refusal: the function's own short name where it has one."""
    if isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or name.startswith("<"):
        name = getattr(type(fn), "__name__", "")
    if not name.isidentifier() or name in ("function", "partial"):
        return "..."
    return name


def describe(fn: Any) -> str:
    """``fn`` as a message names it: where it is defined, without memory addresses."""
    if isinstance(fn, functools.partial):
        return f"functools.partial of {describe(fn.func)}"
    owner = getattr(fn, "__self__", None)
    if owner is not None and not inspect.ismodule(owner):
        func = getattr(fn, "__func__", fn)
        name = getattr(func, "__qualname__", getattr(fn, "__name__", "?"))
        what = "the class" if isinstance(owner, type) else "an instance of"
        cls = owner if isinstance(owner, type) else type(owner)
        return f"{name} bound to {what} {cls.__module__}.{cls.__qualname__}"
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str):
        cls = type(fn)
        return f"an instance of {cls.__module__}.{cls.__qualname__}"
    try:
        code = getattr(inspect.unwrap(fn), "__code__", None)
    except ValueError:  # a __wrapped__ cycle
        code = None
    where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code else None
    if "<lambda>" in qualname and where:
        return f"the lambda at {where} ({getattr(fn, '__module__', None)}.{qualname})"
    return f"{getattr(fn, '__module__', None)}.{qualname}" + (f" ({where})" if where else "")


def register(store: Any, name: str, fn: Callable[..., Any]) -> None:
    """Records ``fn`` as the tool ``name`` of ``store``, refusing another tool under a name
    one already has (explicit or default): their calls would share keys, so one would replay
    the other's results. The same tool again is fine (see :func:`_same_tool`)."""
    with _registering:
        known = store._tools.get(name)
        if known is not None and not _same_tool(known, fn):
            raise ConfigError(
                f"two different tools are named {name!r} on one store: {describe(known)} and "
                f"{describe(fn)}; the name is part of every key, so a call of one would replay "
                "the other's result: give each its own name="
            )
        store._tools[name] = fn


def _same_tool(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are one tool: one callable (a method bound again to the same
    object too), or one ``def`` run again (``importlib.reload``, a notebook cell run again),
    which is the same module and qualified name of a function that has a stable one."""
    if a is b:
        return True
    if inspect.ismethod(a) and inspect.ismethod(b):
        return a.__self__ is b.__self__ and a.__func__ is b.__func__
    if _why_unnamed(a) is not None or _why_unnamed(b) is not None:
        return False
    return _module_of(a) == _module_of(b) and a.__qualname__ == b.__qualname__


def _module_of(fn: Any) -> Optional[str]:
    module = getattr(fn, "__module__", None)
    if module in _MAINS:
        return _main_module_name(module) or module
    return module


def _main_file(main: str) -> str:
    """How a refusal names the script module ``main``'s file (or its lack of one)."""
    path = getattr(sys.modules.get(main), "__file__", None)
    if not path:
        return f"{main} without a file (python -c, an interactive session)"
    return f"{main} from {os.path.basename(path)}, which is no importable module name"


def _main_module_name(name: str) -> Optional[str]:
    """The name ``import`` would give the script module ``name`` (``__main__``, or
    ``__mp_main__`` while a spawned child imports it, before it becomes ``__main__``), or
    ``None`` without a file."""
    main = sys.modules.get(name)
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name not in _MAINS:
        return spec.name
    path = getattr(main, "__file__", None)
    if not path:
        return None
    path = os.path.abspath(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    if not stem.isidentifier():
        return None
    parts = [stem]
    directory = os.path.dirname(path)
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        name = os.path.basename(directory)
        if not name.isidentifier():
            break
        parts.insert(0, name)
        directory = os.path.dirname(directory)
    return ".".join(parts)
