import uuid

import pytest

from idemclient import key_from_identity, new_key
from idemclient.errors import InvalidKey
from idemclient.keys import DEFAULT_NAMESPACE, derive_key, validate_key


def test_new_keys_are_uuid7_and_unique() -> None:
    keys = {new_key() for _ in range(1000)}
    assert len(keys) == 1000
    for key in keys:
        assert uuid.UUID(key).version == 7
        assert validate_key(key) == key


def test_new_keys_sort_by_creation_time() -> None:
    first, second = new_key(), new_key()
    assert uuid.UUID(first).bytes[:6] <= uuid.UUID(second).bytes[:6]


def test_new_keys_are_rfc_9562_and_sort_in_the_order_made() -> None:
    keys = [new_key() for _ in range(2000)]  # many within one millisecond
    assert keys == sorted(keys)
    for key in keys:
        parsed = uuid.UUID(key)
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == key  # lowercase, hyphenated as a UUID prints


def test_identity_keys_are_deterministic_uuid5() -> None:
    key = key_from_identity("batch-7", "row-12", "payout", "2026-11-30")
    assert key == key_from_identity("batch-7", "row-12", "payout", "2026-11-30")
    assert uuid.UUID(key).version == 5
    # Pinned: changing the namespace or the joining would give every resubmitted file
    # new keys, and a second payment per row.
    assert key == str(uuid.uuid5(DEFAULT_NAMESPACE, "batch-7\x1frow-12\x1fpayout\x1f2026-11-30"))


def test_identity_parts_are_joined_unambiguously() -> None:
    assert key_from_identity("a:b", "c") != key_from_identity("a", "b:c")
    assert key_from_identity("ab", "c") != key_from_identity("a", "bc")


def test_identity_namespace_can_be_overridden() -> None:
    other = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert key_from_identity("x", namespace=other) != key_from_identity("x")


@pytest.mark.parametrize("parts", [(), ("",), ("ok", ""), ("bad\x1fpart",)])
def test_identity_rejects_empty_or_ambiguous_parts(parts: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match=r"identity|part"):
        key_from_identity(*parts)


def test_derived_keys_are_stable_and_distinct_per_step() -> None:
    parent = new_key()
    assert derive_key(parent, "ext1") == derive_key(parent, "ext1")
    assert derive_key(parent, "ext1") != derive_key(parent, "ext2")
    assert derive_key(parent, "ext1") != derive_key(new_key(), "ext1")
    validate_key(derive_key(parent, "ext1"))


def test_derive_key_validates_its_inputs() -> None:
    with pytest.raises(InvalidKey):
        derive_key("", "ext1")
    with pytest.raises(ValueError, match="step"):
        derive_key("parent", "")


@pytest.mark.parametrize(
    "key",
    [
        "a",  # shortest
        "x" * 255,  # longest
        "order-123_A.b:c~d",  # every punctuation allowed
        "01931f6e-8c4a-7b1e-9f00-000000000001",  # a UUID
    ],
)
def test_valid_keys(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "empty"),
        ("x" * 256, "256 characters"),
        ("has space", "' '"),
        ("caf\u00e9", "'\u00e9'"),  # non-ASCII
        ("tab\there", "'\\t'"),  # control character
        ("1'; DROP TABLE keys;--", '"\'"'),  # SQL fragment
        ('"quoted"', "'\"'"),  # a structured-field string is not a bare key
        ("a/b", "'/'"),
        (123, "string"),
        (None, "string"),
    ],
)
def test_invalid_keys_name_what_is_wrong(key: object, reason: str) -> None:
    with pytest.raises(InvalidKey) as caught:
        validate_key(key)
    assert reason in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_new_keys_are_uuid7_made_now_and_sort_in_the_order_made() -> None:
    import time

    before = time.time_ns() // 1_000_000
    made = [new_key() for _ in range(500)]
    after = time.time_ns() // 1_000_000
    keys = [uuid.UUID(key) for key in made]
    assert all(key.version == 7 and key.variant == uuid.RFC_4122 for key in keys)
    # Unix milliseconds; keys made within one millisecond take the next ones, so the
    # thousands made by the tests before may have run ahead of the clock by seconds.
    assert all(before <= key.int >> 80 <= after + 600_000 for key in keys)
    # time-ordered for the server's index: a process's keys sort as it made them
    assert made == sorted(made)
    assert len(set(made)) == len(made)
