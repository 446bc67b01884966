"""Import ScaleEval's recorded agent debates (Chern et al. 2024; data from GAIR-NLP/scaleeval).

Layout of PATH (the scaleeval folder; its results/ folder is accepted as well):
  results/<a>_vs_<b>/<criterion>/multiagent_score/<scenario>.jsonl  a JSON array (despite the name)
      of debates: id, Question, Submission 1, Submission 2, and per speaker and round
      "Speaker N - Initial Evaluation" / "Speaker N - Discussion Round R" = {reasoning, score}
  responses/<system>/<scenario>.jsonl  one {prompt, category, response} per line

What the records mean, as the upstream code that produced them shows:
- The two submissions were put in a random order per debate, so "Submission 1" is system a's
  answer in about half the debates only. Who wrote which is found by matching the texts against
  responses/ (whitespace-insensitive); without a match the systems stay unknown ("").
- The three agents (gpt-4-turbo, claude-2, gpt-3.5-turbo) were rotated over the speaker places per
  debate, so "Speaker 1" is not one model. claude-2 (Anthropic's completion API) starts every reply
  with a space and the OpenAI models never do; in every recorded debate exactly one speaker does,
  which fixes the rotation and so all three names. Where that sign is missing or not unique the
  agents stay unknown ("").
- The score is the last number found in the reply, read by the upstream code; when Anthropic's reply
  held no number at all it recorded 0. Scores other than 1, 2, 0, missing scores and those default
  zeros are imported as unparseable, with the reason; the score as written is kept in
  recorded_score.
- Discussion went on while the recorded scores of a round differed, up to two discussion rounds.
  A debate is a disagreement when its last round's verdicts are not all read and equal; those go to
  the expert queue.

Each results file is imported in one transaction: a malformed file imports nothing, and the
error names the file and what is wrong. Debates already imported (same key) are skipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction

from lib.debate import CRITERIA, consensus

from .models import Debate, DebateTurn, QueueItem

SOURCE = Debate.Source.SCALEEVAL
# The upstream configuration's speaker1..3, before its per-debate rotation.
AGENTS = ("gpt-4-turbo", "claude-2", "gpt-3.5-turbo")
SPACE_LED_AGENT = AGENTS.index("claude-2")
# Pair-folder names -> (the system's name here, its folder under responses/).
SYSTEMS = {
    "gpt3.5": ("gpt-3.5-turbo", "gpt3.5"),
    "claude": ("claude-instant", "claude-instant"),
    "gemini": ("gemini-pro", "gemini"),
}
SCENARIOS = {"opendomain_general": "open-domain general", "opendomain_science": "open-domain science",
             "write": "writing", "code": "coding"}

_TURN_KEY = re.compile(r"^Speaker (?P<speaker>[1-9]\d*) - (?:Initial Evaluation|Discussion Round (?P<round>[1-9]\d*))$")
_FIXED_KEYS = ("id", "Question", "Submission 1", "Submission 2")


class ScaleEvalError(ValueError):
    """PATH or one of its files is not what the importer reads; the message says where and what."""


@dataclass
class RecordedTurn:
    speaker: int
    round: int
    reasoning: str
    recorded_score: str
    verdict: int | None
    unparseable: str
    agent: str = ""


@dataclass
class RecordedDebate:
    key: str
    criterion: str
    scenario: str
    question: str
    submission_1: str
    submission_2: str
    system_1: str
    system_2: str
    turns: list[RecordedTurn]
    rounds: int
    consensus: int | None


@dataclass
class FileReport:
    path: str  # relative to PATH
    debates: int = 0
    imported: int = 0
    skipped: int = 0
    queued: int = 0
    unparseable_turns: int = 0
    systems_unknown: int = 0
    agents_unknown: int = 0
    error: str = ""


@dataclass
class ImportReport:
    files: list[FileReport] = field(default_factory=list)

    def total(self, name: str) -> int:
        return sum(getattr(f, name) for f in self.files)

    @property
    def failed(self) -> list[FileReport]:
        return [f for f in self.files if f.error]

    def summary(self) -> dict:
        return {"imported": self.total("imported"), "queued": self.total("queued"), "skipped": self.total("skipped"),
                "debates": self.total("debates"), "files": len(self.files), "failed_files": len(self.failed),
                "unparseable_turns": self.total("unparseable_turns")}


RESULTS_PATTERN = "*/*/multiagent_score/*.jsonl"


def data_root(path: Path) -> Path:
    """The scaleeval folder, given it or its results/ folder itself (what a user is as likely to give)."""
    path = Path(path)
    if not path.is_dir():
        raise ScaleEvalError(f"{path} is not a folder: PATH must be the scaleeval folder (with results/) "
                             "or its results/ folder")
    if path.name == "results" and not (path / "results").is_dir() and next(path.glob(RESULTS_PATTERN), None):
        return path.parent
    return path


def results_files(root: Path) -> list[Path]:
    files = sorted((root / "results").glob(RESULTS_PATTERN))
    if not files:
        raise ScaleEvalError(f"no debates under {root}: give the scaleeval folder (with results/) or its "
                             "results/ folder, holding <a>_vs_<b>/<criterion>/multiagent_score/<scenario>.jsonl")
    return files


def import_scaleeval(path: Path) -> ImportReport:
    """Import every results file under PATH (the scaleeval folder or its results/ folder); a bad file is
    reported in its FileReport, never half-imported."""
    root = data_root(path)
    files = results_files(root)
    responses = Responses(root / "responses")
    report = ImportReport()
    for path in files:
        rel = path.relative_to(root).as_posix()
        file_report = FileReport(rel)
        report.files.append(file_report)
        try:
            debates = read_results_file(path, root, responses)
            _save(debates, file_report)
        except ScaleEvalError as exc:
            file_report.error = str(exc)
    return report


def _save(debates: list[RecordedDebate], report: FileReport) -> None:
    report.debates = len(debates)
    report.unparseable_turns = sum(1 for d in debates for t in d.turns if t.verdict is None)
    report.systems_unknown = sum(1 for d in debates if not d.system_1)
    report.agents_unknown = sum(1 for d in debates if not d.turns[0].agent)
    with transaction.atomic():
        existing = set(Debate.objects.filter(key__in=[d.key for d in debates]).values_list("key", flat=True))
        turns = []
        for recorded in debates:
            if recorded.key in existing:
                report.skipped += 1
                continue
            debate = Debate.objects.create(
                source=SOURCE, key=recorded.key, scenario=SCENARIOS.get(recorded.scenario, recorded.scenario),
                criterion=recorded.criterion, criterion_description=CRITERIA.get(recorded.criterion, ""),
                question=recorded.question, submission_1=recorded.submission_1, submission_2=recorded.submission_2,
                system_1=recorded.system_1, system_2=recorded.system_2, consensus=recorded.consensus,
                rounds=recorded.rounds)
            turns += [DebateTurn(debate=debate, round=t.round, speaker=t.speaker, agent=t.agent, reasoning=t.reasoning,
                                 verdict=t.verdict, unparseable=t.unparseable, recorded_score=t.recorded_score)
                      for t in recorded.turns]
            report.imported += 1
            if recorded.consensus is None:
                QueueItem.objects.create(debate=debate)
                report.queued += 1
        DebateTurn.objects.bulk_create(turns, batch_size=500)


# --- reading one results file -----------------------------------------------------------------

def debate_key(pair: str, criterion: str, scenario: str, debate_id: int) -> str:
    key = f"scaleeval:{pair}/{criterion}/{scenario}/{debate_id}"
    if len(key) > Debate._meta.get_field("key").max_length:
        raise ScaleEvalError(f"the folder names make the debate key longer than the limit: {key[:80]}...")
    return key


def system_names(pair: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """((name, responses folder), ...) of the two systems a pair folder compares."""
    match = re.fullmatch(r"(.+)_vs_(.+)", pair)
    if not match:
        raise ScaleEvalError(f"the pair folder {pair!r} is not named <system>_vs_<system>")
    first, second = (SYSTEMS.get(token, (token, token)) for token in match.groups())
    return first, second


def read_results_file(path: Path, root: Path, responses: Responses) -> list[RecordedDebate]:
    """Every debate of one results file, checked whole; ScaleEvalError names the file and the fault."""
    rel = path.relative_to(root).as_posix()
    pair, criterion, _, name = path.relative_to(root / "results").parts
    scenario = Path(name).stem
    try:
        (system_a, folder_a), (system_b, folder_b) = system_names(pair)
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ScaleEvalError(f"not valid JSON ({exc})") from None
        if not isinstance(items, list):
            raise ScaleEvalError(f"expected a JSON array of debates, found {type(items).__name__}")
        if not items:
            raise ScaleEvalError("the array holds no debates")
        debates, seen = [], set()
        for index, item in enumerate(items):
            where = f"debate #{index + 1}"
            if isinstance(item, dict) and isinstance(item.get("id"), int) and not isinstance(item["id"], bool):
                where += f" (id {item['id']})"
                if item["id"] in seen:
                    raise ScaleEvalError(f"{where}: the id appears twice")
                seen.add(item["id"])
            try:
                recorded = _read_debate(item, pair, criterion, scenario)
            except ScaleEvalError as exc:
                raise ScaleEvalError(f"{where}: {exc}") from None
            recorded.system_1, recorded.system_2 = responses.attribute(
                scenario, recorded.question, recorded.submission_1, recorded.submission_2,
                (system_a, folder_a), (system_b, folder_b))
            debates.append(recorded)
        return debates
    except ScaleEvalError as exc:
        raise ScaleEvalError(f"{rel}: {exc}") from None


def _read_debate(item, pair: str, criterion: str, scenario: str) -> RecordedDebate:
    if not isinstance(item, dict):
        raise ScaleEvalError(f"expected an object, found {type(item).__name__}")
    if not isinstance(item.get("id"), int) or isinstance(item.get("id"), bool):
        raise ScaleEvalError(f"'id' must be a whole number, found {item.get('id')!r}")
    for name in _FIXED_KEYS[1:]:
        if not isinstance(item.get(name), str) or not item[name].strip():
            raise ScaleEvalError(f"{name!r} must be non-empty text")
    grid: dict[tuple[int, int], RecordedTurn] = {}
    for name, value in item.items():
        if name in _FIXED_KEYS:
            continue
        match = _TURN_KEY.match(name)
        if not match:
            raise ScaleEvalError(f"unexpected key {name!r}")
        speaker, round_ = int(match["speaker"]), int(match["round"] or 0)
        grid[(round_, speaker)] = _read_turn(value, speaker, round_, name)
    if not grid:
        raise ScaleEvalError("no 'Speaker N - Initial Evaluation' entries")
    speakers = sorted({s for _, s in grid})
    rounds = sorted({r for r, _ in grid})
    if speakers != list(range(1, len(speakers) + 1)) or len(speakers) < 2:
        raise ScaleEvalError(f"speakers must be numbered 1..m with m >= 2, found {speakers}")
    if rounds != list(range(len(rounds))):
        raise ScaleEvalError(f"rounds must run from the initial evaluation without gaps, found {rounds}")
    for r in rounds:
        missing = [s for s in speakers if (r, s) not in grid]
        if missing:
            label = "Initial Evaluation" if r == 0 else f"Discussion Round {r}"
            raise ScaleEvalError(f"'{label}' is missing for speaker(s) {missing}")
    turns = [grid[(r, s)] for r in rounds for s in speakers]
    agents = infer_agents({s: [t.reasoning for t in turns if t.speaker == s] for s in speakers})
    for t in turns:
        t.agent = agents.get(t.speaker, "")
    last = [t.verdict for t in turns if t.round == rounds[-1]]
    return RecordedDebate(key=debate_key(pair, criterion, scenario, item["id"]), criterion=criterion,
                          scenario=scenario, question=item["Question"], submission_1=item["Submission 1"],
                          submission_2=item["Submission 2"], system_1="", system_2="", turns=turns,
                          rounds=len(rounds), consensus=consensus(last))


def _read_turn(value, speaker: int, round_: int, name: str) -> RecordedTurn:
    if not isinstance(value, dict) or set(value) != {"reasoning", "score"}:
        raise ScaleEvalError(f"{name!r} must be an object with exactly 'reasoning' and 'score'")
    reasoning, score = value["reasoning"], value["score"]
    if reasoning is not None and not isinstance(reasoning, str):
        raise ScaleEvalError(f"{name!r}: 'reasoning' must be text or null, found {type(reasoning).__name__}")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (str, int))):
        raise ScaleEvalError(f"{name!r}: 'score' must be text, a whole number or null, found {score!r}")
    reasoning = reasoning or ""
    verdict, why = recorded_verdict(score, reasoning)
    return RecordedTurn(speaker=speaker, round=round_, reasoning=reasoning,
                        recorded_score="" if score is None else str(score)[:32], verdict=verdict, unparseable=why)


def recorded_verdict(score: str | int | None, reasoning: str) -> tuple[int | None, str]:
    """The verdict a recorded score stands for, or (None, why it stands for none)."""
    if score is None:
        return None, "no score was recorded for this reply"
    raw = str(score).strip()
    if raw not in ("0", "1", "2"):
        return None, f"the recorded score {raw!r} is not 1, 2 or 0"
    if raw == "0" and not re.search(r"\d", reasoning):
        return None, "the recorded 0 is the source's default for a reply holding no number at all"
    return int(raw), ""


def infer_agents(replies: dict[int, list[str]]) -> dict[int, str]:
    """Speaker place -> agent name, when exactly one speaker's replies all start with a space (claude-2);
    the others follow from the upstream rotation of AGENTS. Empty when the sign is not clear."""
    if len(replies) != len(AGENTS):
        return {}
    led = {s for s, texts in replies.items() if any(t[:1].isspace() for t in texts if t)}
    mixed = {s for s, texts in replies.items() if any(t and not t[:1].isspace() for t in texts)}
    if len(led) != 1 or led & mixed:
        return {}
    place = led.pop() - 1
    offset = (SPACE_LED_AGENT - place) % len(AGENTS)
    return {s: AGENTS[(offset + s - 1) % len(AGENTS)] for s in replies}


def _normal(text: str) -> str:
    return " ".join(text.split())


class Responses:
    """The systems' answers under responses/, to tell which system wrote which submission."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._cache: dict[tuple[str, str], dict[str, set[str]]] = {}

    def _answers(self, system_folder: str, scenario: str) -> dict[str, set[str]]:
        key = (system_folder, scenario)
        if key not in self._cache:
            answers: dict[str, set[str]] = {}
            path = self.folder / system_folder / f"{scenario}.jsonl"
            if path.is_file():
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                        prompt, response = row["prompt"], row["response"]
                        if not isinstance(prompt, str) or not isinstance(response, str):
                            raise TypeError
                    except (json.JSONDecodeError, KeyError, TypeError):
                        raise ScaleEvalError(f"line {number} of {path} is not a JSON object with text 'prompt' "
                                             "and 'response'") from None
                    answers.setdefault(_normal(prompt), set()).add(_normal(response))
            self._cache[key] = answers
        return self._cache[key]

    def attribute(self, scenario: str, question: str, submission_1: str, submission_2: str,
                  a: tuple[str, str], b: tuple[str, str]) -> tuple[str, str]:
        """(system of submission 1, system of submission 2), or ("", "") when the texts do not tell."""
        q = _normal(question)
        by_a = self._answers(a[1], scenario).get(q, set())
        by_b = self._answers(b[1], scenario).get(q, set())
        one, two = _normal(submission_1), _normal(submission_2)
        if one in by_a and two in by_b:  # identical answers by both systems land here too
            return a[0], b[0]
        if one in by_b and two in by_a:
            return b[0], a[0]
        return "", ""
