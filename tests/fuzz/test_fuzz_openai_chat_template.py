"""Fuzz chat template rendering: any chat a client may send, through real-world-shaped templates.

A chat that parse_chat accepts (messages of every shape, earlier tool calls with any arguments,
tools with any parameters; tests.fuzz.openai_bodies) is rendered by ChatTemplates with each
model's template below — the shapes Hugging Face templates take: arguments and tools as
`tojson`, arguments walked item by item, `raise_exception` on roles out of turn, the fallback.
Property: the prompt is text a model can be sent (UTF-8), or the module's `OpenAIError`
(a template's refusal); never another exception (a RecursionError, a UnicodeEncodeError).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import strategies as st

from runtime.openai.chat_template import ChatTemplates
from runtime.openai.errors import OpenAIError
from runtime.openai.schema import parse_body, parse_chat
from tests.fuzz.openai_bodies import MODEL, conversation
from tests.fuzz.targets import fuzz_target

TEMPLATES = {
    # Llama 3.1's way: tools and each call's arguments as JSON
    "llama_like": (
        "{{ bos_token }}{% if tools %}{{ tools | tojson(indent=4) }}{% endif %}"
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
        "{% for c in m.tool_calls or [] %}{{ c.function.name }}"
        "{{ c.function.arguments | tojson }}{% endfor %}"
        "{% if m.tool_call_id %}[{{ m.tool_call_id }}]{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    ),
    # Hermes' and others' way: the arguments walked, each value printed as it is
    "items": (
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n"
        "{% for c in m.tool_calls or [] %}{% for k, v in c.function.arguments.items() %}"
        "{{ k }}={{ v }};{% endfor %}{% endfor %}{% endfor %}assistant:"
    ),
    # Mistral's way: turns must alternate, call ids are 9 characters
    "strict": (
        "{% for m in messages %}"
        "{% if m.role == 'user' and loop.index0 % 2 == 1 %}"
        "{{ raise_exception('roles must alternate') }}{% endif %}"
        "{% for c in m.tool_calls or [] %}{% if c.id | length != 9 %}"
        "{{ raise_exception('a tool call id is 9 characters') }}{% endif %}"
        "[TOOL_CALLS]{{ [c.function] | tojson }}{% endfor %}"
        "[INST]{{ m.content | trim }}[/INST]{% endfor %}"
    ),
}


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> ChatTemplates:
    repo = tmp_path_factory.mktemp("templates")
    for name, source in TEMPLATES.items():
        (repo / name).mkdir()
        doc = {"chat_template": source, "bos_token": "<s>", "eos_token": "</s>"}
        (repo / name / "tokenizer_config.json").write_text(json.dumps(doc))
    (repo / "fallback").mkdir()  # no tokenizer_config.json: the fallback prompt
    return ChatTemplates([Path(repo)])


_messages, _tools = conversation(wrong=False)
_chats = st.fixed_dictionaries(
    {"model": st.just(MODEL), "messages": _messages}, optional={"tools": _tools}
)


@fuzz_target(_chats, st.sampled_from([*TEMPLATES, "fallback"]))
def _render(templates: ChatTemplates, doc: dict[str, object], model: str) -> None:
    try:
        asked = parse_chat(parse_body(json.dumps(doc).encode()))
    except OpenAIError:
        return
    try:
        prompt = asyncio.run(templates.prompt(model, "", asked.messages, asked.tools.tools))
    except OpenAIError as exc:
        assert "chat template refused" in exc.message, exc.message
        return
    prompt.encode("utf-8")


test_chat_template_rendering, test_chat_template_rendering_long = _render
