"""validate_topic_name against Kafka's org.apache.kafka.common.internals.Topic.validate."""
from __future__ import annotations

import string

import pytest

from coordination.admin import MAX_TOPIC_NAME_LENGTH, validate_topic_name
from coordination.errors import Errors, InvalidTopicException

ILLEGAL_CHARS_MSG = "Topic name \"{}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"


def _message(topic: str) -> str:
    with pytest.raises(InvalidTopicException) as e:
        validate_topic_name(topic)
    assert e.value.error == Errors.INVALID_TOPIC_EXCEPTION
    assert str(e.value) == f"InvalidTopicException: {e.value.args[0]}"
    return e.value.args[0]


def test_max_length_constant():
    assert MAX_TOPIC_NAME_LENGTH == 249


@pytest.mark.parametrize("topic", [
    "a", "A", "0", "topic", "my-topic", "my_topic", "my.topic", "__consumer_offsets", "...", ".a", "-",
    "_", "a..b", "Topic-1.2_3", string.ascii_letters + string.digits + "._-",
])
def test_legal_names(topic):
    assert validate_topic_name(topic) is None


def test_every_legal_character_alone():
    for c in string.ascii_letters + string.digits + "_-":
        validate_topic_name(c)
    validate_topic_name("x.")  # "." alone is the reserved name, not an illegal character


def test_length_249_is_legal():
    validate_topic_name("a" * 249)
    validate_topic_name("." * 249)


def test_length_250_is_illegal():
    topic = "a" * 250
    assert _message(topic) == (
        "Topic name is illegal, it can't be longer than 249 characters, topic name: " + topic
    )


def test_long_name_with_illegal_chars_reports_length_first():
    topic = "!" * 300
    assert _message(topic).startswith("Topic name is illegal, it can't be longer than 249 characters")


def test_empty():
    assert _message("") == "Topic name is illegal, it can't be empty"


@pytest.mark.parametrize("topic", [".", ".."])
def test_dot_and_dot_dot(topic):
    assert _message(topic) == 'Topic name cannot be "." or ".."'


@pytest.mark.parametrize("topic", [
    "a b", " ", "topic!", "a/b", "a\\b", "a:b", "a,b", "a*", "tópico", "tab\t", "new\nline", "a\x00b",
    "日本", "a+b", "a#b", "a@b", "a$", "a=b", "\u00a0", "ａ",  # full-width a
    "a\n",  # a trailing newline must not slip past a regex anchored with $
])
def test_illegal_characters(topic):
    assert _message(topic) == ILLEGAL_CHARS_MSG.format(topic)


def test_every_printable_ascii_outside_the_legal_set_is_rejected():
    legal = set(string.ascii_letters + string.digits + "._-")
    for code in range(0x20, 0x7F):
        c = chr(code)
        if c in legal:
            continue
        assert _message("ok" + c) == ILLEGAL_CHARS_MSG.format("ok" + c)
