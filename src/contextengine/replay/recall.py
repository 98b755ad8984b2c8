"""Recall evaluation: what survives compaction, measured without any model.

Two measurements, both after replaying a conversation into an engine at a
given context length (see :mod:`contextengine.replay.loop`); the *context*
is what the engine would send for one more request.

LoCoMo question files (:func:`eval_locomo`)
    Each dialog turn is one message, in order across sessions, so a turn's
    archive ``seq`` is its position: ``speaker_a`` speaks as ``user``,
    ``speaker_b`` as ``assistant``, and the content is
    ``"[<session date>] <Speaker>: <text>"`` (plus ``[shares a photo: <caption>]``),
    the same mapping as ``benchmarks/recall_locomo.py``. A question is
    answered *closed-book* when its gold answer, normalised (lower case, no
    punctuation, no articles), appears in the normalised context; *search*
    finds it when one ``lcm_grep`` with the question text returns one of its
    evidence turns within the top ``k`` (engines without that tool: never);
    it is *recoverable* when either holds. ``ceiling`` is the share of gold
    answers found verbatim in the whole conversation: no engine can do
    better closed-book. Category 5 (adversarial) has no gold answer and only
    counts for search.

Agent transcripts (:func:`eval_transcript`)
    The anchors (paths, URLs, hashes, ids, error lines, commands, numbers with
    units; see :mod:`contextengine.anchors`) of every message that left the
    context, except those still present in a message that stayed, are the
    questions, grouped by anchor kind. Closed-book: the anchor appears verbatim
    in the context, or listed in a folder group of a summary
    (:func:`~contextengine.identifiers.listed_identifiers`). Search: ``lcm_grep``
    on the words around the anchor in its source message returns a source
    message (or a snippet holding the anchor, highlight markers removed)
    within the top ``k``.

Every result carries the retained context tokens beside it, so engines are
compared at equal spend.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextengine.anchors import find_anchors
from contextengine.errors import FormatError
from contextengine.formats import Session
from contextengine.identifiers import listed_identifiers
from contextengine.replay.cost import message_fingerprint
from contextengine.replay.loop import DEFAULT_MODEL, Progress, Replayer
from contextengine.store.search import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN
from contextengine.summary_prompt import content_text
from contextengine.tokens import count_message_tokens

__all__ = [
    "LOCOMO_CATEGORIES",
    "QaConversation",
    "RecallResult",
    "Tally",
    "eval_locomo",
    "eval_transcript",
    "load_locomo",
    "normalize_answer",
]

Message = dict[str, Any]

LOCOMO_CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
_SESSION = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"D\d+:\d+")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCTUATION = str.maketrans({c: " " for c in string.punctuation})
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{2,}")
#: Words taken on each side of an anchor to search for it.
_CONTEXT_WORDS = 4
#: At most this many anchors per transcript are searched (the first ones, in order).
MAX_ANCHORS = 1_000


def normalize_answer(text: str) -> str:
    """Lower case, punctuation and articles removed, whitespace collapsed."""
    lowered = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", lowered).split())


def _message_text(message: Mapping[str, Any]) -> str:
    parts = [content_text(message.get("content"))]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, Mapping) else {}
        parts.append(f"{function.get('name', '')} {function.get('arguments', '')}")
    return "\n".join(p for p in parts if p)


def _category_name(value: Any) -> str:
    text = str(value)
    return LOCOMO_CATEGORIES.get(int(text), text) if text.isdigit() else text


def _contains(haystack: str, needle: str) -> bool:
    """Whole-word containment of normalised texts."""
    return bool(needle) and f" {needle} " in f" {haystack} "


# ---------------------------------------------------------------- tallies


@dataclass
class Tally:
    """Counts for one category; each share has its own denominator."""

    questions: int = 0
    #: Questions with a gold answer (closed-book denominator) and how many were answered.
    with_answer: int = 0
    closed_book: int = 0
    #: Gold answers present verbatim in the whole conversation.
    ceiling: int = 0
    #: Questions with evidence turns (search denominator) and how many search found.
    with_evidence: int = 0
    search: int = 0
    #: Closed-book or found by search, over all questions.
    recoverable: int = 0

    def add(self, other: Tally) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def shares(self) -> dict[str, float | None]:
        def share(hits: int, total: int) -> float | None:
            return round(hits / total, 4) if total else None

        return {
            "closed_book": share(self.closed_book, self.with_answer),
            "ceiling": share(self.ceiling, self.with_answer),
            "search": share(self.search, self.with_evidence),
            "recoverable": share(self.recoverable, self.questions),
        }


@dataclass
class RecallResult:
    """Recall of one engine over one file: tallies per category and the context kept."""

    engine: str
    source: str
    kind: str  # "qa" or "anchors"
    k: int
    context_length: int
    tallies: dict[str, Tally] = field(default_factory=dict)
    #: Tokens of the final context, one entry per conversation replayed.
    context_tokens: list[int] = field(default_factory=list)
    #: Tokens of each whole conversation, for scale.
    conversation_tokens: list[int] = field(default_factory=list)
    has_search: bool = False

    def tally(self, category: str) -> Tally:
        return self.tallies.setdefault(category, Tally())

    @property
    def overall(self) -> Tally:
        total = Tally()
        for name, tally in self.tallies.items():
            if name != LOCOMO_CATEGORIES[5]:
                total.add(tally)
        return total

    @property
    def mean_context_tokens(self) -> int:
        return (
            round(sum(self.context_tokens) / len(self.context_tokens)) if self.context_tokens else 0
        )

    def to_json(self) -> dict[str, Any]:
        """The figures as the ``eval recall --json`` document reports them."""
        categories = {
            name: {"questions": t.questions, **t.shares()}
            for name, t in sorted(self.tallies.items())
        }
        return {
            "engine": self.engine,
            "source": self.source,
            "kind": self.kind,
            "k": self.k,
            "context_length": self.context_length,
            "has_search": self.has_search,
            "context_tokens": self.mean_context_tokens,
            "conversation_tokens": (
                round(sum(self.conversation_tokens) / len(self.conversation_tokens))
                if self.conversation_tokens
                else 0
            ),
            "categories": categories,
            "overall": self._shares(self.overall),
        }

    def _shares(self, tally: Tally) -> dict[str, Any]:
        shares = tally.shares()
        if self.kind != "qa":
            shares["ceiling"] = None  # every anchor was in the transcript: no ceiling to report
        return {"questions": tally.questions, **shares}

    def rows(self) -> list[tuple[str, dict[str, Any]]]:
        """(category, figures) per category, then the overall row (categories 1-4 for LoCoMo)."""
        rows = [(name, self._shares(t)) for name, t in sorted(self.tallies.items())]
        rows.append(
            ("overall" + (" (1-4)" if self.kind == "qa" else ""), self._shares(self.overall))
        )
        return rows


def _has_grep(replayer: Replayer) -> bool:
    names = {(s.get("function") or s).get("name") for s in replayer.host.tool_schemas()}
    return "lcm_grep" in names


def _grep(replayer: Replayer, query: str, k: int) -> list[dict[str, Any]]:
    raw = replayer.host.handle_tool_call("lcm_grep", {"query": query, "limit": k})
    try:
        answer = json.loads(raw)
    except json.JSONDecodeError:
        return []
    results = answer.get("results") if isinstance(answer, dict) else None
    return [r for r in results or [] if isinstance(r, dict)][:k]


# ---------------------------------------------------------------- LoCoMo


@dataclass
class QaConversation:
    """One LoCoMo sample: its turns as messages, dia_id → seq, and its questions."""

    id: str
    messages: list[Message]
    seq_of: dict[str, int]
    questions: list[dict[str, Any]]


def load_locomo(path: str | Path) -> list[QaConversation]:
    """Read a LoCoMo-format QA file (a list of samples); FormatError names what is wrong."""
    file = Path(path)
    try:
        samples = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(str(file), "", "a LoCoMo JSON document", found=str(exc)) from exc
    if not isinstance(samples, list):
        samples = [samples]
    out = []
    for number, sample in enumerate(samples):
        where = f"record {number}"
        conv = sample.get("conversation") if isinstance(sample, dict) else None
        if not isinstance(conv, dict) or not isinstance(sample.get("qa"), list):
            raise FormatError(
                str(file), where, "a sample with 'conversation' and 'qa'", found=str(type(sample))
            )
        sessions = sorted(
            (int(m.group(1)), key) for key in conv if (m := _SESSION.match(key)) is not None
        )
        messages: list[Message] = []
        seq_of: dict[str, int] = {}
        for _n, key in sessions:
            date = conv.get(f"{key}_date_time", "")
            for turn in conv[key]:
                if not isinstance(turn, dict) or "speaker" not in turn or "text" not in turn:
                    raise FormatError(
                        str(file), f"{where} {key}", "turns with 'speaker' and 'text'"
                    )
                role = "user" if turn["speaker"] == conv.get("speaker_a") else "assistant"
                text = f"[{date}] {turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                if isinstance(turn.get("dia_id"), str):
                    seq_of[turn["dia_id"]] = len(messages)
                messages.append({"role": role, "content": text})
        sample_id = str(sample.get("sample_id", number))
        out.append(QaConversation(sample_id, messages, seq_of, list(sample["qa"])))
    return out


def eval_locomo(
    path: str | Path,
    *,
    engine: str,
    context_length: int,
    k: int = 5,
    model: str = DEFAULT_MODEL,
    options: Mapping[str, Any] | None = None,
    conversations: Sequence[QaConversation] | None = None,
    progress: Progress | None = None,
    on_conversation: Callable[[str], None] | None = None,
) -> RecallResult:
    """Replay each LoCoMo conversation into ``engine`` and score its questions.

    ``conversations`` may pass what :func:`load_locomo` read (to score several
    engines without parsing twice). ``on_conversation`` is called with each
    conversation's sample id as it starts, ``progress`` with 1 after each
    request replayed (``contextengine eval recall`` shows both).
    """
    samples = list(conversations) if conversations is not None else load_locomo(path)
    result = RecallResult(engine, str(path), "qa", k, context_length)
    for sample in samples:
        if on_conversation is not None:
            on_conversation(sample.id)
        with Replayer(
            sample.messages,
            engine=engine,
            context_length=context_length,
            model=model,
            options=options,
            session_id=f"locomo-{sample.id}",
        ) as replayer:
            replayer.run(progress)
            context = replayer.final_context()
            result.context_tokens.append(count_message_tokens(context, model))
            result.conversation_tokens.append(count_message_tokens(sample.messages, model))
            seen = normalize_answer(" \n ".join(_message_text(m) for m in context))
            whole = normalize_answer(" \n ".join(_message_text(m) for m in sample.messages))
            searchable = result.has_search = _has_grep(replayer)
            for qa in sample.questions:
                tally = result.tally(_category_name(qa.get("category")))
                tally.questions += 1
                answered = found = False
                answer = qa.get("answer")
                # An adversarial question's right answer is "not mentioned": no gold to look for.
                adversarial = tally is result.tallies.get(LOCOMO_CATEGORIES[5])
                gold = "" if answer is None or adversarial else normalize_answer(str(answer))
                if gold:
                    tally.with_answer += 1
                    answered = _contains(seen, gold)
                    tally.closed_book += answered
                    tally.ceiling += _contains(whole, gold)
                evidence = {
                    sample.seq_of[d]
                    for d in _DIA_ID.findall(" ".join(map(str, qa.get("evidence") or [])))
                    if d in sample.seq_of
                }
                if evidence:
                    tally.with_evidence += 1
                    if searchable:
                        hits = _grep(replayer, str(qa.get("question", "")), k)
                        found = any(h.get("seq") in evidence for h in hits)
                    tally.search += found
                tally.recoverable += answered or found
    return result


# ---------------------------------------------------------------- agent transcripts


def _plain(snippet: Any) -> str:
    """A search snippet without its highlight markers, which split a matched identifier."""
    return str(snippet or "").replace(HIGHLIGHT_OPEN, "").replace(HIGHLIGHT_CLOSE, "")


def _surrounding_words(text: str, start: int, value: str) -> str:
    before = _WORD.findall(text[max(0, start - 300) : start])[-_CONTEXT_WORDS:]
    after = _WORD.findall(text[start + len(value) : start + len(value) + 300])[:_CONTEXT_WORDS]
    return " ".join(before + after)


def eval_transcript(
    session: Session,
    *,
    engine: str,
    context_length: int,
    k: int = 5,
    model: str = DEFAULT_MODEL,
    options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> RecallResult:
    """Replay ``session`` and score the anchors of what left the context, by anchor kind.

    ``progress`` is called with 1 after each request replayed.
    """
    result = RecallResult(engine, session.source, "anchors", k, context_length)
    messages = session.messages
    with Replayer(
        messages,
        engine=engine,
        context_length=context_length,
        model=model,
        options=options,
        session_id=session.id,
    ) as replayer:
        replayer.run(progress)
        context = replayer.final_context()
        result.context_tokens.append(count_message_tokens(context, model))
        result.conversation_tokens.append(count_message_tokens(messages, model))
        searchable = result.has_search = _has_grep(replayer)
        in_view = {message_fingerprint(m) for m in context}
        context_text = "\n".join(_message_text(m) for m in context)
        # A summary lists paths sharing a folder as one group (src/pkg/{a.py,b.py}).
        listed = listed_identifiers(context_text)
        texts = [_message_text(m) for m in messages]
        left = [i for i, m in enumerate(messages) if message_fingerprint(m) not in in_view]
        stayed = set(range(len(messages))) - set(left)
        kept_anchors = {a.value for i in stayed for a in find_anchors(texts[i])}
        sources: dict[str, set[int]] = {}
        questions: list[tuple[str, str, str]] = []
        for index in left:
            for anchor in find_anchors(texts[index]):
                if anchor.value in kept_anchors:
                    continue
                if anchor.value not in sources:
                    sources[anchor.value] = set()
                    query = _surrounding_words(texts[index], anchor.start, anchor.value)
                    questions.append((anchor.kind, anchor.value, query))
                sources[anchor.value].add(index)
        for kind, value, query in questions[:MAX_ANCHORS]:
            tally = result.tally(kind)
            tally.questions += 1
            tally.with_answer += 1
            answered = value in context_text or value in listed
            tally.closed_book += answered
            found = False
            if query:
                tally.with_evidence += 1
                if searchable:
                    hits = _grep(replayer, query, k)
                    found = any(
                        h.get("seq") in sources[value] or value in _plain(h.get("snippet"))
                        for h in hits
                    )
                tally.search += found
            tally.recoverable += answered or found
    return result
