"""Chat: Jinja chat templates with llama.cpp's globals (template.py)."""

from .template import CHATML_TEMPLATE, ChatTemplate, ChatTemplateError

__all__ = ["CHATML_TEMPLATE", "ChatTemplate", "ChatTemplateError"]
