"""Chat: Jinja chat templates with llama.cpp's globals (template.py), reasoning split
(reasoning.py), tool calls: formats, grammars and parsing (tools.py)."""

from .template import (BUILTIN_TEMPLATES, CHATML_TEMPLATE, ChatTemplate, ChatTemplateError,
                       template_source)

__all__ = ["BUILTIN_TEMPLATES", "CHATML_TEMPLATE", "ChatTemplate", "ChatTemplateError",
           "template_source"]
