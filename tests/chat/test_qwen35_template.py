"""Qwen3.5's own chat template (llama.cpp's models/templates/Qwen3.5-4B.jinja) through our
renderer and reasoning split: thinking off closes the think block in the prompt and every output
token is content; thinking on leaves it open and the text before </think> is reasoning."""

from __future__ import annotations

import pytest

from llamacpy.chat.reasoning import ReasoningParser, prompt_opens_thinking
from llamacpy.chat.template import ChatTemplate
from tests.reference.vocab_data import template_path

MESSAGES = [{"role": "system", "content": "You watch a camera."},
            {"role": "user", "content": [{"type": "text", "text": "<__media__>"},
                                         {"type": "text", "text": "What is in this picture?"}]}]


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    return ChatTemplate(template_path("Qwen3.5-4B").read_text(), eos_token="<|im_end|>")


def split(prompt: str, output: list[str]) -> tuple[str, str]:
    p, reasoning, content = ReasoningParser("auto", prompt_opens_thinking(prompt)), "", ""
    for i, piece in enumerate(output):
        s = p.feed(piece, final=i == len(output) - 1)
        reasoning, content = reasoning + s.reasoning, content + s.content
    return reasoning, content


def test_thinking_off_closes_the_block(template):
    prompt = template.render(MESSAGES, enable_thinking=False)
    assert prompt == ("<|im_start|>system\nYou watch a camera.<|im_end|>\n<|im_start|>user\n"
                      "<__media__>What is in this picture?<|im_end|>\n"
                      "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_thinking(prompt)
    assert split(prompt, ["A red", " car parked", " outside."]) == ("", "A red car parked outside.")


def test_thinking_on_opens_the_block(template):
    prompt = template.render(MESSAGES)  # the template's default: enable_thinking true
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert prompt_opens_thinking(prompt)
    out = ["The user", " asks about", " the image.\n", "</thi", "nk>\n\n", "A red car."]
    # llama.cpp keeps the reasoning text as generated (chat-peg-parser: no trimming)
    assert split(prompt, out) == ("The user asks about the image.\n", "A red car.")


def test_history_drops_earlier_reasoning(template):
    """Assistant turns before the last user message are rendered without their thinking."""
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!", "reasoning_content": "greet back"},
                {"role": "user", "content": "Bye"}]
    prompt = template.render(messages, enable_thinking=False)
    assert "greet back" not in prompt and "<|im_start|>assistant\nHello!<|im_end|>" in prompt
