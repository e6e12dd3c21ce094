"""GGUF files: constants, an mmap reader with zero-copy tensor views, and a streaming writer."""

from .constants import GGMLType, FileType, ValueType
from .reader import GGUFError, GGUFFile, GGUFTensor, open_gguf, split_paths
from .strings import StringArray
from .writer import TensorToWrite, write_gguf

__all__ = [
    "GGMLType", "FileType", "ValueType", "GGUFError", "GGUFFile", "GGUFTensor", "open_gguf",
    "split_paths", "StringArray", "TensorToWrite", "write_gguf",
]
