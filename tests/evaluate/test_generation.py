"""Generation of responses to instructions (pipeline/evaluate/generation.py): prompts as
instruction tuning renders them, batched left-padded generation equal to one prompt at a time,
seeded sampling, input order kept."""

import copy

import pytest

from pipeline.data.chat import encode_chats
from pipeline.data.task_items import ChatItem, Message
from pipeline.evaluate.generation import GenerationConfig, generate_responses, prompt_ids

INSTRUCTIONS = [
    "Call me Ishmael.",
    "Describe the whale in three words, and say why the sea matters to a sailor who has been away for years.",
    "What is a harpoon?",
    "Name the ship.",
    "Tell me about the white whale and the captain who hunts it across the oceans of the world.",
]


def test_prompt_is_what_instruction_tuning_renders_before_the_reply(tokenizer):
    for text in INSTRUCTIONS:
        item = ChatItem((Message("user", text), Message("assistant", "A reply.")))
        enc = encode_chats(tokenizer, [item], max_len=512)
        ids, scored = enc.ids[0].tolist(), enc.scored[0]
        first_target = int(scored.argmax())  # the first assistant token
        assert prompt_ids(tokenizer, text) == ids[:first_target]


def test_a_chat_template_renders_the_generation_prompt(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    assert tok.decode(prompt_ids(tok, "Call me Ishmael.")) == "[user] Call me Ishmael.\n[assistant] "


def test_batched_greedy_generation_equals_one_prompt_at_a_time(tiny_model, tokenizer):
    cfg = GenerationConfig(max_new_tokens=12, batch_size=4)
    batched = generate_responses(tiny_model, tokenizer, INSTRUCTIONS, cfg)
    single = generate_responses(
        tiny_model, tokenizer, INSTRUCTIONS, GenerationConfig(max_new_tokens=12, batch_size=1)
    )
    assert batched == single  # left padding and the attention mask change nothing
    assert all(0 < r["n_tokens"] <= 12 for r in batched) and tiny_model.training


def test_sampling_is_reproducible_from_its_seed(tiny_model, tokenizer):
    def run(seed):
        cfg = GenerationConfig(
            max_new_tokens=16, batch_size=2, do_sample=True, temperature=1.0, top_p=1.0, seed=seed
        )
        return [r["output"] for r in generate_responses(tiny_model, tokenizer, INSTRUCTIONS, cfg)]

    assert run(0) == run(0)
    assert run(0) != run(1)


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="max_new_tokens"):
        GenerationConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        GenerationConfig(do_sample=True, temperature=0.0)


def test_a_prompt_longer_than_the_context_keeps_its_end(tiny_model, tokenizer, caplog):
    long = " ".join(INSTRUCTIONS * 8)  # > 64 tokens: the fixture's context
    cfg = GenerationConfig(max_new_tokens=8, batch_size=2)
    rows = generate_responses(tiny_model, tokenizer, [long, INSTRUCTIONS[0]], cfg)
    assert len(rows) == 2 and "1 of 2 prompts longer than 56 tokens" in caplog.text
    with pytest.raises(ValueError, match="no room for a prompt"):
        generate_responses(tiny_model, tokenizer, INSTRUCTIONS, GenerationConfig(max_new_tokens=64))
