"""The LLMChain reputation model (paper Sec. IV, spec REPUTATION.md) in 1e18 fixed point.

This module is the Python mirror of the Reputation contract: every operation uses the same
integer arithmetic, truncating in the same places, so that mirror and contract agree to the
wei. Bit-exactness matters beyond precision: the update picks its rate by comparing a score
with a mean (``S >= threshold``), and two implementations that differ in the last digit can
take different branches and drift apart by far more than their rounding error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ids import hex32

WAD = 10**18
HALF = WAD // 2
GLOBAL_CONTEXT = b"\x00" * 32
GLOBAL_CONTEXT_ID = hex32(GLOBAL_CONTEXT)  # as the site's tables spell context ids

# Table I of the paper.
PSI_THIRDS = 1  # psi = 1/3: rate for a good answer (S >= threshold)
XI_THIRDS = 2  # xi = 2/3: rate for a bad answer
# lambda, the time constant of F_D, per minute in 1e18 fixed point: fixed when the Reputation
# contract is deployed (its `lambdaWad()`), the paper's 1e-3 by default, within [MIN, MAX] so that
# lambda * D (D at most a day) stays where the series below is exact enough and cannot overflow.
DEFAULT_LAMBDA_WAD = 10**15
MIN_LAMBDA_WAD = 10**12  # 1e-6 per minute
MAX_LAMBDA_WAD = 3 * 10**16  # 0.03 per minute
D_CAP_MINUTES = 1440  # the paper's daily reset
EXP_MAX_TERMS = 48


class ReputationError(ValueError):
    """An operation the contract would revert."""


def likert_ok(x: int) -> bool:
    return isinstance(x, int) and 1 <= x <= 5


def answer_score(reliability: int, completeness: int, utility: int) -> int:
    """Sh = (At^ + Ac^ + Au^) / 3 with x^ = (x - 1) / 4, i.e. (sum - 3) / 12."""
    return (reliability + completeness + utility - 3) * WAD // 12


def user_weight(familiarity: int, trust: int, uncertainty: int) -> int:
    """Wh = (F^ + T^ + (1 - U^)) / 3, i.e. (F + T + 3 - U) / 12."""
    return (familiarity + trust + 3 - uncertainty) * WAD // 12


def minutes_since(seconds: int) -> int:
    """D in 1e18 minutes from a block-timestamp difference, capped at one day."""
    if seconds <= 0:
        return 0
    return min(seconds * WAD // 60, D_CAP_MINUTES * WAD)


def exp_wad(x: int) -> int:
    """e^x for 0 <= x <= a few WAD, by its Taylor series, each term truncated."""
    total = WAD
    term = WAD
    for k in range(1, EXP_MAX_TERMS + 1):
        term = term * x // (k * WAD)
        if term == 0:
            break
        total += term
    return total


def lambda_ok(lambda_wad: int) -> bool:
    return isinstance(lambda_wad, int) and MIN_LAMBDA_WAD <= lambda_wad <= MAX_LAMBDA_WAD


def lambda_wad_from(text: str) -> int:
    """lambda per minute as written ("0.001", "1e-3") in 1e18 fixed point; ValueError when it is not a
    number of at most 18 decimals within [1e-6, 0.03]."""
    from decimal import Decimal, InvalidOperation

    try:
        scaled = Decimal(str(text).strip()) * WAD
    except InvalidOperation as exc:
        raise ValueError(f"lambda must be a number per minute, like 0.001, not {text!r}") from exc
    if scaled != scaled.to_integral_value() or not lambda_ok(int(scaled)):
        raise ValueError(f"lambda must be between 0.000001 and 0.03 per minute with at most 18 decimals, "
                         f"not {text!r}")
    return int(scaled)


def decay_factor(d_minutes_wad: int, lambda_wad: int = DEFAULT_LAMBDA_WAD) -> int:
    """FD = (1 - e^(-lambda D)) / (1 + e^(-lambda D)) = (E - 1) / (E + 1) with E = e^(lambda D)."""
    e = exp_wad(d_minutes_wad * lambda_wad // WAD)
    return (e - WAD) * WAD // (e + WAD)


def human_weight(user_weight_wad: int, d_minutes_wad: int, lambda_wad: int = DEFAULT_LAMBDA_WAD) -> int:
    """wh = Wh * FD."""
    return user_weight_wad * decay_factor(d_minutes_wad, lambda_wad) // WAD


def combine(human: int, auto: int) -> int:
    """theta * h + (1 - theta) * a with theta = 2/3."""
    return (2 * human + auto) // 3


def update(rx: int, s: int, w: int, threshold: int) -> int:
    """Eq. 6: move Rx towards S, at rate psi*w for a good answer and xi*w for a bad one."""
    rw = w * (PSI_THIRDS if s >= threshold else XI_THIRDS) // 3
    return ((WAD - rw) * rx + rw * s) // WAD


@dataclass
class Rep:
    ra: int
    rh: int
    r: int
    n_auto: int = 0
    n_human: int = 0

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        return (self.ra, self.rh, self.r, self.n_auto, self.n_human)


@dataclass
class ContextSums:
    n: int = 0
    ra: int = 0
    rh: int = 0
    r: int = 0

    def mean(self, name: str) -> int:
        return getattr(self, name) // self.n


@dataclass
class Interaction:
    model: bytes
    context: bytes
    user: str
    has_reference: bool
    sa: int
    wa: int
    sh: int = 0
    wh: int = 0
    human_done: bool = False
    reputation_done: bool = False


@dataclass
class ReputationModel:
    """The whole state of the Reputation contract, driven by the same four calls."""

    lambda_wad: int = DEFAULT_LAMBDA_WAD  # the deployment's lambda (the contract's lambdaWad())
    contexts: dict[bytes, ContextSums] = field(default_factory=lambda: {GLOBAL_CONTEXT: ContextSums()})
    models: set[bytes] = field(default_factory=set)
    owners: dict[bytes, str] = field(default_factory=dict)  # model -> the address that added it ("" unknown)
    reps: dict[tuple[bytes, bytes], Rep] = field(default_factory=dict)
    interactions: dict[bytes, Interaction] = field(default_factory=dict)
    registered_at: dict[str, int] = field(default_factory=dict)
    battles: dict[bytes, tuple[bytes, bytes]] = field(default_factory=dict)  # battle -> its two interactions
    votes: dict[bytes, int] = field(default_factory=dict)  # battle -> outcome
    last_human_eval_at: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not lambda_ok(self.lambda_wad):
            raise ReputationError("lambda out of range")

    # -- set-up -------------------------------------------------------------------------
    def register(self, user: str, timestamp: int) -> None:
        if user in self.registered_at:
            raise ReputationError("already registered")
        self.registered_at[user] = timestamp

    def add_context(self, context: bytes) -> None:
        if context == GLOBAL_CONTEXT or context in self.contexts:
            raise ReputationError("context exists")
        self.contexts[context] = ContextSums()

    def add_model(self, model: bytes, owner: str = "") -> None:
        if model in self.models:
            raise ReputationError("model exists")
        self.models.add(model)
        self.owners[model] = owner

    def owns(self, account: str, model: bytes) -> bool:
        """Whether `account` added `model` (the contract's modelOwner): its owner neither rates nor
        votes on it."""
        owner = self.owners.get(model, "")
        return bool(owner) and owner.lower() == account.lower()

    # -- evaluations ----------------------------------------------------------------------
    def auto_eval(self, iid: bytes, model: bytes, context: bytes, user: str,
                  has_reference: bool, sa: int, wa: int) -> None:
        if iid in self.interactions:
            raise ReputationError("interaction exists")
        if context == GLOBAL_CONTEXT or context not in self.contexts:
            raise ReputationError("unknown context")
        if model not in self.models:
            raise ReputationError("unknown model")
        if user not in self.registered_at:
            raise ReputationError("user not registered")
        if not (0 <= sa <= WAD and 0 <= wa <= WAD):
            raise ReputationError("score out of range")
        self.interactions[iid] = Interaction(model, context, user, has_reference, sa, wa)
        for ctx in (context, GLOBAL_CONTEXT):
            rep = self._ensure_rep(model, ctx)
            if has_reference:
                self._move(rep, ctx, "ra", sa, wa)
                rep.n_auto += 1

    def hum_eval(self, iid: bytes, sender: str, timestamp: int, reliability: int, completeness: int,
                 utility: int, familiarity: int, trust: int, uncertainty: int) -> None:
        it = self.interactions.get(iid)
        if it is None:
            raise ReputationError("unknown interaction")
        if sender != it.user:
            raise ReputationError("not the interaction's user")
        if self.owns(sender, it.model):
            raise ReputationError("the owner of the model rates it")
        if it.human_done:
            raise ReputationError("already evaluated")
        answers = (reliability, completeness, utility, familiarity, trust, uncertainty)
        if not all(likert_ok(x) for x in answers):
            raise ReputationError("answer out of range")
        previous = self.last_human_eval_at.get(sender, self.registered_at[sender])
        it.sh = answer_score(reliability, completeness, utility)
        it.wh = human_weight(user_weight(familiarity, trust, uncertainty),
                             minutes_since(timestamp - previous), self.lambda_wad)
        it.human_done = True
        self.last_human_eval_at[sender] = timestamp
        for ctx in (it.context, GLOBAL_CONTEXT):
            rep = self.reps[(it.model, ctx)]
            self._move(rep, ctx, "rh", it.sh, it.wh)
            rep.n_human += 1

    def update_reputation(self, iid: bytes) -> None:
        it = self.interactions.get(iid)
        if it is None:
            raise ReputationError("unknown interaction")
        if not it.human_done:
            raise ReputationError("no human evaluation yet")
        if it.reputation_done:
            raise ReputationError("already updated")
        it.reputation_done = True
        if it.has_reference:
            s, w = combine(it.sh, it.sa), combine(it.wh, it.wa)
        else:
            s, w = it.sh, it.wh
        for ctx in (it.context, GLOBAL_CONTEXT):
            self._move(self.reps[(it.model, ctx)], ctx, "r", s, w)

    # -- arena battles (they move no score; the owner rule holds for votes as for ratings) ---------
    def open_battle(self, battle: bytes, interaction_a: bytes, interaction_b: bytes) -> None:
        if battle in self.battles:
            raise ReputationError("battle exists")
        for iid in (interaction_a, interaction_b):
            if iid not in self.interactions:
                raise ReputationError("unknown interaction")
        self.battles[battle] = (interaction_a, interaction_b)

    def vote(self, battle: bytes, sender: str, outcome: int) -> None:
        sides = self.battles.get(battle)
        if sides is None:
            raise ReputationError("unknown battle")
        if sender != self.interactions[sides[0]].user:
            raise ReputationError("not the battle's user")
        if any(self.owns(sender, self.interactions[iid].model) for iid in sides):
            raise ReputationError("the owner of a model in the battle votes on it")
        if battle in self.votes:
            raise ReputationError("already voted")
        if outcome not in (1, 2, 3, 4):
            raise ReputationError("outcome out of range")
        self.votes[battle] = outcome

    # -- reads ----------------------------------------------------------------------------
    def reputation(self, model: bytes, context: bytes) -> tuple[int, int, int, int, int]:
        rep = self.reps.get((model, context))
        return rep.as_tuple() if rep else (0, 0, 0, 0, 0)

    def mean(self, context: bytes, name: str) -> int:
        sums = self.contexts[context]
        return sums.mean(name) if sums.n else 0

    # -- internals ------------------------------------------------------------------------
    def _ensure_rep(self, model: bytes, ctx: bytes) -> Rep:
        rep = self.reps.get((model, ctx))
        if rep is None:
            sums = self.contexts[ctx]
            if sums.n == 0:
                rep = Rep(HALF, HALF, HALF)
            else:
                rep = Rep(sums.mean("ra"), sums.mean("rh"), sums.mean("r"))
            sums.n += 1
            sums.ra += rep.ra
            sums.rh += rep.rh
            sums.r += rep.r
            self.reps[(model, ctx)] = rep
        return rep

    def _move(self, rep: Rep, ctx: bytes, name: str, s: int, w: int) -> None:
        sums = self.contexts[ctx]
        old = getattr(rep, name)
        new = update(old, s, w, sums.mean(name))
        setattr(rep, name, new)
        setattr(sums, name, getattr(sums, name) + new - old)
