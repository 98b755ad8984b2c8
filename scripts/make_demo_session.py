"""Regenerate ``src/contextengine/data/demo_session.json``, the session ``contextengine demo`` replays.

The session is written for this project: a coding agent fixing and extending a
small invoicing library. It is built by this script rather than typed by hand
so the large tool outputs (file listings, source files, test runs) stay
realistic and consistent, and deterministic so the file only changes when this
script does. Run: ``python scripts/make_demo_session.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "src" / "contextengine" / "data" / "demo_session.json"

SYSTEM = (
    "You are a careful coding agent working in the repository /home/dev/invoicely. "
    "Use the bash tool to inspect and change files. Run the tests before you say a change is done."
)

_call_counter = 0


def call(command: str) -> dict[str, Any]:
    global _call_counter
    _call_counter += 1
    return {
        "id": f"call_{_call_counter:03d}",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
    }


def tool_turn(text: str, commands_and_outputs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    calls = [call(cmd) for cmd, _ in commands_and_outputs]
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": text or None, "tool_calls": calls}
    ]
    for c, (_, output) in zip(calls, commands_and_outputs, strict=True):
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": output})
    return messages


def source_file(module: str, functions: int) -> str:
    lines = [f'"""{module}: part of invoicely."""', "", "from decimal import Decimal", ""]
    for i in range(functions):
        lines += [
            f"def {module}_rule_{i}(amount: Decimal, rate: Decimal = Decimal('0.{i % 9 + 1}')) -> Decimal:",
            f'    """Apply {module} rule {i} to an invoice line."""',
            "    if amount < 0:",
            f"        raise ValueError('negative amount in {module}_rule_{i}')",
            "    return (amount * rate).quantize(Decimal('0.01'))",
            "",
        ]
    return "\n".join(lines)


def pytest_output(failed: list[str], passed: int) -> str:
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
        "rootdir: /home/dev/invoicely",
        f"collected {passed + len(failed)} items",
        "",
    ]
    for i in range(0, passed, 40):
        lines.append("tests/test_rules.py " + "." * min(40, passed - i))
    for name in failed:
        lines += [
            "",
            f"___________________________ {name} ___________________________",
            "",
            "    def test_vat_rounding():",
            "        line = InvoiceLine(amount=Decimal('19.995'), vat_rate=Decimal('0.20'))",
            ">       assert line.vat == Decimal('4.00')",
            "E       AssertionError: assert Decimal('3.99') == Decimal('4.00')",
            "",
            "tests/test_tax.py:41: AssertionError",
        ]
    summary = (
        f"{len(failed)} failed, {passed} passed in 2.31s" if failed else f"{passed} passed in 2.07s"
    )
    lines += [
        "",
        "=========================== short test summary info ============================",
    ]
    lines += [f"FAILED tests/test_tax.py::{name} - AssertionError" for name in failed]
    lines.append(f"=================== {summary} ===================")
    return "\n".join(lines)


def build() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    msgs.append(
        {
            "role": "user",
            "content": (
                "Issue #482: VAT on invoice lines is rounded down instead of half-up, so customers are "
                "billed 3.99 instead of 4.00. Please fix it. Constraints: keep Python 3.9 compatibility, "
                "no new dependencies, and do not touch the public API of invoicely.models. FYI the "
                "staging database listens on port 6543 and the deploy key lives in vault path "
                "secret/invoicely/deploy."
            ),
        }
    )
    msgs += tool_turn(
        "Let me look at the repository layout first.",
        [
            (
                "ls -R src tests | head -80",
                "\n".join(
                    [
                        "src:",
                        "invoicely",
                        "",
                        "src/invoicely:",
                        "__init__.py",
                        "cli.py",
                        "export.py",
                        "models.py",
                        "rules",
                        "tax.py",
                        "",
                        "src/invoicely/rules:",
                    ]
                    + [f"rule_{i:02d}.py" for i in range(40)]
                    + [
                        "",
                        "tests:",
                        "conftest.py",
                        "test_cli.py",
                        "test_export.py",
                        "test_models.py",
                        "test_rules.py",
                        "test_tax.py",
                    ]
                ),
            ),
            (
                "git log --oneline -5",
                "9f2c1e7 Merge pull request #479 from dev/currency-codes\n"
                "3b8d0aa Add ISO 4217 currency validation\n51e6f2d Bump version to 2.3.1\n"
                "c04a9b2 Fix CSV header order (#470)\n7d1e3f9 Initial import",
            ),
        ],
    )
    msgs += tool_turn(
        "Now the tax module and the failing test run.",
        [
            (
                "cat src/invoicely/tax.py",
                source_file("tax", 45) + "\n\ndef vat(amount, rate):\n"
                "    return (amount * rate).quantize(Decimal('0.01'), rounding=ROUND_DOWN)\n",
            ),
            ("python -m pytest -q", pytest_output(["test_vat_rounding"], 212)),
        ],
    )
    msgs.append(
        {
            "role": "assistant",
            "content": (
                "The bug is in `vat()` in src/invoicely/tax.py: it quantizes with ROUND_DOWN. Decimal "
                "rounding for money should be ROUND_HALF_UP here. I will change that one line."
            ),
        }
    )
    msgs += tool_turn(
        "",
        [
            (
                "sed -i 's/ROUND_DOWN/ROUND_HALF_UP/' src/invoicely/tax.py && git diff --stat",
                " src/invoicely/tax.py | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)",
            ),
            ("python -m pytest -q", pytest_output([], 213)),
        ],
    )
    msgs.append(
        {
            "role": "assistant",
            "content": "Fixed: all 213 tests pass. The change is one line in src/invoicely/tax.py.",
        }
    )
    msgs.append(
        {
            "role": "user",
            "content": (
                "Great. Next: add a CSV export of unpaid invoices to src/invoicely/export.py, columns "
                "invoice_id, customer, due_date, amount_due. Dates in ISO 8601."
            ),
        }
    )
    msgs += tool_turn(
        "Reading the current export module and the models.",
        [
            ("cat src/invoicely/export.py", source_file("export", 30)),
            ("cat src/invoicely/models.py", source_file("models", 35)),
        ],
    )
    msgs += tool_turn(
        "Adding `export_unpaid_csv()` and a test, then running the suite.",
        [
            (
                "python - <<'EOF'\n# (edit applied with a patch script)\nEOF\ngit diff --stat",
                " src/invoicely/export.py | 38 ++++++++++++++++++++++++++\n tests/test_export.py    | 24 ++++++++++++++++\n 2 files changed, 62 insertions(+)",
            ),
            (
                "python -m pytest -q tests/test_export.py",
                "........                                                                 [100%]\n8 passed in 0.41s",
            ),
        ],
    )
    msgs.append(
        {
            "role": "assistant",
            "content": "CSV export added with a test; tests/test_export.py passes (8 passed).",
        }
    )
    msgs.append(
        {
            "role": "user",
            "content": "Run the linter too, we use ruff with the config in pyproject.toml.",
        }
    )
    lint = (
        "\n".join(
            f"src/invoicely/rules/rule_{i:02d}.py:{10 + i}:5: E501 Line too long ({101 + i} > 100)"
            for i in range(60)
        )
        + "\nFound 60 errors.\nNo fixes available (60 hidden fixes can be enabled with the `--unsafe-fixes` option)."
    )
    msgs += tool_turn("", [("ruff check src tests", lint)])
    msgs.append(
        {
            "role": "assistant",
            "content": (
                "ruff reports 60 E501 errors, all in src/invoicely/rules/ and all pre-existing (none in files I touched). "
                "Shall I reformat the rules package, or leave it for a separate PR?"
            ),
        }
    )
    msgs.append(
        {
            "role": "user",
            "content": "Leave the rules alone for now. Open a draft PR for the VAT fix and the CSV export, title 'Fix VAT rounding (#482) and add unpaid CSV export'.",
        }
    )
    msgs += tool_turn(
        "",
        [
            (
                "git checkout -b fix/vat-rounding-482 && git commit -am 'Fix VAT rounding (#482) and add unpaid CSV export'",
                "Switched to a new branch 'fix/vat-rounding-482'\n[fix/vat-rounding-482 a41c9e2] Fix VAT rounding (#482) and add unpaid CSV export\n 3 files changed, 63 insertions(+), 1 deletion(-)",
            ),
            (
                "gh pr create --draft --title 'Fix VAT rounding (#482) and add unpaid CSV export' --body 'Fixes #482'",
                "https://github.example.com/acme/invoicely/pull/488",
            ),
        ],
    )
    msgs.append(
        {
            "role": "assistant",
            "content": "Draft PR #488 is open: https://github.example.com/acme/invoicely/pull/488 (branch fix/vat-rounding-482, commit a41c9e2).",
        }
    )
    # A long tail of further work, each with sizeable tool output, so the context keeps growing.
    topics = [
        (
            "The CI run on PR #488 failed on Python 3.9. Can you check why?",
            "python3.9 -m pytest -q tests/test_export.py",
            "E   TypeError: unsupported operand type(s) for |: 'type' and 'NoneType'\n"
            "src/invoicely/export.py:12: in <module>\n    def export_unpaid_csv(path: str | None = None) -> str:\n"
            + "\n".join(f"  line {i}: collected context" for i in range(120)),
            "The new signature uses `str | None`, which Python 3.9 cannot evaluate. I will use Optional[str] instead.",
        ),
        (
            "Also make the CSV delimiter configurable, default comma.",
            "python -m pytest -q",
            pytest_output([], 215),
            "Delimiter is now a keyword argument `delimiter=','`; 215 tests pass.",
        ),
        (
            "What is the performance of exporting 100k invoices?",
            "python -m timeit -s 'from bench import make' 'make(100_000)'",
            "\n".join(
                f"run {i}: 1 loop, best of 5: {812 + i % 7} msec per loop" for i in range(80)
            ),
            "Exporting 100k invoices takes about 0.81 s (best of 5), dominated by Decimal formatting.",
        ),
        (
            "Update the CHANGELOG for 2.4.0 with both changes.",
            "cat CHANGELOG.md",
            "# Changelog\n\n"
            + "\n".join(
                f"## 2.{3 - i // 10}.{9 - i % 10}\n- maintenance release {i}\n" for i in range(60)
            ),
            "Added a 2.4.0 section: 'Fixed VAT rounding to half-up (#482)' and 'Added CSV export of unpaid invoices'.",
        ),
        (
            "Double-check the docs build still works.",
            "make -C docs html",
            "\n".join(
                f"reading sources... [{p:3d}%] api/invoicely.rules.rule_{p % 40:02d}"
                for p in range(0, 100, 1)
            )
            + "\nbuild succeeded, 2 warnings.\nWARNING: undefined label: vat-rounding\nWARNING: duplicate object description of invoicely.export",
            "The docs build succeeds with 2 warnings: an undefined label `vat-rounding` and a duplicate description of invoicely.export.",
        ),
        (
            "Fix those two docs warnings.",
            "make -C docs html 2>&1 | tail -3",
            "build succeeded.\n\nThe HTML pages are in _build/html.",
            "Both warnings are fixed; the docs build is clean.",
        ),
        (
            "Push everything and mark the PR ready for review.",
            "git push -u origin fix/vat-rounding-482 && gh pr ready 488",
            "To github.example.com:acme/invoicely.git\n * [new branch]      fix/vat-rounding-482 -> fix/vat-rounding-482\n"
            + "\n".join(f"remote: Resolving deltas: {p}% ({p}/100)" for p in range(0, 101, 2))
            + '\n✓ Pull request #488 is marked as "ready for review"',
            "Pushed; PR #488 is ready for review.",
        ),
    ]
    for request, command, output, answer in topics:
        msgs.append({"role": "user", "content": request})
        msgs += tool_turn("", [(command, output)])
        msgs.append({"role": "assistant", "content": answer})
    msgs.append(
        {
            "role": "user",
            "content": (
                "Last thing: write the release notes for the staging deploy. Which port does the staging "
                "database use again?"
            ),
        }
    )
    return msgs


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
