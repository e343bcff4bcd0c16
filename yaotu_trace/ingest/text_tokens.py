"""Token ids from a log that holds text (a gateway's request bodies), with the tokenizer the user
names (`--tokenizer tokenizer.json`): never guessed, and checked against the server's count.

A `messages` request is rendered through the model's chat template first, as the server does;
`tokenizer.json` does not hold it, so it is read from the `tokenizer_config.json` beside it
(`chat_template`, rendered with jinja2 in a sandbox as `transformers` does) and its text
tokenized without special tokens (the template writes them); a `prompt` request is tokenized
with them. The `tokenizers` and `jinja2` packages are an optional extra (`pip install
'yaotu-trace[tokenizer]'`), imported only when the option is given.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yaotu_trace.errors import ConfigError, TraceReadError

EXTRA = "pip install 'yaotu-trace[tokenizer]'"
CONFIG_NAME = "tokenizer_config.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextTokenizer:
    """A tokenizer read from `path`: `encode(text, special)` gives the ids of `text` (with the
    tokenizer's special tokens when `special`), `chat` renders a request's messages through the
    model's chat template (None: the template was not found beside the tokenizer)."""

    path: Path
    encode: Callable[[str, bool], list[int]]
    chat: Callable[[list[Any]], str] | None
    template_path: Path | None

    def prompt_ids(self, request: dict[str, Any]) -> list[int] | str:
        """The prompt's token ids as the server made them, or why they cannot be made."""
        if isinstance(request.get("prompt"), str):
            return self.encode(request["prompt"], True)
        messages = request.get("messages")
        if not isinstance(messages, list):
            return "holds neither 'messages' nor a text 'prompt'"
        if self.chat is None:
            return (f"is a chat request, whose text the server renders through the model's "
                    f"chat template, and no {CONFIG_NAME} with a chat_template is beside "
                    f"{self.path}")
        try:
            text = self.chat(messages)
        except ValueError as exc:
            return f"does not render through the chat template of {self.template_path} ({exc})"
        return self.encode(text, False)

    def describe(self) -> str:
        """Where the ids come from, for the trace's notes."""
        chat = ("" if self.template_path is None
                else f", chat requests rendered through the chat_template of {self.template_path}")
        return f"prompt token ids are the request text tokenized with {self.path}{chat}"


def load_tokenizer(path: Path) -> TextTokenizer:
    """The tokenizer at `path` (a `tokenizer.json`) and the chat template beside it."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigError(f"--tokenizer {path}: needs the tokenizers package, an optional "
                          f"extra: {EXTRA}") from None
    if not path.is_file():
        raise TraceReadError(f"{path}: no such tokenizer file; give the model's tokenizer.json")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust library raises plain Exceptions
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TraceReadError(f"{path}: not a tokenizer the tokenizers library reads ({first}); "
                             "give the model's tokenizer.json") from None

    def encode(text: str, special: bool) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=special).ids)

    template_path = path.parent / CONFIG_NAME
    chat = _chat_template(template_path)
    return TextTokenizer(path=path, encode=encode, chat=chat,
                         template_path=template_path if chat is not None else None)


def _chat_template(path: Path) -> Callable[[list[Any]], str] | None:
    """The chat template of a `tokenizer_config.json`, as a function of the messages."""
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceReadError(f"{path}: not a readable JSON tokenizer config ({exc}); give the "
                             "model's tokenizer_config.json") from None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):  # several named templates: the default one
        template = next((t.get("template") for t in template
                         if isinstance(t, dict) and t.get("name") == "default"), None)
    if not isinstance(template, str):
        return None
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ConfigError(f"--tokenizer: the chat template of {path} needs the jinja2 package, "
                          f"an optional extra: {EXTRA}") from None
    try:
        compiled = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True
                                                 ).from_string(template)
    except TemplateError as exc:
        raise TraceReadError(f"{path}: its chat_template is not a Jinja template ({exc})"
                             ) from None
    tokens = {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token")}

    def render(messages: list[Any]) -> str:
        try:
            return compiled.render(messages=messages, add_generation_prompt=True, **tokens)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None

    return render


def _token_text(value: Any) -> str:
    """A special token as `tokenizer_config.json` gives it (text, or an AddedToken dict)."""
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return "" if value is None else str(value)
