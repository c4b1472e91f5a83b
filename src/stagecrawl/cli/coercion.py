"""Option values that need no conversion, passed through without importing pydantic.

typer (0.2x) coerces each processed option's value through a pydantic TypeAdapter, built the
first time the option is processed: every command that runs, and every sub-command's
`--help` (whose parent's `--help` flag is processed as unset), imports pydantic for it, a
cost near a third of importing typer itself (bench/startup.py's baseline rows). Most values
need no conversion: a flag already a bool, an option's text already a str, an enum option's
default member, or its exact value (typer's own choice matching, which needs no pydantic).
Those are returned as typer would return them; every other value (a number with bounds, a
path, a list, a bad choice and its error message) goes through typer's own adapter, built
then. On a typer without these internals `install` changes nothing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any


def install() -> None:
    try:
        from typer import core
        from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
        from typer._param_types import choice_coercion_annotation, coerce_cli_choice
    except ImportError:  # another typer: its own coercion, as is
        return
    parameter = getattr(core, "_TyperParameter", None)
    if parameter is None or not hasattr(parameter, "get_runtime_param"):
        return

    @dataclass(frozen=True)
    class PlainFirst(RuntimeParam):
        descriptor: TypeDescriptor

        @functools.cached_property
        def typer_coercion(self) -> Any:  # typer's own (pydantic), built on first need
            return build_runtime_param(self.descriptor)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            info = self.parameter_info
            if info.parser is None and self.descriptor.file_annotation is None:
                if self.annotation in (bool, str) and type(value) is self.annotation:
                    return value
                choices = choice_coercion_annotation(self.annotation, info)
                if choices is not None:
                    try:
                        return coerce_cli_choice(
                            value, choices=choices[0], case_sensitive=choices[1], ctx=ctx
                        )
                    except ValueError:
                        pass  # typer's adapter says why, in its words
            return self.typer_coercion._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            descriptor = self.type_descriptor
            self._runtime_param = PlainFirst(
                parameter_info=descriptor.parameter_info,
                annotation=descriptor.annotation,
                descriptor=descriptor,
            )
        return self._runtime_param

    parameter.get_runtime_param = get_runtime_param
