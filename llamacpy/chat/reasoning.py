"""Reasoning ("thinking") text split from the answer, as llama.cpp's server returns it.

Models such as Qwen3 / DeepSeek-R1 write `<think>...</think>` before the answer; a template may
also open the block itself at the end of the prompt. With --reasoning-format deepseek (llama.cpp's
default "auto") the thinking goes to `reasoning_content` and only the answer to `content`; with
"none" everything stays in `content`; "deepseek-legacy" keeps the tags in `content` too.
The parser works on streamed text and holds back a possible partial tag at a chunk's end.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_START, THINK_END = "<think>", "</think>"
FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")


@dataclass
class Split:
    reasoning: str = ""
    content: str = ""


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ReasoningParser:
    """Feed generated text chunks; get (reasoning, content) deltas back."""

    def __init__(self, fmt: str = "auto", in_thinking: bool = False):
        if fmt not in FORMATS:
            raise ValueError(f"unknown reasoning format '{fmt}' (one of {', '.join(FORMATS)})")
        self.extract = fmt != "none"
        self.legacy = fmt == "deepseek-legacy"
        self.in_thinking = in_thinking and self.extract
        self.seen_answer = False  # a think block may only open before the answer starts
        self.strip_blanks = False  # blanks right after </think> are not part of the answer
        self.buffer = ""

    def feed(self, text: str, final: bool = False) -> Split:
        if not self.extract:
            return Split(content=text)
        self.buffer += text
        out = Split()
        while self.buffer:
            if self.in_thinking:
                if not self._take_until(THINK_END, out, final=final):
                    break
                self.in_thinking, self.strip_blanks = False, not self.legacy
            elif self.strip_blanks:
                self.buffer = self.buffer.lstrip()
                self.strip_blanks = not self.buffer
                self.seen_answer = True
            elif not self.seen_answer and self.buffer.lstrip().startswith(THINK_START):
                lead = len(self.buffer) - len(self.buffer.lstrip())
                if self.legacy:
                    out.content += self.buffer[: lead + len(THINK_START)]
                self.buffer = self.buffer[lead + len(THINK_START):]
                self.in_thinking = True
            elif not self.seen_answer and not final and \
                    THINK_START.startswith(self.buffer.lstrip()):
                break  # could still become "<think>"
            else:
                self.seen_answer = self.seen_answer or bool(self.buffer.strip())
                out.content += self.buffer
                self.buffer = ""
        return out

    def _take_until(self, tag: str, out: Split, final: bool) -> bool:
        """Move buffered thinking up to `tag` into out; True once the tag was consumed."""
        i = self.buffer.find(tag)
        if i < 0:
            keep = 0 if final else partial_suffix(self.buffer, tag)
            cut = len(self.buffer) - keep
            out.reasoning += self.buffer[:cut]
            if self.legacy:
                out.content += self.buffer[:cut]
            self.buffer = self.buffer[cut:]
            return False
        out.reasoning += self.buffer[:i]
        if self.legacy:
            out.content += self.buffer[: i + len(tag)]
        self.buffer = self.buffer[i + len(tag):]
        return True


def prompt_opens_thinking(prompt: str) -> bool:
    """The template left a think block open at the end of the prompt (Qwen3.5, DeepSeek-R1)."""
    tail = prompt.rstrip()
    return tail.endswith(THINK_START)
