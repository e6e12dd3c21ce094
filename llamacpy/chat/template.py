"""Chat templates: the GGUF's `tokenizer.chat_template` rendered with Jinja2 the way llama.cpp's
own engine renders it (common/jinja, common/chat.cpp: common_chat_template_direct_apply).

Same options (trim_blocks, lstrip_blocks), globals (raise_exception, strftime_now, bos_token,
eos_token, add_generation_prompt, tools, enable_thinking, extra kwargs), a `tojson` that keeps
non-ASCII text and Python's separators, and the same post-processing: a leading BOS text is
dropped when the tokenizer adds BOS itself, a trailing EOS text when it adds EOS.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any


# common/chat.cpp CHATML_TEMPLATE_SRC: what llama.cpp uses when the model carries no template
CHATML_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\n' -}}\n"
    "{%- endif -%}"
)


# Gemma's turn format (llama.cpp's builtin "gemma" template), for Gemma files without a template
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set system = messages[0]['content'] + '\n\n' -%}{%- set messages = messages[1:] -%}"
    "{%- else -%}{%- set system = '' -%}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (system if loop.first else '') "
    "+ message['content'] | trim + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)
BUILTIN_TEMPLATES = {"chatml": CHATML_TEMPLATE, "gemma": GEMMA_TEMPLATE}


def template_source(name_or_source: str) -> str:
    """A builtin template by name (--chat-template chatml / gemma), else the text itself."""
    return BUILTIN_TEMPLATES.get(name_or_source, name_or_source)


class ChatTemplateError(ValueError):
    """A template that fails to parse or raises while rendering; the message says where."""


def _raise_exception(message: str):
    raise ChatTemplateError(f"Jinja Exception: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # llama.cpp's tojson: ", " and ": " separators unless indenting, non-ASCII kept as is
    if separators is None:
        separators = (", ", ": ") if indent is None else (",", ": ")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=tuple(separators),
                      sort_keys=sort_keys)


def _environment():
    """jinja2's sandbox with llama.cpp's globals (jinja2 loaded here, not at import: 1.9 MB of
    RSS that a run with no chat never needs)."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols], undefined=jinja2.Undefined)
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
    return env


def concat_content_parts(parts: list[dict]) -> str:
    """Typed content parts joined with newlines (messages_inp_normalizer::concat_content_parts)."""
    text, last_media = "", False
    for part in parts:
        kind = part.get("type", "")
        if kind == "text":
            newline = not last_media and bool(text)
            last_media = False
        elif kind == "media_marker":
            newline, last_media = False, True
        else:
            continue
        text += ("\n" if newline else "") + part.get("text", "")
    return text


class ChatTemplate:
    """A compiled chat template bound to a model's BOS/EOS token texts."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "",
                 add_bos: bool = False, add_eos: bool = False):
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token
        self.add_bos, self.add_eos = add_bos, add_eos
        import jinja2

        try:
            self.template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"chat template does not parse: {e.message} "
                                    f"(line {e.lineno})") from None
        # templates that walk typed content parts get them as lists; others get plain strings
        self.supports_typed_content = "['type']" in source or ".type" in source or \
            '["type"]' in source

    def normalize(self, messages: list[dict]) -> list[dict]:
        """Typed content parts joined into text, unless the template walks them; a message
        with media markers is always joined (common_chat_msg::to_json_oaicompat)."""
        out = []
        for m in messages:
            content = m.get("content")
            if isinstance(content, list) and (not self.supports_typed_content or any(
                    isinstance(p, dict) and p.get("type") == "media_marker" for p in content)):
                m = dict(m, content=concat_content_parts(content))
            out.append(m)
        return out

    def render(self, messages: list[dict], add_generation_prompt: bool = True,
               tools: list | None = None, enable_thinking: bool = True, **kwargs: Any) -> str:
        """The prompt text for `messages` (OpenAI-style dicts)."""
        context = {"messages": self.normalize(messages), "bos_token": self.bos_token,
                   "eos_token": self.eos_token, "enable_thinking": enable_thinking}
        if tools:
            context["tools"] = tools
        context.update(kwargs)
        if add_generation_prompt:
            context["add_generation_prompt"] = True
        import jinja2

        try:
            text = self.template.render(**context)
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"chat template failed: {e}") from None
        if self.add_bos and self.bos_token and text.startswith(self.bos_token):
            text = text[len(self.bos_token):]
        if self.add_eos and self.eos_token and text.endswith(self.eos_token):
            text = text[: -len(self.eos_token)]
        return text
