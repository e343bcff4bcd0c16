"""The command line's values coerced as typer does, without pydantic for the common kinds.

typer (0.29) coerces each parameter's value through a pydantic `TypeAdapter` it builds on first
use; importing pydantic and building the adapters costs about 0.15 s, a sixth of a `trace
sweep` of a mid-size trace. `lighten` starts each parameter with a coercion that does what
typer's does for the values a run mostly has (none, a string, a path, a choice, a list of
strings, a number already of its type within its bounds), with typer's own functions where
it has them (`coerce_cli_choice`, `coerce_cli_path`), and hands every other value to typer's
coercion, built then as typer builds it: results and error messages stay typer's.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

from typer import _param_types as param_types
from typer._click import Command, Context


def lighten(command: Command, parent: Context | None = None) -> None:
    """Give every parameter of `command` and of its subcommands, `--help` included, the light
    coercion (a parameter typer built otherwise, or a typer without the hook, is left as
    it is)."""
    ctx = command.context_class(command, parent=parent, **command.context_settings)
    for sub in getattr(command, "commands", {}).values():
        lighten(sub, ctx)
    for param in [*command.params, command.get_help_option(ctx)]:
        if getattr(param, "_runtime_param", False) is None and hasattr(param, "type_descriptor"):
            param._runtime_param = LightCoercion(param)  # type: ignore[union-attr]


class LightCoercion:
    """One parameter's coercion: the common values here, any other by typer's own."""

    def __init__(self, param: Any) -> None:
        self.param = param
        self.descriptor = param.type_descriptor

    def coerce(self, value: Any, param: Any, ctx: Context) -> Any:
        """`RuntimeParam.coerce` of typer, for the values it is sure of."""
        multi = param.multiple or param.nargs == -1
        if value is None:
            return () if multi else None
        info = self.descriptor.parameter_info
        if info.parser is None and self.descriptor.file_annotation is None:
            done, result = (self._many(value) if multi
                            else self._one(value, self.descriptor.annotation, info, param, ctx))
            if done:
                return result
        return self._typer().coerce(value, param=param, ctx=ctx)

    def _one(self, value: Any, annotation: Any, info: Any, param: Any,
             ctx: Context) -> tuple[bool, Any]:
        if annotation is str and type(value) is str:
            return True, value
        if annotation is Path and info.path_type is None and (
                isinstance(value, Path) or (type(value) is str and value)):
            path = value if isinstance(value, Path) else Path(value)
            return True, param_types.coerce_cli_path(path, info, path_type=Path, param=param,
                                                     ctx=ctx)
        if isinstance(annotation, type) and issubclass(annotation, Enum) and (
                isinstance(value, annotation | str)):
            try:
                return True, param_types.coerce_cli_choice(
                    value, choices=tuple(annotation), case_sensitive=info.case_sensitive,
                    ctx=ctx)
            except ValueError:  # typer's message names the choices
                return False, None
        if annotation in (int, float) and type(value) is annotation and not info.clamp and (
                info.min is None or value >= info.min) and (info.max is None or value <= info.max):
            return True, value
        return False, None

    def _many(self, value: Any) -> tuple[bool, Any]:
        annotation = self.descriptor.annotation
        if (getattr(annotation, "__origin__", None) is list
                and getattr(annotation, "__args__", ()) == (str,)
                and isinstance(value, tuple | list) and all(type(v) is str for v in value)):
            return True, list(value)
        return False, None

    def _typer(self) -> Any:
        """typer's own coercion of this parameter, built as typer builds it."""
        from typer._coercion import build_runtime_param

        built = build_runtime_param(self.descriptor)
        self.param._runtime_param = built
        return built
