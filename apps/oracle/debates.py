"""Live debates (ScaleEval, Chern et al. 2024) between the judge models over pairs of answers the site already holds.

Where pairs come from:
- `from_reference(interaction, reference)`: the interaction's answer against one reference
  answer the oracle collected for it (EvaluationJob.references);
- `from_same_prompt(a, b)`: two models' answers to the same first-turn prompt in one context
  (e.g. two models of the MT-Bench replay);
- `sample(n)`: up to n pairs of either kind that have not been debated under the criterion,
  drawn with a seeded RNG. The command `manage.py debate` asks for them on demand.

Holding a debate (`hold`): the judges are registered models flagged `is_judge` and qualified in the
debate role (apps/annotate/judge_status.py: one not qualified yet is left out, a debate asked for with
it waits, and one refused fails the debate, with the reason), reached through the gateway.
lib/debate.run_debate drives the rounds with a RNG seeded by the job, so a restart replays the same
prompts; each reply is saved on the job as it arrives and is never asked for twice. A finished debate
becomes an annotate.Debate with its transcript, and a QueueItem when the judges still disagree, in one
transaction keyed by the job's key: never recorded twice.
Judges sample at LLMCHAIN_DEBATE_TEMPERATURE with a per-judge, per-round seed, so two
registrations of one model are two independent judges, and a rerun of a job asks the same.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import combinations

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.annotate import judge_status
from apps.annotate.models import Debate, DebateTurn, QueueItem
from apps.annotate.outcomes import outcome_settled
from apps.chat.conversations import answered_first_turns, history
from apps.chat.gateway import Gateway, GatewayError, chat_structured, structured_support
from apps.chat.health import running_models
from apps.chat.models import Interaction, RegisteredModel
from apps.chain import work
from apps.chat.providers import endpoint_of, prompt_key
from lib import debate as protocol
from lib import metaeval
from lib.errors import ServiceError
from lib.evaluators import Evaluator, EvaluatorError

from .models import DebateJob

log = logging.getLogger(__name__)
S = DebateJob.Status
ACTIVE = (S.QUEUED, S.DEBATING)
MAX_ATTEMPTS = 5
RETRY_BASE_S = 60  # a judge that failed is asked again after 1 min, 2, 4... (at most the lease)
CHANNEL = "debate-jobs"  # `manage.py runworker debate-jobs` (consumers.DebateWakeConsumer)


class DebateRequestError(ValueError):
    """A debate that cannot be asked for as described; the message says what is wrong."""


# --- what the judges are asked about -----------------------------------------------------------

def criterion_of(name: str | None) -> tuple[str, str]:
    name = (name or settings.LLMCHAIN_DEBATE_CRITERION).strip()
    if name not in protocol.CRITERIA:
        raise DebateRequestError(f"unknown criterion {name!r}: choose one of {', '.join(sorted(protocol.CRITERIA))}")
    return name, protocol.CRITERIA[name]


def judge_models(names: list[str] | None = None, *, qualified_only: bool = True) -> list[RegisteredModel]:
    """The judges, one agent each: the named models (a name given twice sits twice), or every
    running model flagged as a judge; a lone running judge sits twice, as two agents that sample
    with their own seeds. A debate seats only judges qualified in the debate role
    (apps/annotate/judge_status.py): a named judge that is not is refused with the reason, and the
    running judges that are not are left out, each logged with why. `qualified_only=False` seats them
    all: measuring judges against human labels (DebateEvaluator) is how they qualify."""
    if names:
        found = {m.name: m for m in RegisteredModel.objects.filter(name__in=names)}
        missing = [n for n in dict.fromkeys(names) if n not in found]
        if missing:
            raise DebateRequestError(f"no registered model named {', '.join(map(repr, missing))}")
        judges = [found[n] for n in names]
        not_judges = list(dict.fromkeys(m.name for m in judges if not m.is_judge))
        if not_judges:
            raise DebateRequestError(f"{', '.join(not_judges)} {'is' if len(not_judges) == 1 else 'are'} not "
                                     "flagged as a judge")
    else:
        judges = list(running_models().filter(is_judge=True).order_by("name"))
    replays = list(dict.fromkeys(m.name for m in judges if m.kind != RegisteredModel.Kind.OPENAI))
    if replays:
        raise DebateRequestError(f"{', '.join(replays)} cannot judge: a replay model only repeats recorded answers")
    refused = judge_status.refused(judges, "debate") if qualified_only else {}
    if refused and names:
        raise DebateRequestError(" ".join(s.reason for s in refused.values()))
    if refused:
        for s in refused.values():
            log.warning("debate: %s", s.reason)
        judges = [m for m in judges if m.pk not in refused]
        if not judges:
            raise DebateRequestError("no running judge is qualified to debate. "
                                     + " ".join(s.reason for s in refused.values()))
    if not names and len(judges) == 1:
        judges *= 2
    if len(judges) < 2:
        raise DebateRequestError("a debate needs at least two judges and no running model is flagged as a "
                                 "judge (set is_judge on a registered model, or name the judges)")
    return judges


def agent_names(judges: list[RegisteredModel]) -> list[str]:
    """One name per agent: the model's name, with "#2", "#3" for a model that sits again."""
    seen: dict[str, int] = {}
    names = []
    for m in judges:
        seen[m.name] = seen.get(m.name, 0) + 1
        names.append(m.name if seen[m.name] == 1 else f"{m.name} #{seen[m.name]}")
    return names


def _question(interaction: Interaction) -> str:
    """The prompt, preceded by the conversation's earlier turns when there are any."""
    messages = history(interaction)
    if len(messages) == 1:
        return interaction.prompt
    lines = [f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in messages[:-1]]
    return "Earlier in the conversation:\n" + "\n\n".join(lines) + f"\n\nThe question now:\n{interaction.prompt}"


@dataclass(frozen=True)
class Pair:
    key: str  # without the criterion
    question: str
    submission_1: str
    submission_2: str
    system_1: str
    system_2: str
    model_1: str
    model_2: str
    context_id: str
    scenario: str
    origin: dict = field(default_factory=dict)


def _done(interaction: Interaction) -> None:
    if interaction.status != Interaction.Status.DONE or not interaction.answer.strip():
        raise DebateRequestError(f"interaction {interaction.interaction_id} has no answer to judge")


def from_reference(interaction: Interaction, reference: str | None = None) -> Pair:
    """The interaction's answer (submission 1) against a reference answer the oracle collected
    for it (submission 2): the one of the model named or with this on-chain id, else the first."""
    _done(interaction)
    job = getattr(interaction, "evaluation", None)
    refs = [r for r in (job.references if job else []) if r.get("text")]
    if reference:
        refs = [r for r in refs if reference in (r.get("model"), r.get("name"))]
    if not refs:
        raise DebateRequestError(f"interaction {interaction.interaction_id} has no reference answer"
                                 + (f" from {reference!r}" if reference else " yet (the oracle collects them)"))
    ref = refs[0]
    conv = interaction.conversation
    return Pair(key=f"live:reference:{interaction.interaction_id}:{ref['model']}", question=_question(interaction),
                submission_1=interaction.answer, submission_2=ref["text"], system_1=conv.model.name,
                system_2=ref.get("name", ""), model_1=conv.model.model_id, model_2=ref["model"],
                context_id=conv.context.context_id, scenario=conv.context.name,
                origin={"kind": "reference", "interactions": [interaction.interaction_id]})


def _first_turn(interaction: Interaction) -> bool:
    return not Interaction.objects.filter(conversation_id=interaction.conversation_id, id__lt=interaction.id).exists()


def from_same_prompt(a: Interaction, b: Interaction) -> Pair:
    """Two models' answers to the same first-turn prompt in one context."""
    _done(a)
    _done(b)
    ca, cb = a.conversation, b.conversation
    if ca.context_id != cb.context_id:
        raise DebateRequestError("the two interactions were asked in different contexts")
    if ca.model_id == cb.model_id:
        raise DebateRequestError("the two answers come from the same model: nothing to compare")
    if prompt_key(a.prompt) != prompt_key(b.prompt):
        raise DebateRequestError("the two interactions answer different prompts")
    if not (_first_turn(a) and _first_turn(b)):
        raise DebateRequestError("only first turns can be compared: later turns answer different histories")
    return _same_prompt_pair(a, b)


def _same_prompt_pair(a: Interaction, b: Interaction) -> Pair:
    a, b = sorted((a, b), key=lambda i: i.interaction_id)
    ca, cb = a.conversation, b.conversation
    return Pair(key=f"live:same-prompt:{a.interaction_id}:{b.interaction_id}", question=a.prompt,
                submission_1=a.answer, submission_2=b.answer, system_1=ca.model.name, system_2=cb.model.name,
                model_1=ca.model.model_id, model_2=cb.model.model_id, context_id=ca.context.context_id,
                scenario=ca.context.name, origin={"kind": "same-prompt", "interactions": [a.interaction_id,
                                                                                          b.interaction_id]})


def candidate_pairs(context=None) -> list[Pair]:
    """Every pair of either kind the site holds (in the context, if given), in a stable order."""
    related = ("conversation__model", "conversation__context", "evaluation")
    done = Interaction.objects.filter(status=Interaction.Status.DONE).exclude(answer="").select_related(*related)
    if context is not None:
        done = done.filter(conversation__context=context)
    pairs: list[Pair] = []
    for interaction in done.order_by("id"):
        job = getattr(interaction, "evaluation", None)
        for ref in (job.references if job else []):
            if ref.get("text"):
                pairs.append(from_reference(interaction, ref["model"]))
    # Same prompt: one answer per model and prompt, its latest; every two models of a prompt.
    latest: dict[tuple[int, str], dict[int, Interaction]] = {}
    for i in answered_first_turns(context).exclude(answer="").select_related(*related):
        latest.setdefault((i.conversation.context_id, prompt_key(i.prompt)), {})[i.conversation.model_id] = i
    for by_model in latest.values():
        answers = sorted(by_model.values(), key=lambda i: i.interaction_id)
        pairs += [_same_prompt_pair(a, b) for a, b in combinations(answers, 2)]
    return pairs


# --- jobs ----------------------------------------------------------------------------------------

def request(pair: Pair, *, criterion: str | None = None, judges: list[RegisteredModel] | None = None,
            rounds: int | None = None, seed: int | None = None) -> tuple[DebateJob, bool]:
    """Queue a debate over the pair; returns (job, created). Asking twice returns the first job."""
    name, description = criterion_of(criterion)
    judges = judges if judges is not None else judge_models()
    rounds = check_rounds(rounds)
    key = f"{pair.key}:{name}"
    if len(key) > 200:
        raise DebateRequestError("the debate key is too long")
    try:
        with transaction.atomic():
            job, created = DebateJob.objects.get_or_create(key=key, defaults=dict(
                criterion=name, criterion_description=description, scenario=pair.scenario[:100],
                question=pair.question, submission_1=pair.submission_1, submission_2=pair.submission_2,
                system_1=pair.system_1[:100], system_2=pair.system_2[:100], context_id=pair.context_id,
                model_1=pair.model_1, model_2=pair.model_2, origin=pair.origin, judges=[m.pk for m in judges],
                rounds=rounds, seed=seed if seed is not None else random.SystemRandom().getrandbits(62)))
            if created:
                work.wake_on_commit(CHANNEL)
            return job, created
    except IntegrityError:  # made meanwhile by another request
        return DebateJob.objects.get(key=key), False


def check_rounds(rounds: int | None) -> int:
    rounds = rounds if rounds is not None else settings.LLMCHAIN_DEBATE_ROUNDS
    if not isinstance(rounds, int) or isinstance(rounds, bool) or not 1 <= rounds <= 10:
        raise DebateRequestError(f"rounds must be a whole number from 1 to 10, not {rounds!r}")
    return rounds


def sample(n: int, *, context=None, criterion: str | None = None, judges=None, seed: int | None = None,
           rounds: int | None = None) -> list[DebateJob]:
    """Queue debates over up to n pairs not debated yet under the criterion, drawn at random."""
    if n < 1:
        raise DebateRequestError(f"ask for at least one debate, not {n}")
    name, _ = criterion_of(criterion)
    rounds = check_rounds(rounds)
    judges = judges if judges is not None else judge_models()
    taken = set(DebateJob.objects.filter(criterion=name).values_list("key", flat=True))
    fresh = [p for p in candidate_pairs(context) if f"{p.key}:{name}" not in taken]
    rng = random.Random(seed)
    chosen = rng.sample(fresh, min(n, len(fresh)))
    return [request(p, criterion=name, judges=judges, rounds=rounds)[0] for p in chosen]


def claim(limit: int = 1, lease_s: float | None = None) -> list[DebateJob]:
    lease_s = lease_s if lease_s is not None else settings.LLMCHAIN_DEBATE_LEASE_S
    return list(DebateJob.objects.filter(pk__in=work.claim(DebateJob, ACTIVE, limit, lease_s)).order_by("id"))


def _reply_key(agent: str, prompt: str) -> str:
    return f"{agent}:{hashlib.sha256(prompt.encode()).hexdigest()}"


def _sampling_seed(seed: int, agent: str, prompt: str) -> int:
    digest = hashlib.sha256(f"{seed}:{agent}:{prompt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


class _Asker:
    """ask(agent, prompt) for run_debate: a saved reply if there is one, else the judge's answer,
    saved at once."""

    def __init__(self, job: DebateJob, judges: dict[str, RegisteredModel], gateway: Gateway):
        self.job, self.judges, self.gateway = job, judges, gateway
        self.asked = 0

    def __call__(self, agent: str, prompt: str) -> str:
        key = _reply_key(agent, prompt)
        if key in self.job.replies:
            return _restored(self.job.replies[key])
        reply = async_to_sync(self._complete)(agent, prompt)
        self.asked += 1
        self.job.replies[key] = _saved(reply)
        now = timezone.now()  # each reply also renews the claim: a debate may outlast one lease
        DebateJob.objects.filter(pk=self.job.pk).update(
            replies=self.job.replies, status=S.DEBATING, updated_at=now,
            claimed_until=now + timedelta(seconds=settings.LLMCHAIN_DEBATE_LEASE_S))
        return reply

    async def _complete(self, agent: str, prompt: str) -> str | protocol.Reply:
        return await ask_judge(self.gateway, self.judges[agent], prompt, _sampling_seed(self.job.seed, agent, prompt))


def is_builtin(model: RegisteredModel) -> bool:
    """Whether the model is served by the built-in model server (`manage.py serve_model`)."""
    return (model.endpoint_url or "").rstrip("/") == settings.LLMCHAIN_BUILTIN_MODEL_URL.rstrip("/")


def reply_budget(judge: RegisteredModel) -> int:
    """The tokens a judge may write in one reply: LLMCHAIN_DEBATE_MAX_TOKENS, and for the built-in model
    no more than LLMCHAIN_BUILTIN_JUDGE_MAX_TOKENS. A 135M model on a shared CPU writes a token in 0.1 s
    at rest and in about 1 s when the machine is busy, so 320 tokens could not come within the per-reply
    limit; and what it writes past a few sentences is repetition. A structured verdict is closed within
    the budget whatever its length (the server's constrained decoding), so a shorter budget cuts the
    reasoning, never the verdict."""
    if is_builtin(judge):
        return max(1, min(settings.LLMCHAIN_DEBATE_MAX_TOKENS, settings.LLMCHAIN_BUILTIN_JUDGE_MAX_TOKENS))
    return settings.LLMCHAIN_DEBATE_MAX_TOKENS


async def ask_judge(gateway: Gateway, judge: RegisteredModel, prompt: str, seed: int) -> str | protocol.Reply:
    """One judge's reply to one debate prompt, within the per-reply time limit: asked for a
    structured verdict (lib/debate.VERDICT_SCHEMA) with logprobs where its endpoint honours a JSON
    schema (probed once, remembered on the model), as plain text otherwise. Either way the reply is
    read by lib/debate's parser, so a reply that ignores the schema is read strictly, never guessed."""
    endpoint = endpoint_of(judge)
    messages = [{"role": "user", "content": prompt}]
    params = dict(max_tokens=reply_budget(judge), temperature=settings.LLMCHAIN_DEBATE_TEMPERATURE, seed=seed)
    async with asyncio.timeout(settings.LLMCHAIN_DEBATE_TIMEOUT_S):
        if not await structured_support(gateway, judge, endpoint):
            return await gateway.complete(endpoint, messages, **params)
        body = await chat_structured(gateway, endpoint, messages, protocol.VERDICT_SCHEMA,
                                     read_timeout=settings.LLMCHAIN_DEBATE_TIMEOUT_S, **params)
    choice = body["choices"][0] if isinstance(body["choices"][0], dict) else {}
    text = str((choice.get("message") or {}).get("content") or "")
    found = protocol.verdict_probabilities((choice.get("logprobs") or {}).get("content"))
    return protocol.Reply(text, *found) if found else protocol.Reply(text)


def _saved(reply: str | protocol.Reply) -> str | dict:
    """A reply as kept in DebateJob.replies (JSON)."""
    if isinstance(reply, str):
        return reply
    return {"text": reply.text, "mass": reply.mass,
            "probabilities": None if reply.probabilities is None else {str(k): v for k, v in reply.probabilities.items()}}


def _restored(saved: str | dict) -> str | protocol.Reply:
    if isinstance(saved, str):
        return saved
    probs = saved.get("probabilities")
    return protocol.Reply(saved["text"], None if probs is None else {int(k): v for k, v in probs.items()},
                          saved.get("mass"))


def conservative_count(prompt: str) -> int:
    """A token count no tokenizer is likely to exceed for a prompt: one token per two bytes of UTF-8,
    and 32 for the chat template (byte-level BPE tokenizers write English at about four bytes a token)."""
    return len(prompt.encode()) // 2 + 32


def prompt_fits(judges: list[RegisteredModel], gateway: Gateway):
    """fits(prompt) for lib/debate: the prompt leaves every judge room for its reply
    (LLMCHAIN_DEBATE_MAX_TOKENS) within the context its endpoint advertises, counted by the model's
    own tokenizer where the endpoint has vLLM's /tokenize (the built-in server does), else by
    conservative_count. None when no judge advertises a context length (nothing to check against)."""
    limits = []
    for model in {m.pk: m for m in judges}.values():
        endpoint = endpoint_of(model)
        length = async_to_sync(gateway.context_length)(endpoint)
        if length is not None:
            limits.append((endpoint, length - settings.LLMCHAIN_DEBATE_MAX_TOKENS))
    if not limits:
        return None

    def fits(prompt: str) -> bool:
        for endpoint, budget in limits:
            counted = async_to_sync(gateway.count_tokens)(endpoint, [{"role": "user", "content": prompt}])
            if (counted[0] if counted else conservative_count(prompt)) > budget:
                return False
        return True

    return fits


def hold(job: DebateJob, gateway: Gateway | None = None) -> Debate | None:
    """Hold (or finish) the job's debate; the Debate row, or None when it must wait or failed."""
    if job.debate_id is not None:
        return job.debate
    judges = {m.pk: m for m in RegisteredModel.objects.filter(pk__in=job.judges)}
    gone = sorted({pk for pk in job.judges if pk not in judges})
    if gone:
        work.fail(job, f"judge model(s) {gone} are no longer registered", updated_at=timezone.now())
        return None
    sitting = [judges[pk] for pk in job.judges]
    if not seated(job, sitting):
        return None
    by_name = dict(zip(agent_names(sitting), sitting))
    spec = protocol.Debate(criterion=job.criterion, criterion_description=job.criterion_description,
                           scenario=job.scenario, question=job.question, submission_1=job.submission_1,
                           submission_2=job.submission_2, agents=tuple(by_name))
    gateway = gateway or Gateway()
    asker = _Asker(job, by_name, gateway)
    try:
        result = protocol.run_debate(spec, asker, rounds=job.rounds, rng=random.Random(job.seed),
                                     fits=prompt_fits(sitting, gateway))
    except protocol.DebateError as exc:
        work.fail(job, exc, updated_at=timezone.now())
        return None
    except (GatewayError, TimeoutError) as exc:  # kept replies stay when the job is tried again
        # the whole error, the endpoint's words included: debate jobs are the operator's (CLI, admin)
        error = getattr(exc, "detail", "") or str(exc) or f"no answer within {settings.LLMCHAIN_DEBATE_TIMEOUT_S:g} s"
        work.retry_later(job, exc, message=f"a judge failed: {error}", base=RETRY_BASE_S,
                         cap=settings.LLMCHAIN_DEBATE_LEASE_S, max_attempts=MAX_ATTEMPTS, updated_at=timezone.now())
        log.warning("debate %s: %s", job.key, error)
        return None
    return record(job, result)


class QualificationPending(ServiceError):
    """A judge of the job may still qualify in the debate role: the job waits and is tried again."""

    permanent = False


def seated(job: DebateJob, sitting: list[RegisteredModel]) -> bool:
    """Whether every judge of the job is qualified in the debate role now (a qualification may have
    finished since the job was asked for). Else the job waits while a judge's qualification is still to
    come (checked again every RETRY_BASE_S), or fails, saying why, when a judge was refused."""
    refused = judge_status.refused(sitting, "debate")
    if not refused:
        return True
    why = " ".join(s.reason for s in refused.values())
    log.warning("debate %s not held: %s", job.key, why)
    if all(s.state in judge_status.WAITING for s in refused.values()):
        work.retry_later(job, QualificationPending(why), message=f"waiting for its judges' qualification: {why}",
                         base=RETRY_BASE_S, cap=RETRY_BASE_S, attempts=0, updated_at=timezone.now())
    else:
        work.fail(job, f"not held, a judge is refused: {why}", updated_at=timezone.now())
    return False


def record(job: DebateJob, result: protocol.DebateResult) -> Debate:
    """Save the finished debate, its turns and (on disagreement) its queue item: once."""
    speakers = {name: place for place, name in enumerate(result.debate.agents, start=1)}
    with transaction.atomic():
        locked = DebateJob.objects.select_for_update().get(pk=job.pk)
        if locked.debate_id is not None:
            return locked.debate
        debate = Debate.objects.create(
            source=Debate.Source.LIVE, key=job.key, scenario=job.scenario, criterion=job.criterion,
            criterion_description=job.criterion_description, question=job.question,
            submission_1=job.submission_1, submission_2=job.submission_2, system_1=job.system_1,
            system_2=job.system_2, context_id=job.context_id, model_1=job.model_1, model_2=job.model_2,
            origin=job.origin, consensus=result.consensus, rounds=result.rounds)
        DebateTurn.objects.bulk_create([DebateTurn(
            debate=debate, round=t.round, speaker=speakers[t.agent], agent=t.agent, reasoning=t.reply,
            verdict=t.verdict, unparseable=t.unparseable, swapped=t.swapped, peers_shown=list(t.peers_shown),
            prompt=t.prompt, verdict_mass=t.mass, trimmed_to=t.trimmed_to,
            verdict_probabilities=None if t.probabilities is None else {str(k): round(p, 4) for k, p in
                                                                        t.probabilities.items()})
            for t in result.turns])
        if result.disagreement:
            QueueItem.objects.create(debate=debate, required_verdicts=settings.LLMCHAIN_DEBATE_EXPERTS)
        work.finish(job, S.DONE, debate=debate, updated_at=timezone.now())
        if result.consensus is not None:
            outcome_settled(job.context_id)
    return debate


def run_once(limit: int = 1, gateway: Gateway | None = None) -> int:
    """Hold up to `limit` queued debates; returns how many were taken."""
    jobs = claim(limit)
    for job in jobs:
        hold(job, gateway)
    return len(jobs)


# --- the debate as an evaluator for meta-evaluation (metaeval pairs --evaluator debate) ---------

PAIR_VERDICT = {protocol.FIRST: "a", protocol.SECOND: "b", protocol.NEITHER: "tie", None: None}  # of a consensus


def pair_workers(judges: list[RegisteredModel], wanted: int) -> int:
    """How many pairs to debate at once: one when a judge is the built-in model. Its server computes
    one forward pass at a time, so two debates at once only make each reply take twice as long, and
    the per-reply limit (LLMCHAIN_DEBATE_TIMEOUT_S) then fails replies that would have come alone."""
    if any(is_builtin(m) for m in judges):
        return 1
    return max(1, wanted)


class DebateEvaluator(Evaluator):
    """Pairwise verdicts of a debate between the running judges, held in memory (nothing is
    queued): the consensus, or undecided (None) when the judges still disagree. Each pair is
    debated under LLMCHAIN_DEBATE_CRITERION with a seed from its id, so a rerun asks the same."""

    name = "debate"

    def __init__(self, judges: list[RegisteredModel] | None = None, gateway: Gateway | None = None,
                 workers: int = 2):
        try:
            self.judges = judges if judges is not None else judge_models(qualified_only=False)
        except DebateRequestError as exc:
            raise EvaluatorError(str(exc)) from None
        self.gateway, self.workers = gateway or Gateway(), pair_workers(self.judges, workers)
        self.criterion, self.description = criterion_of(None)
        # of the last compare: pairs left undecided because a judge failed; the replies in the debates
        # held, and those with no readable verdict
        self.failed = self.replies = self.unread = self.unfit = 0
        self.measured: dict = {}
        self.fits = None

    @property
    def params(self) -> dict[str, str]:
        return {"judges": ",".join(agent_names(self.judges)), "criterion": self.criterion,
                "rounds": str(settings.LLMCHAIN_DEBATE_ROUNDS),
                "temperature": str(settings.LLMCHAIN_DEBATE_TEMPERATURE),
                "max_tokens": ",".join(dict.fromkeys(str(reply_budget(m)) for m in self.judges)),
                "pairs_failed": str(self.failed)}  # undecided because a judge failed (read after compare)

    def pair_details(self) -> dict:
        found = {"replies": self.replies, "replies_without_verdict": self.unread, "pairs_failed": self.failed,
                 "pairs_failed_on_context": self.unfit, **self.measured}
        if self.unread * 2 > self.replies:
            found["warning"] = (f"UNUSABLE judges: {self.unread} of {self.replies} replies gave no readable verdict "
                                f"(recorded as unreadable, never guessed), so their debates rarely reach consensus.")
        elif self.unread:
            found["warning"] = f"{self.unread} of {self.replies} judge replies gave no readable verdict (not guessed)."
        if self.unfit:
            found["warning"] = (found.get("warning", "") + f" {self.unfit} pairs do not fit the judges' context "
                                "(not debated).").strip()
        return found

    def compare(self, items) -> list[str | None]:
        self.fits = prompt_fits(self.judges, self.gateway)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            held = list(pool.map(self._one, items))
        results = [h["result"] for h in held]
        turns = [t for result in results if result is not None for t in result.turns]
        self.failed = sum(h["failed"] for h in held)
        self.unfit = sum(h["unfit"] for h in held)
        self.replies = len(turns) + sum(len(h["swaps"]) for h in held)
        self.unread = sum(t.verdict is None for t in turns) + sum(
            s["verdicts"][1] is None for h in held for s in h["swaps"])
        self.measured = self._measure(items, held)
        return [None if result is None else PAIR_VERDICT[result.consensus] for result in results]

    def _measure(self, items, held) -> dict:
        """Per judge model: position bias from the swap asks, the swap rule's verdicts against the
        human labels, and the calibration of its verdict probabilities (round 0 and swap asks)."""
        gold = {"a": protocol.FIRST, "b": protocol.SECOND, "tie": protocol.NEITHER}
        out = {}
        for model in dict.fromkeys(m.name for m in self.judges):
            asked, swap_verdicts, predictions, masses = [], [], [], []
            for item, h in zip(items, held):
                swap = next((s for s in h["swaps"] if s["model"] == model), None)
                if swap is None:
                    swap_verdicts.append(None)
                    continue
                asked.append(swap["shown"])
                swap_verdicts.append(PAIR_VERDICT[metaeval.swap_rule(*swap["verdicts"])])
                for probs, mass in swap["probabilities"]:
                    predictions.append((probs, gold[item["human"]]))
                    masses.append(mass)
                for t in (h["result"].round(0) if h["result"] is not None else ()):
                    if self._model_of(t.agent) == model and t.probabilities is not None:
                        predictions.append((t.probabilities, gold[item["human"]]))
                        masses.append(t.mass)
            swap_report = metaeval.pairs_report(items, swap_verdicts) if items else {}
            out[model] = {
                "position": metaeval.position_bias(asked),
                "swap_rule": {"accuracy_non_tie": swap_report.get("accuracy_non_tie"),
                              "agreed_non_tie": swap_report.get("agreed_non_tie"),
                              "non_tie": swap_report.get("non_tie"), "undecided": swap_report.get("undecided")},
                "calibration": metaeval.expected_calibration_error(predictions),
                "mean_verdict_mass": round(sum(masses) / len(masses), 4) if masses else None}
        return {"per_judge": out}

    def _model_of(self, agent: str) -> str:
        return dict(zip(agent_names(self.judges), (m.name for m in self.judges)))[agent]

    def _one(self, item) -> dict:
        """The debate of one pair (None when a judge failed, logged, or the pair does not fit), and each
        judge model's round-0 verdict asked again in the other order (MT-Bench's swap)."""
        agents = dict(zip(agent_names(self.judges), self.judges))
        seed = int.from_bytes(hashlib.sha256(str(item["id"]).encode()).digest()[:8], "big") >> 2
        spec = protocol.Debate(criterion=self.criterion, criterion_description=self.description,
                               scenario=str(item.get("category") or ""), question=item["question"],
                               submission_1=item["answer_a"], submission_2=item["answer_b"], agents=tuple(agents))
        held = {"result": None, "failed": False, "unfit": False, "swaps": []}

        def ask(agent: str, prompt: str):
            return async_to_sync(ask_judge)(self.gateway, agents[agent], prompt,
                                            _sampling_seed(seed, agent, prompt))

        try:
            result = protocol.run_debate(spec, ask, rounds=settings.LLMCHAIN_DEBATE_ROUNDS, rng=random.Random(seed),
                                         fits=self.fits)
            swaps = []
            for agent in dict((agents[a].name, a) for a in reversed(list(agents))).values():
                first = next(t for t in result.round(0) if t.agent == agent)
                answer = ask(agent, protocol.initial_prompt(spec, swapped=not first.swapped))
                reply = answer.text if isinstance(answer, protocol.Reply) else answer
                other = protocol.parse_verdict(reply).verdict  # as the judge gave it, in the other order
                shown = (other, first.shown_verdict) if first.swapped else (first.shown_verdict, other)
                probabilities = []
                if isinstance(answer, protocol.Reply) and answer.probabilities is not None:
                    probabilities.append(({protocol.to_canonical(v, not first.swapped): p
                                           for v, p in answer.probabilities.items()}, answer.mass))
                swaps.append({"model": agents[agent].name, "shown": shown,
                              "verdicts": (shown[0], protocol.to_canonical(shown[1], True)),
                              "probabilities": probabilities})
        except protocol.DoesNotFit as exc:
            log.warning("debate evaluator: pair %s: %s", item["id"], exc)
            held["unfit"] = True
            return held
        except (GatewayError, TimeoutError) as exc:  # undecided, and said so
            log.warning("debate evaluator: pair %s: a judge failed: %s", item["id"], getattr(exc, "detail", exc))
            held["failed"] = True
            return held
        held.update(result=result, swaps=swaps)
        return held
