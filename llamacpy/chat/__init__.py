"""Chat: Jinja chat templates with llama.cpp's globals (template.py), reasoning split
(reasoning.py)."""

from .template import (BUILTIN_TEMPLATES, CHATML_TEMPLATE, ChatTemplate, ChatTemplateError,
                       template_source)

__all__ = ["BUILTIN_TEMPLATES", "CHATML_TEMPLATE", "ChatTemplate", "ChatTemplateError",
           "template_source"]
