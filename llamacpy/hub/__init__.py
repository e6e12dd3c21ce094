"""The model cache and the catalogue of models that Python packages carry (no model hub here)."""

from .catalog import (CATALOG, DEFAULT_MODEL, CatalogEntry, cache_dir, default_chat_template,
                      pull, resolve_model)

__all__ = ["CATALOG", "DEFAULT_MODEL", "CatalogEntry", "cache_dir", "default_chat_template", "pull",
           "resolve_model"]
