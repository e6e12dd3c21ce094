"""Reasoning split (llama.cpp's --reasoning-format semantics) on streamed text."""

from __future__ import annotations

import pytest

from llamacpy.chat.reasoning import ReasoningParser, prompt_opens_thinking


def run(chunks, **kw) -> tuple[str, str]:
    p, r, c = ReasoningParser(**kw), "", ""
    for i, chunk in enumerate(chunks):
        s = p.feed(chunk, final=i == len(chunks) - 1)
        r, c = r + s.reasoning, c + s.content
    return r, c


@pytest.mark.parametrize("chunks", [
    ["<think>I am thinking</think>\n\nThe answer is 4"],
    ["<thi", "nk>I am thin", "king</th", "ink>\n\nThe answer", " is 4"],
    list("<think>I am thinking</think>\n\nThe answer is 4"),
])
def test_split_survives_any_chunking(chunks):
    assert run(chunks) == ("I am thinking", "The answer is 4")


def test_template_opened_block():
    assert run(["Let me see", "</think>", "\n\nFour."], in_thinking=True) == ("Let me see",
                                                                                "Four.")


def test_formats():
    text = ["<think>x</think>\n\nAnswer"]
    assert run(text, fmt="none") == ("", "<think>x</think>\n\nAnswer")
    assert run(text, fmt="deepseek-legacy") == ("x", "<think>x</think>\n\nAnswer")
    assert run(text, fmt="deepseek") == ("x", "Answer")


def test_tag_after_the_answer_is_text():
    assert run(["Hello <think> not a tag"]) == ("", "Hello <think> not a tag")


def test_unfinished_thinking_stays_reasoning():
    assert run(["<think>still going"]) == ("still going", "")


def test_prompt_detection():
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")
