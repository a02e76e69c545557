"""Task registration, and checking a payload against the task function's signature."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tasklab.core.jsontext import dumps
from tasklab.errors import InvalidPayload, UnknownTask

MAX_PAYLOAD_BYTES = 1024 * 1024

_JSON_TYPES: dict[Any, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    dict: "object",
    list: "array",
    type(None): "null",
}


@dataclass(frozen=True)
class TaskDef:
    name: str
    fn: Callable[..., Any]
    max_attempts: int = 1
    retry_safe: bool = False
    retry_on: tuple[type[BaseException], ...] = ()
    transactional: bool = False
    timeout: float | None = None
    is_async: bool = False
    # extra validation at submit, beyond the signature: check(payload, data_dir)
    check: Callable[[dict[str, Any], Any], None] | None = None
    # an `async def` twin that drives the same logic, for the asyncio runner
    async_fn: Callable[..., Any] | None = None
    # where and in what order it runs by default, and its per-key concurrency limit
    queue: str = "default"
    priority: int = 0
    concurrency_limit: int | None = None
    signature: inspect.Signature = field(init=False, repr=False, compare=False)
    # For the common signature (named parameters only, no *args/**kwargs): the names in
    # order and the required ones, so that a submit checks a payload's keys with two
    # set operations instead of `Signature.bind` (a seventh of a submit's CPU). None:
    # anything else, checked by `bind` as before.
    _plain: tuple[tuple[str, ...], frozenset[str]] | None = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        signature = _payload_signature(self.fn)
        object.__setattr__(self, "signature", signature)
        params = list(signature.parameters.values())
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        plain = None
        if all(p.kind in named for p in params):
            required = frozenset(p.name for p in params if p.default is inspect.Parameter.empty)
            plain = (tuple(p.name for p in params), required)
        object.__setattr__(self, "_plain", plain)

    @property
    def qualified(self) -> str:
        """`module:qualname`, so that a child process can import the same function."""
        return f"{self.fn.__module__}:{self.fn.__qualname__}"

    def validate(self, payload: object, data_dir: Any = None) -> dict[str, Any]:
        """Return the payload if it fits the function's parameters, else InvalidPayload."""
        return self.validate_encoded(payload, data_dir)[0]

    def validate_encoded(self, payload: object, data_dir: Any = None) -> tuple[dict[str, Any], str]:
        """`validate`, and the payload's stored JSON text (made here once, to check it)."""
        if not isinstance(payload, dict):
            raise InvalidPayload(f"payload for {self.name!r} must be a JSON object")
        try:
            encoded = dumps(payload)
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(f"payload is not JSON: {exc}") from None
        size = len(encoded) if encoded.isascii() else len(encoded.encode())
        if size > MAX_PAYLOAD_BYTES:
            raise InvalidPayload(f"payload is larger than {MAX_PAYLOAD_BYTES} bytes")
        plain = self._plain
        fits = False
        if plain is not None and plain[1] <= payload.keys():
            # every required name is there; the rest must be parameters too
            arguments = [(name, payload[name]) for name in plain[0] if name in payload]
            fits = len(arguments) == len(payload)
        if not fits:
            try:
                arguments = list(self.signature.bind(**payload).arguments.items())
            except TypeError as exc:
                raise InvalidPayload(f"payload does not fit {self.name!r}: {exc}") from None
        params = self.signature.parameters
        for name, value in arguments:
            _check_type(self.name, name, params[name], value)
        if self.check is not None:
            self.check(payload, data_dir)
        return payload, encoded

    def json_schema(self) -> dict[str, Any]:
        props: dict[str, Any] = {}
        required: list[str] = []
        for name, param in self.signature.parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                continue
            prop: dict[str, Any] = {}
            types_ = _json_types(param.annotation)
            if types_:
                prop["type"] = types_[0] if len(types_) == 1 else types_
            if param.default is inspect.Parameter.empty:
                required.append(name)
            else:
                prop["default"] = param.default
            props[name] = prop
        schema: dict[str, Any] = {"type": "object", "properties": props, "required": required}
        if not any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in self.signature.parameters.values()
        ):
            schema["additionalProperties"] = False
        return schema


def _payload_signature(fn: Callable[..., Any]) -> inspect.Signature:
    """The signature without the leading context parameter, with resolved annotations."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise TypeError(f"task {fn.__qualname__} must take the TaskContext as first argument")
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations: validate arity only
        hints = {}
    rest = []
    for p in params[1:]:
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            continue  # a JSON object has no positional part
        rest.append(p.replace(annotation=hints.get(p.name, inspect.Parameter.empty)))
    return sig.replace(parameters=rest, return_annotation=inspect.Signature.empty)


def _json_types(annotation: Any) -> list[str]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return []
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        out: list[str] = []
        for arg in typing.get_args(annotation):
            sub = _json_types(arg)
            if not sub:
                return []
            out.extend(t for t in sub if t not in out)
        return out
    base = origin or annotation
    name = _JSON_TYPES.get(base)
    if name == "number":
        return ["number"]
    return [name] if name else []


def _check_type(task: str, name: str, param: inspect.Parameter, value: Any) -> None:
    if param.kind is inspect.Parameter.VAR_KEYWORD:
        return
    expected = _json_types(param.annotation)
    if not expected or (value is None and param.default is None):
        return
    if _json_kind(value) in expected or (_json_kind(value) == "integer" and "number" in expected):
        return
    raise InvalidPayload(
        f"payload does not fit {task!r}: {name!r} must be {' or '.join(expected)}, "
        f"got {_json_kind(value)}"
    )


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    for py, kind in _JSON_TYPES.items():
        if isinstance(value, py):
            return kind
    return type(value).__name__


class Registry:
    """The task names this app (or worker) knows; only these can be submitted or run."""

    def __init__(self) -> None:
        self._tasks: dict[str, TaskDef] = {}

    def add(self, task: TaskDef) -> None:
        if task.name in self._tasks and self._tasks[task.name].fn is not task.fn:
            raise ValueError(f"task name {task.name!r} is already registered")
        self._tasks[task.name] = task

    def get(self, name: str) -> TaskDef:
        try:
            return self._tasks[name]
        except KeyError:
            raise UnknownTask(f"no task named {name!r} is registered") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def all(self) -> list[TaskDef]:
        return [self._tasks[n] for n in self.names()]
