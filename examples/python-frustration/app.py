"""frustration: a metaclaw scorer written in Python.

It reads what the user said *after* a turn. A correction or a sign of
frustration ("no, that's wrong", "that didn't work", "I already told
you", "stop") means the answer missed: a negative reward. Plain thanks or
approval ("perfect, thanks") is a small positive one. Anything else, or no
next message yet: no opinion.

Built with componentize-py (see docs/plugins.md):
    componentize-py -d wit -w scorer componentize -p examples/python-frustration app -o frustration.wasm
"""

import re
from typing import List, Optional, Tuple

from wit_world import exports
from wit_world.imports import log, types

NAME = "frustration"
VERSION = "0.1.0"

# (pattern, label, reward). Checked in order; the first match wins.
RULES: List[Tuple[re.Pattern, str, float]] = [
    (re.compile(p, re.IGNORECASE), label, value)
    for p, label, value in [
        (r"\b(that('?s| is)|this is|it('?s| is)|you('?re| are)) (wrong|incorrect|not (right|correct|true|what i (asked|wanted|meant)))", "correction", -0.8),
        (r"\b(didn'?t|doesn'?t|does not|did not|still (doesn'?t|does not)) work", "did-not-work", -0.8),
        (r"\bi (already|just) (said|told you|asked)", "repeated-instruction", -0.9),
        (r"\b(no|nope),? (that|this|i said|i meant|not)", "correction", -0.7),
        (r"\b(why (did|would) you|what are you doing|stop (doing|it|that)|i didn'?t ask)", "frustration", -0.9),
        (r"\b(wtf|ugh|useless|this is ridiculous)\b", "frustration", -1.0),
        (r"\b(try again|redo|undo|revert)( it| that| this)?\b", "redo", -0.5),
        (r"^\s*(thanks|thank you|perfect|great|exactly|works( now)?|that worked|nice)\b", "approval", 0.4),
    ]
]


def judge(next_message: str) -> Optional[types.Reward]:
    text = next_message.strip()
    # OpenClaw prefixes user text with a timestamp: "[Sun 2026-11-22 08:43 UTC] ..."
    text = re.sub(r"^\[[^\]]{8,40}\]\s*", "", text)
    for pattern, label, value in RULES:
        match = pattern.search(text)
        if match:
            quote = text[max(0, match.start() - 20): match.end() + 40].strip()
            return types.Reward(value=value, label=label, rationale=f'the user replied: "{quote}"')
    return None


class Plugin(exports.Plugin):
    def metadata(self) -> types.PluginMetadata:
        return types.PluginMetadata(
            name=NAME,
            version=VERSION,
            kind=types.PluginKind.SCORER,
            description="Negative reward when the user's next message corrects the answer or shows frustration",
            capabilities=[],
        )


class ScorerApi(exports.ScorerApi):
    def score(self, turn: types.FinishedTurn) -> Optional[types.Reward]:
        # An uncaught exception would trap the call: answer "no opinion".
        try:
            if not turn.next_user_message:
                return None
            return judge(turn.next_user_message)
        except Exception as error:  # noqa: BLE001
            log.log(types.LogLevel.WARN, f"{NAME}: {error!r}")
            return None
