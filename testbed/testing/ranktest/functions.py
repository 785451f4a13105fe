"""What ``run_ranks`` sends to the rank processes, checked before any process starts.

The rank processes (traffic.user_rank) import the function by its ``module:qualname`` and get its
arguments by pickle, so a lambda, a closure, a bound method, a function called without the rank
context first or unpicklable arguments fail here, in the test's own process, with
:class:`RankFunctionError` saying what to write instead.
"""

from __future__ import annotations

import inspect
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.core.units import parse_duration


class RankFunctionError(TypeError):
    """The function or its arguments cannot be sent to the rank processes."""


def describe_function(fn: Callable[..., Any]) -> tuple[str, str | None]:
    """'module:qualname' and source file of a function the rank processes can import by name.

    Raises RankFunctionError for anything they cannot: lambdas, nested functions and closures,
    bound methods, partials and other callables, functions not reachable under their own name.
    """
    how = (
        "define it with `def` at the top level of a module (a test file or your package) and pass "
        "its arguments to run_ranks(fn, *args, **kwargs)"
    )
    if inspect.ismethod(fn):
        raise RankFunctionError(
            f"{fn!r} is a bound method; rank processes cannot receive its object: {how}"
        )
    if not inspect.isfunction(fn):
        raise RankFunctionError(
            f"{fn!r} is not a plain function (a {type(fn).__name__}); "
            f"run_ranks needs a picklable top-level function: {how}"
        )
    qualname, module = fn.__qualname__, fn.__module__
    if "<lambda>" in qualname:
        raise RankFunctionError(f"a lambda cannot run on the ranks: {how}")
    if "<locals>" in qualname:
        raise RankFunctionError(
            f"{qualname} is a nested function or closure; rank processes cannot import it: {how}"
        )
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn:
        raise RankFunctionError(
            f"{module}.{qualname} does not name this function (redefined, or wrapped by a "
            f"decorator without functools.wraps?); rank processes import it by name: {how}"
        )
    try:
        file: str | None = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except TypeError:
        file = None
    return f"{module}:{qualname}", str(Path(file).resolve()) if file else None


def check_signature(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
    """Raise RankFunctionError unless ``fn(ctx, *args, **kwargs)`` binds: the rank context comes
    first, so a function without it would fail on every rank with a confusing TypeError."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(object(), *args, **kwargs)
    except TypeError as exc:
        name = getattr(fn, "__qualname__", repr(fn))
        raise RankFunctionError(
            f"{name}{sig} cannot be called as {name}(ctx, *args, **kwargs) with these arguments "
            f"({exc}); a rank function takes the rank context first, e.g. "
            f"def {getattr(fn, '__name__', 'fn')}(ctx, nbytes): ..."
        ) from None


def pickle_arguments(args: tuple, kwargs: dict[str, Any]) -> bytes:
    """``(args, kwargs)`` as the ranks read them (their ``args_file``)."""
    try:
        return pickle.dumps((args, kwargs))
    except Exception as exc:
        raise RankFunctionError(
            f"run_ranks arguments must be picklable (they are sent to every rank): {exc}"
        ) from exc


def positive_seconds(value: float | str, what: str) -> float:
    """``value`` (seconds, or a duration like "2s") as seconds; ValueError unless positive."""
    seconds = parse_duration(value) if isinstance(value, str) else float(value)
    if seconds <= 0:
        raise ValueError(f"{what} must be positive, got {value!r}")
    return seconds


def caller_sys_path() -> list[str]:
    """This process's ``sys.path``, for the ranks to import the caller's modules."""
    # '' means "the current directory" to the caller; the rank process must get it spelled out
    return [os.getcwd() if p == "" else p for p in sys.path]
