"""SeenHistory: what an adapter's host saw of the framework's conversation, and branches."""

from __future__ import annotations

from contextengine.integrations._tracking import SeenHistory


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


SYSTEM = {"role": "system", "content": "Be brief."}


def test_appended_messages_join_the_host_history() -> None:
    seen = SeenHistory("t")
    first = seen.step([], SYSTEM, [_user("a")])
    assert first.working == [SYSTEM, _user("a")] and first.restart is None
    compacted = [SYSTEM, {"role": "user", "content": "[summary of a]"}]
    second = seen.step(compacted, SYSTEM, [_user("a"), _user("b")])
    assert second.added == [_user("b")]
    assert second.working == [*compacted, _user("b")]
    assert second.working[0] is compacted[0]  # the host recognises its history by identity


def test_a_changed_system_prompt_replaces_the_host_s_and_is_no_branch() -> None:
    seen = SeenHistory("t")
    seen.step([], SYSTEM, [_user("a")])
    other = {"role": "system", "content": "Be thorough."}
    step = seen.step([SYSTEM, _user("a")], other, [_user("a"), _user("b")])
    assert step.restart is None
    assert step.working == [other, _user("a"), _user("b")]


def test_messages_that_no_longer_extend_the_last_call_are_a_branch() -> None:
    seen = SeenHistory("t")
    seen.step([], None, [_user("a"), _user("b")])
    step = seen.step([_user("a"), _user("b")], None, [_user("a"), _user("c")])
    assert step.restart == "t~1"
    assert step.working == [_user("a"), _user("c")]
    assert seen.step([], None, [_user("x")]).restart == "t~2"
