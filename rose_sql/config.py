"""Every configuration class, and the only home of defaults.

Each is frozen, built once at the entry point (CLI or API) and passed down; no module keeps mutable
settings of its own, and the CLI reads its defaults from here. :class:`Config` is a run's (with
:class:`JudgeConfig` for its judges); :class:`RewardConfig` is the RL reward's, and
:class:`ServeConfig` the reward server's; :func:`console_config` the review console's sandbox.

Each limit has one default, here. Where another value is right (a reward computed in a training loop,
a person waiting at the review console, the demo's runaway query), it is a named setting below, read by
every entry point that needs it, never a number typed again elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, Self, get_args

from rose_sql.engines.kinds import Source
from rose_sql.errors import UsageError
from rose_sql.results import Limits

MatchedRefuter = Literal["always", "evidence", "never"]
EfficiencyBase = Literal["off", "steps", "time", "both"]
"""What ``rose run --efficiency`` measures: nothing, VM steps, wall time as published, or both."""
Policy = Literal["rose", "paper"]
Structured = Literal["auto", "on", "off"]
"""Whether the judges' replies are asked for as a JSON schema (``response_format``): try it and fall back
to plain text where the endpoint refuses it, always, or never."""
ReasoningEffort = Literal["minimal", "low", "medium", "high"]
Aggregate = Literal["majority", "unanimous", "any-fail", "strong-only"]
"""How a judge stage's votes become its verdict (see :mod:`rose_sql.judges.votes`)."""
Schedule = Literal["constant", "linear", "cosine"]
Preset = Literal["rose", "sql-r1", "arctic", "skyrl-sql", "verl-text2sql", "think2sql"]
"""The RL reward's formula: ours (``rose``), or one that computes what a published recipe computes
(:mod:`rose_sql.reward.presets`)."""
"""How the syntax weight alpha moves over training steps (see :func:`rose_sql.reward.weights`)."""


class _Unset:
    """The command line's value of an option not given: the field's own default."""

    def __repr__(self) -> str:
        return "FIELD_DEFAULT"


FIELD_DEFAULT: Any = _Unset()


@dataclass(frozen=True, slots=True)
class Option:
    """How a config field is given on the command line: declared on the field, once (its flags, help, and the
    range its value must be in), and read by :mod:`rose_sql.cli.options`, which makes it a click option of
    every command that offers the field; the library itself never reads it. The option's default is the
    field's (shown in ``--help``), except where ``unset`` says what the command line holds when it is not
    given (None: the field's default is decided elsewhere, e.g. one worker per core)."""

    flags: tuple[str, ...]
    """The option's names, the first the one ``--help`` and messages show (``--evidence/--no-evidence``
    for an on/off pair); the parameter's name comes from the longest, as click's does."""
    help: str
    """The ``--help`` text."""
    min: float | None = None
    """The smallest value accepted (a number's range)."""
    max: float | None = None
    """The largest value accepted."""
    min_open: bool = False
    """Whether ``min`` itself is refused (a positive number)."""
    choices: tuple[str, ...] | None = None
    """The values accepted when they are not all of the field's ``Literal`` (None: all of them)."""
    metavar: str | None = None
    """What ``--help`` shows for the value."""
    unset: Any = FIELD_DEFAULT
    """The command line's value when the option is not given (FIELD_DEFAULT: the field's default)."""
    show_default: bool = True
    """Whether ``--help`` shows the default."""
    check: str | None = None
    """``module:function`` that checks the text given (returning the value, raising :class:`UsageError`),
    imported only when the option is given."""
    multiple: bool = False
    """Whether the option may be repeated (its values, checked one by one, build the field's mapping)."""
    required: bool = False
    """Whether the command refuses to run without it."""
    flag_value: str | None = None
    """The value of an option given without one (``--ray`` alone: ``local``); None: it needs one."""


def option(default: Any = MISSING, *, factory: Any = MISSING, score: bool = False, **cli: Any) -> Any:
    """A config field with its command-line option (``cli``: the :class:`Option`'s fields, ``flags`` a
    string or a tuple), and whether it can change a score (``score``: then it is in each run's manifest,
    and a resumption with another value is refused)."""
    flags = cli.pop("flags")
    spec = Option(flags=(flags,) if isinstance(flags, str) else tuple(flags), **cli)
    return field(default=default, default_factory=factory, metadata={"option": spec, "score": score})


def scores(default: Any) -> Any:
    """A config field without a command-line option that can change a score (see :func:`option`)."""
    return field(default=default, metadata={"score": True})


def score_fields(cls: type) -> tuple[str, ...]:
    """The names of ``cls``'s fields that can change a score, in their order (the manifest's)."""
    return tuple(f.name for f in fields(cls) if f.metadata.get("score"))


def default_cache_dir() -> Path:
    """``$ROSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/rose-sql``, else ``~/.cache/rose-sql``."""
    if os.environ.get("ROSE_CACHE_DIR"):
        return Path(os.environ["ROSE_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "rose-sql"


RETRY_BACKOFF_S = (0.5, 8.0)
"""The pause before a judge call's first retry and the longest pause, in seconds (the ``openai`` SDK's own
values); each retry doubles it, less up to a quarter at random."""
RETRY_BACKOFF_ENV = "ROSE_RETRY_BACKOFF_S"


def default_retry_backoff() -> tuple[float, float]:
    """``$ROSE_RETRY_BACKOFF_S`` (``FIRST,LONGEST`` seconds: the test suite sets ``0,0``, so its scripted
    faults are retried at once), else :data:`RETRY_BACKOFF_S`."""
    text = os.environ.get(RETRY_BACKOFF_ENV, "").strip()
    if not text:
        return RETRY_BACKOFF_S
    try:
        first, longest = (float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"${RETRY_BACKOFF_ENV}={text!r}: give FIRST,LONGEST seconds, e.g. 0.5,8") from None
    if not 0 <= first <= longest:
        raise UsageError(f"${RETRY_BACKOFF_ENV}={text!r}: need 0 <= FIRST <= LONGEST")
    return first, longest


LOCAL_CTX = 8192
"""The pinned local judge's context window (``--judge-gguf-ctx``): ROSE's prompts take about 3.7k tokens."""
LOCAL_SEED = 20260101
"""The seed of the pinned local judge's server (``--judge-gguf``), the same as the requests'."""


@dataclass(frozen=True, slots=True)
class LocalModel:
    """A GGUF file served by llama.cpp's server (xllamacpp) in a child process: the pinned local judge
    (``rose run --judge-gguf FILE``, :mod:`rose_sql.judges.local`). Every field is in the manifest."""

    path: Path
    """The GGUF file (not recorded: only its hash identifies it)."""
    sha256: str
    """The file's SHA-256: the judge's identity in the cache key, the manifest and a judge card."""
    runtime: str
    """The server's runtime and version (``xllamacpp 2026.10.11549``)."""
    n_ctx: int = LOCAL_CTX
    """Context window of the server's one slot, prompt and reply together: a request past it fails
    (``judge_error``), it is never shifted or cut."""
    threads: int = 1
    """CPU threads for prompt processing and generation (1: llama.cpp under OpenMP oversubscription on
    small machines generates 40 times slower with 2 threads on 2 cores)."""
    seed: int = LOCAL_SEED
    """The server's sampling seed (the requests send theirs too)."""
    startup_s: float = 300.0
    """Seconds the server may take to load the file and answer ``/v1/models``."""

    def sampling(self) -> dict[str, object]:
        """Every setting of the server that decides a reply, as the manifest records it."""
        return {
            "temperature": 0.0,
            "seed": self.seed,
            "n_parallel": 1,
            "n_ctx": self.n_ctx,
            "threads": self.threads,
            "cache_prompt": False,
            "cache_ram_mib": 0,
            "ctx_shift": False,
        }


@dataclass(frozen=True, slots=True)
class JudgeConfig:
    """How the LLM judges are reached and how the cascade uses them."""

    model: str = option(
        flags="--judge-model", unset=None, help="Model of the LLM judges; without it only the deterministic stages run."
    )
    """Model name as the endpoint knows it (e.g. ``gpt-4o``, ``deepseek-reasoner``, ``qwen2.5:32b``)."""
    base_url: str | None = option(
        None, flags="--judge-base-url", help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, else OpenAI)."
    )
    """OpenAI-compatible endpoint; None uses ``OPENAI_BASE_URL`` or OpenAI itself."""
    api_key: str | None = None
    """API key; None uses ``OPENAI_API_KEY`` (never written to records or the cache)."""
    concurrency: int = option(16, flags="--concurrency", min=1, help="LLM calls in flight.")
    """LLM calls in flight at once."""
    timeout_s: float = option(
        180.0,
        flags="--judge-timeout",
        min=0,
        min_open=True,
        help="Seconds one LLM request may take, the whole reply included, before it is retried.",
    )
    """Seconds one HTTP attempt may take, the whole reply included, before it is retried (a deadline,
    not the SDK's per-read timeout: a reply trickled a byte at a time still stops here)."""
    max_retries: int = option(5, flags="--max-retries", min=0, help="Retries per call.")
    """Retries (with exponential backoff) on 429, 5xx, timeouts and connection errors."""
    retry_backoff_s: tuple[float, float] = field(default_factory=default_retry_backoff)
    """The pause before the first retry and the longest, in seconds: 0.5 and 8 (the SDK's own), or
    ``$ROSE_RETRY_BACKOFF_S`` (``FIRST,LONGEST``; the tests set ``0,0``); a server's ``retry-after`` (up to a
    minute) comes before it."""
    temperature: float | None = scores(0.0)
    """Sampling temperature; dropped (and recorded as such) where the model refuses it."""
    seed: int | None = scores(20260101)
    """Sampling seed where the provider accepts one."""
    max_tokens: int = option(
        8192,
        score=True,
        flags="--judge-max-tokens",
        min=1,
        help="Completion tokens (reasoning included) a judge may use per call: what bounds each call's cost.",
    )
    """Cap on completion tokens, reasoning included, sent with every call (``max_tokens``, or
    ``max_completion_tokens`` where the model wants that name). A judge's JSON verdict takes a few
    hundred tokens and a reasoning model thinks a few thousand on these items, so 8192 leaves room
    for both; a reply still growing past it is more likely a loop than a verdict. It is what bounds
    a call's cost: ``--budget`` reserves it at the output price before each call, and the dry run's
    upper bound counts it for every call. A reply cut at the cap is invalid and re-asked."""
    max_reply_bytes: int = 2**20
    """Bytes of a reply's HTTP body read at most: a larger body is not read further and the call fails
    (``judge_error``), the beginning of the body kept on it. 1 MiB is over 30 times what 8192 tokens
    of text take."""
    retry_invalid: bool = option(
        False,
        flags="--retry-invalid",
        help=(
            "Ask again, with a fresh call, wherever the LLM cache holds a reply that fails validation (the "
            "new reply replaces it). With --resume, this is how items unscored judge_invalid get new replies."
        ),
    )
    """Ask again with a fresh call when the cache holds a reply that fails validation (the new reply
    replaces the cached one); without it, a rerun reads the same invalid reply from the cache."""
    reask: int = scores(1)
    """How many times an invalid reply is re-asked before the item is unscored ``judge_error``."""
    cache_dir: Path | None = option(
        factory=default_cache_dir,
        flags="--cache-dir",
        unset=None,
        help="LLM cache folder (default: ~/.cache/rose-sql).",
    )
    """Content-addressed cache of every call; None disables it (``--no-cache``)."""
    run_key: Path | None = option(
        None,
        flags="--run-key",
        metavar="FILE",
        check="rose_sql.judges.keys:check_key_file",
        help=(
            "The run key (a file of 64 hex digits, such as a cache folder's run.key): the secret every verdict "
            "nonce and fence marker of the prompts is derived from. With the same key a pinned judge asks the "
            "very same prompts from empty caches. Default: the key kept with the LLM cache, made there once."
        ),
    )
    """The run key's file (:mod:`rose_sql.judges.keys`); None: the key kept with the cache (``run.key`` in
    ``cache_dir``, made once), or a fresh one without a cache. The manifest records its fingerprint."""
    budget_usd: float | None = option(
        None,
        flags="--budget",
        min=0,
        min_open=True,
        help=(
            "USD the LLM calls may cost at most: each call's worst case is reserved before it is sent, and a "
            "call that no longer fits is not made (its item: budget_exhausted). Needs a price for the model."
        ),
    )
    """Stop starting new calls once this much was spent (remaining items: ``budget_exhausted``)."""
    prices_path: Path | None = option(None, flags="--prices", help="JSON price table to extend the bundled one.")
    """Extra price table (JSON: model -> {input, output} USD per million tokens)."""
    matched_refuter: MatchedRefuter = option(
        "evidence",
        flags="--matched-refuter",
        help="When results match: ask the Refuter always, only on doubtful evidence, never.",
    )
    """When results match: always ask the Refuter (the paper), only when evidence questions the match, never."""
    policy: Policy = option(
        "rose",
        score=True,
        flags="--policy",
        help="'paper' reproduces the ROSE paper's flow exactly (Refuter on every matching result).",
    )
    """``paper`` reproduces the paper's flow exactly (implies matched_refuter=always)."""
    small_schema_chars: int = scores(12_000)
    """The judges see the whole schema when its text is at most this long; else the tables the two
    queries read, their foreign-key neighbours and a list of the others' names."""
    examples_per_column: int = scores(3)
    """Distinct example values the judges see per column (from its first 50 non-NULL values)."""
    result_rows: int = scores(20)
    """Rows of each query result the judges see (with the total row count)."""
    cell_chars: int = scores(200)
    """Text cells of a result longer than this are cut for the judges (and the cut is said)."""
    structured: Structured = option(
        "auto",
        flags="--judge-structured",
        help=(
            "Ask for the judges' replies as a JSON schema (response_format): auto tries it and falls back to "
            "plain replies where the endpoint refuses it; on insists; off never sends it."
        ),
    )
    """Ask for the replies as a JSON schema: ``auto`` tries it and falls back to parsing plain text where
    the endpoint refuses it (remembered for the client's life), ``on`` insists, ``off`` never sends it."""
    options: Mapping[str, Any] = option(
        factory=dict,
        score=True,
        flags=("--judge-option", "judge_options"),
        metavar="KEY=VALUE",
        multiple=True,
        check="rose_sql.judges.llm:parse_option",
        help=(
            "A provider parameter sent as it is in each request body (repeatable; VALUE is JSON when it "
            "parses, else a string; the string $schema stands for the reply's JSON schema): top_k=20, "
            "guided_json=$schema, 'chat_template_kwargs={\"enable_thinking\": false}'. Part of the cache key "
            "and the manifest."
        ),
    )
    """Provider parameters sent as they are in the request body (``--judge-option KEY=VALUE``: top_k,
    guided_json, chat_template_kwargs...); a value ``"$schema"`` anywhere in them becomes the reply's JSON
    schema. Part of the cache key and the manifest."""
    reasoning_effort: ReasoningEffort | None = option(
        None,
        score=True,
        flags="--reasoning-effort",
        help="reasoning_effort sent to reasoning models (OpenAI's o-series and gpt-5, and endpoints that take it).",
    )
    """``reasoning_effort`` for reasoning models (o-series, gpt-5, and endpoints that take it); None sends none."""

    samples: int = option(
        1,
        flags="--samples",
        min=1,
        help=(
            "Replies per judge model and stage, at --samples-temperature with seeds seed+0..K-1 (each its "
            "own cache entry); the stage's verdict is their majority, a tie failing the prediction, and the "
            "share of votes agreeing with it is recorded as the stage's confidence. 1: one reply at "
            "temperature 0, as without it."
        ),
    )
    """Replies asked of each judge model per stage (``--samples``); the stage's verdict is their majority."""
    samples_temperature: float = option(
        0.7, flags="--samples-temperature", min=0, help="Sampling temperature of the replies when --samples is above 1."
    )
    """The temperature of the samples when ``samples`` > 1 (with one sample, ``temperature`` stays)."""
    panel: tuple[str, ...] = option(
        (),
        flags="--panel",
        metavar="M1,M2,...",
        unset=None,
        check="rose_sql.cli.run:check_panel",
        help=(
            "Judge models that vote together at each stage (their majority decides), after --judge-model "
            "when it is given; MODEL=URL gives one model its own endpoint. Each model's verdict is on the "
            "record."
        ),
    )
    """Judge models that vote together (``--panel``; ``model`` is the first); ``MODEL=URL`` gives a model
    its own endpoint. Empty or one model: no panel."""
    escalate_to: str | None = option(
        None,
        flags="--escalate-to",
        metavar="STRONG_MODEL",
        help=(
            "Cheap first: --judge-model (the cheap one) judges every stage; STRONG_MODEL is asked, and "
            "decides, only where the cheap votes split or are unsure (--escalate-below), fail a matching "
            "result, pass a match a witness separates, or flag GoldX/AmbQ. Why an item escalated is on its "
            "record."
        ),
    )
    """The strong model of the cheap-first policy (``--escalate-to``): asked only where ``model``'s
    votes are unsure, disagree with the deterministic evidence, or flag GoldX/AmbQ."""
    escalate_below: float = option(
        0.75,
        flags="--escalate-below",
        min=0,
        max=1,
        help=(
            "Escalate a stage whose confidence (share of agreeing votes, or the confidence a reply states) "
            "is below this."
        ),
    )
    """A stage whose confidence (the share of votes agreeing with the majority, or a lower confidence the
    replies state) is below this escalates."""
    aggregate: Aggregate = option(
        "majority",
        flags="--aggregate",
        choices=("majority", "unanimous", "any-fail"),
        help=(
            "How a stage's votes decide: majority (a tie fails the prediction), unanimous (a split is "
            "unscored judges_split), any-fail. An escalated stage counts the --escalate-to model's votes. "
            "rose replay --aggregate re-decides stored votes under another rule (strong-only too)."
        ),
    )
    """How a stage's votes become its verdict: ``majority`` (ties fail the prediction), ``unanimous``
    (a split leaves the item unscored ``judges_split``), ``any-fail``, ``strong-only``."""
    local: LocalModel | None = None
    """A GGUF file that rose serves itself on loopback for the judges (``--judge-gguf``); None: the
    endpoint is ``base_url``'s."""

    def __post_init__(self) -> None:
        if any(not m.strip().partition("=")[0].strip() for m in self.panel):
            raise UsageError(f"panel {self.panel!r}: name a model in each entry (MODEL or MODEL=URL)")
        if self.samples < 1 or not 0 <= self.escalate_below <= 1:
            raise UsageError("samples must be at least 1 and escalate_below between 0 and 1")
        pinned = sorted(set(self.options) & set(self.local.sampling())) if self.local is not None else []
        if pinned:  # a request may change them on llama.cpp's server, and the manifest would not say so
            raise UsageError(
                f"--judge-option {pinned[0]}=... is not allowed with --judge-gguf: the pinned server sets "
                f"{', '.join(pinned)} (recorded in the manifest's judge.local.sampling)"
            )

    @property
    def votes(self) -> bool:
        """Whether a stage asks more than one reply (samples, a panel or a strong model to escalate to)."""
        return self.samples > 1 or len(self.panel) > 1 or self.escalate_to is not None

    @property
    def effective_matched_refuter(self) -> MatchedRefuter:
        return "always" if self.policy == "paper" else self.matched_refuter


STEPS_PER_SECOND = 100_000_000
"""A typical rate of SQLite virtual-machine steps a second on one core (measured 20-280 million)."""
MAX_STEPS = 1_000_000_000
"""SQLite steps one query of ``rose run`` may take (about 4-50 s of one core)."""
SHORT_MAX_STEPS = 200_000_000
"""SQLite steps of one query where an answer is waited for: a predicted query of the RL reward (a
training step waits for it), a query at the review console (a person waits), and one item's evidence
search (about 1-10 s of one core)."""
DEMO_MAX_STEPS = 50_000_000
"""The demo's step budget per query: small, so that its runaway prediction is stopped in a fraction of a
second; the same on every machine."""
EVIDENCE_STATEMENT_STEPS = 50_000_000
"""SQLite steps one statement of the evidence search may take (the queries under test run on a copy many
times)."""
EVIDENCE_PROFILE_STEPS = 50_000_000
"""SQLite steps the profile of one table may take in all (its columns' NULLs, duplicates and a few values,
which the witness search's candidates are made from): the table's, computed once per worker before any
item's clock starts and outside any item's budget, so what an item finds never depends on which item
came first."""
EVIDENCE_MAX_ROWS = 10_000
"""Rows of a query under test on an evidence copy past which its result is too large to compare soundly
there (the witness search then skips the candidate)."""
MAX_VALUE_BYTES = 256 * 2**10
"""The longest string or blob a SQLite statement may make (:attr:`Config.max_value_bytes`): one call of a
built-in over long values cannot be interrupted, and the dearest ones cost the product of their
arguments' lengths (``instr``, ``replace``): at 256 KiB one such call takes under a second of one core,
where at the former 16 MiB ``instr`` took 25 to 45 minutes (``bench/bench_worst_step.py``, ``docs/safety.md``).
BIRD's and Spider's largest values are tens of kilobytes (Stack Exchange caps a post at 30,000
characters)."""
MAX_PATTERN_BYTES = 1000
"""The longest LIKE or GLOB pattern (SQLite's default is 50,000): a match costs up to the string's length
times the pattern's, 0.6 s at 256 KiB and 1,000 bytes where 50,000 took 29 s."""
GUARD_MARGIN_S = 5.0
"""Seconds past a statement's own time limit after which its worker process is stopped (the wall guard)."""
COLUMN_WORK = 20_000_000
"""Units of work one column search of the comparator or the test-suite reading may do (a cell read, a
node of the search or a check of two columns, one unit each) before it gives up as ``undecided``:
counted, never timed, so the same on every machine (a few seconds of one core at most)."""
INTERPRETER_BYTES = 512 * 2**20
"""What a worker's memory bound keeps for all but the engine's heap: the interpreter and what it holds,
malloc's own overhead on the engine's allocations, the code mapped from files (a worker with everything
loaded holds about 110 MB; the heap-limit bombs' overhead is under 100 MB)."""


def steps_for(seconds: float) -> int:
    """The step budget of about ``seconds`` of one core on a typical machine (for settings given in seconds)."""
    return max(1, int(seconds * STEPS_PER_SECOND))


def default_workers(per_core: int = 1, *, at_least: int = 1) -> int:
    """``per_core`` workers for each core, and at least ``at_least``: a run's deterministic stages take
    one process per core (``Config.workers``, the defaults)."""
    return max(at_least, per_core * (os.cpu_count() or 1))


MAX_REWARD_PROCESSES = 8
"""The reward's default worker processes are one per core up to this many (each keeps its own caches)."""
MAX_QUERY_THREADS = 16
"""Query threads of one reward worker process at most: each takes one slot of its process's
wall-time guard (``rose_sql.engines.workers.SLOTS_PER_WORKER``)."""


def default_reward_processes() -> int:
    """One reward worker process per core, at most :data:`MAX_REWARD_PROCESSES`."""
    return min(MAX_REWARD_PROCESSES, default_workers())


@dataclass(frozen=True, slots=True)
class Subset:
    """Which items of each input ``rose run`` evaluates when not all (``--limit N``, ``--ids FILE``):
    the first ``limit`` items in input order, or the items whose ids ``ids`` lists, in its order (see
    :func:`rose_sql.items.subset.select`). Recorded in the manifest; a resumption with another is refused."""

    limit: int | None = option(
        None,
        flags="--limit",
        min=1,
        help=(
            "Evaluate only the first N items of each prediction file, in input order (a subset: its headline "
            "and summary.json say so, and the items outside it are not counted, not even as missing "
            "predictions)."
        ),
    )
    """The first N items of each input, in its order."""
    ids: Path | None = option(
        None,
        flags=("--ids", "ids_file"),
        help=(
            "Evaluate only the items whose ids FILE lists, one per line, in its order (blank lines and # "
            "comments skipped; an unknown or repeated id is refused). A subset, as with --limit (with both: "
            "the first N of them)."
        ),
    )
    """A file of item ids, one per line (blank lines and lines starting with ``#`` skipped)."""


@dataclass(frozen=True, slots=True)
class Config:
    """Everything that changes how items are executed, compared and recorded."""

    max_steps: int = option(
        MAX_STEPS,
        score=True,
        flags="--max-steps",
        min=1000,
        help=(
            "SQLite steps one query may take; past them it is a timeout (a prediction scores 0). The same on "
            "every machine: about 4-50 s of one core on a typical machine."
        ),
    )
    """SQLite virtual-machine steps one query may take; past them it is stopped as a ``timeout`` (a
    prediction scores 0, a gold is ``gold_error``). Deterministic: the same on every machine and at any
    load, for a given SQLite version. About 4-50 s of one core on a typical machine (measured at
    20-280 million steps a second depending on the query)."""
    count_past_cap_steps: int = scores(100_000_000)
    """After truncation, keep stepping (without storing) up to this many steps to count the total rows."""
    evidence_max_steps: int = option(
        SHORT_MAX_STEPS,
        score=True,
        flags="--evidence-steps",
        min=1000,
        help="SQLite steps of evidence search per item (deterministic; about 1-10 s of one core).",
    )
    """SQLite steps all the statements of one item's evidence search may take together (about 1-10 s of
    one core on a typical machine). Deterministic: the search finds the same on every machine."""
    timeout_s: float = option(
        60.0,
        score=True,
        flags="--timeout",
        min=0,
        min_open=True,
        help=(
            "Wall-clock guard, in seconds, for one query: past it the query is stopped and run again alone "
            "with the guard doubled; stopped again, it is a runaway (a timeout: a prediction scores 0). On "
            "PostgreSQL, MySQL and DuckDB (no step counter) it is the engine's own time limit. It can decide "
            "a score: --resume refuses another value."
        ),
    )
    """Wall-clock guard for one query: a query still running after it is stopped (inside SQLite, or by
    stopping its worker process when SQLite cannot interrupt the call), then run again alone, in a fresh
    process, with the guard doubled (:mod:`rose_sql.engines.alone`): stopped again, it is a runaway, a
    ``timeout`` (a prediction scores 0, a gold is ``gold_error``), as the official scripts score a
    timeout; otherwise it is recorded as the second run ended. On SQLite at the default limits the step
    budget, not this, ends what runs away (``docs/safety.md`` names what still falls to it); on the other
    engines, which count no steps, it is what ends a runaway. It can decide a score: in the manifest, and a
    resumption with another value is refused."""
    guard_margin_s: float = GUARD_MARGIN_S
    """Seconds past a statement's own time limit after which its worker process is stopped (the wall guard,
    :data:`GUARD_MARGIN_S`): room for a statement that ends on its own a little late on a loaded machine."""
    server_timeout_s: float | None = scores(None)
    """Wall-clock limit of one query on PostgreSQL, MySQL/MariaDB and DuckDB, enforced by the engine
    (``statement_timeout``, ``max_statement_time``, an interrupt), confirmed as ``timeout_s`` is: a query
    stopped by it twice (the second time alone with it doubled) is a runaway, a ``timeout``. None:
    ``timeout_s``."""
    max_rows: int = option(
        100_000,
        score=True,
        flags="--max-rows",
        min=1,
        help="Rows kept per result; larger results are marked truncated.",
    )
    """Rows kept per result; past it the result is marked ``truncated`` (rows are still counted)."""
    max_result_bytes: int = scores(64 * 2**20)
    """Approximate bytes of cell data kept per result; past it the result is truncated."""
    max_value_bytes: int = scores(MAX_VALUE_BYTES)
    """SQLite's limit on one string or blob (``SQLITE_LIMIT_LENGTH``): stops ``randomblob`` giants, and
    bounds what one call of a function over long values may cost (:data:`MAX_VALUE_BYTES`)."""
    max_pattern_bytes: int = scores(MAX_PATTERN_BYTES)
    """SQLite's limit on one LIKE or GLOB pattern (``SQLITE_LIMIT_LIKE_PATTERN_LENGTH``): a match costs up to
    the string's length times the pattern's (:data:`MAX_PATTERN_BYTES`)."""
    max_sql_chars: int = scores(200_000)
    """Longer SQL is rejected before it reaches a parser."""
    engine_memory_bytes: int = 2 * 2**30
    """The memory an engine may take in each worker process: SQLite's hard heap limit (``PRAGMA
    hard_heap_limit``: sorts and temporary tables live in memory under it, never on disk, but in the timed
    pass, as ``engine_temp_bytes`` says) and DuckDB's
    ``memory_limit``, at most ``worker_memory_bytes`` less :data:`INTERPRETER_BYTES`. A query that needs
    more is stopped as a ``timeout`` whose error names the limit (a prediction scores 0, a gold is
    ``gold_error``)."""
    engine_temp_bytes: int = 2 * 2**30
    """The temporary disk a statement may take where the engine can bound it: MariaDB's
    ``tmp_disk_table_size`` (on-disk temporary tables, set with each statement) and the PostgreSQL
    ``temp_file_limit`` that ``rose db reader`` sets on its role (``rose run`` warns when the role has
    none). A query that needs more is stopped as the memory limit is (a ``timeout``, ``limit: memory``).
    and each temporary file of SQLite's timed pass (``RLIMIT_FSIZE`` while it runs: the published script's
    connection keeps SQLite's temporary files, and a sort in memory is timed otherwise). Elsewhere SQLite
    and DuckDB never spill (temporary storage in memory, no temporary directory)."""
    worker_memory_bytes: int = 5 * 2**29
    """The resident memory of each worker process, everything included (2.5 GiB): the engine's heap
    (``engine_memory_bytes``, at most this less :data:`INTERPRETER_BYTES`) and the interpreter, held by
    ``RLIMIT_DATA`` (:func:`rose_sql.engines.workers.limit_memory`). A statement that reaches either is stopped as
    one past the heap limit (``timeout``, ``limit: memory``); an item whose Python side does fails, never
    the machine."""
    schema_max_steps: int = 200_000_000
    """SQLite steps that reading the example values of a database's columns may take in all (the judges
    see them): the columns are sampled in the catalogue's order, and those past the budget are shown
    without examples, the same on every machine."""
    float_digits: int = scores(12)
    """Numbers are compared after rounding to this many significant digits (int 1 == float 1.0)."""
    workers: int = option(
        factory=default_workers,
        flags="--workers",
        min=1,
        unset=None,
        help="Worker processes for the deterministic stages (default: one per core).",
    )
    """Processes running the deterministic stages (1: in this process); the judges are async."""
    cache_cells: int = 20_000_000
    """Cells of query results kept in the in-process execution cache (LRU beyond it); the memory it holds is
    bounded besides (:data:`rose_sql.engines.execute.CACHE_BYTES`, within :data:`INTERPRETER_BYTES`)."""
    evidence: bool = option(
        True,
        score=True,
        flags="--evidence/--no-evidence",
        unset=None,
        help=(
            "Search witness databases, distinguishing rows and gold smells (default: on when a judge is "
            "configured, since the judges read it)."
        ),
    )
    """Search for witnesses, distinguishing rows and gold smells (rose_sql.evidence)."""
    evidence_budget_s: float = option(
        120.0,
        flags="--evidence-budget",
        min=0,
        min_open=True,
        help="Wall-clock guard, in seconds, of one item's evidence search (past it a judged item is left unscored).",
    )
    """Wall-clock guard of one item's evidence: past it the search stops, the evidence says so
    (``guard``), and an item whose judges would read it is unscored ``wall_guard``. On SQLite the counted
    budgets (``evidence_max_steps``, ``evidence_max_candidates``, ``evidence_column_work``) end a search
    first, the same on every machine: the dearest item of the bench files (200 superhero items) takes
    5 s at a load of 6 on two cores and 24 s beside a benchmark, so the guard stands far behind them
    (30 s, its former default, fired under load and changed a search)."""
    evidence_max_candidates: int = scores(80)
    """Witness candidates tried at most per item (keeps fast databases fast)."""
    evidence_column_work: int = COLUMN_WORK
    """Units of the comparator's column search that one item's witness search may spend over all its
    candidates (:data:`COLUMN_WORK`, counted, never timed): past it the search stops (``budget``), the
    same on every machine, long before the wall-clock guard could decide it."""
    evidence_max_db_bytes: int = scores(256 * 2**20)
    """Larger databases are not copied for a witness search."""
    evidence_result_rows: int = 10
    """Rows of each result on a witness database kept in the record (and shown to the judges)."""
    evidence_scratch: str | None = option(
        None,
        flags="--evidence-scratch",
        metavar="URL",
        check="rose_sql.engines.spaces.scratch:check_url",
        help=(
            "PostgreSQL or MySQL/MariaDB server (and a role that may create databases) where the witness "
            "search makes, and drops, a scratch database per worker holding copies of the tables the queries "
            "read; never the --db database. Without it there is no witness search on those servers (the "
            "evidence says so)."
        ),
    )
    """A PostgreSQL or MySQL/MariaDB URL where rose may create (and drops) a scratch database per worker for
    the witness search on those engines, into which the tables the queries read are copied; None: no
    witness search there (the evidence says why). Never the user's database."""
    efficiency: EfficiencyBase = option(
        "off",
        score=True,
        flags="--efficiency",
        help=(
            "BIRD's VES and R-VES, for items whose BIRD EX is defined: steps (exact SQLite VM steps, the same "
            "on any machine; SQLite only), time (the published 100-iteration wall-time ratio, on SQLite and the "
            "servers: depends on the machine and its load, decides nothing), or both."
        ),
    )
    """BIRD's efficiency readings (:mod:`rose_sql.readings.efficiency`): ``steps`` records each item's VM-step ratio
    (deterministic), ``time`` its published wall-time ratio (in fields of ``record.EXEMPT``), ``both``
    both. A recorded reading, so ``--resume`` refuses another value; the wall-time ratio never decides
    anything."""
    efficiency_budget_s: float | None = None
    """The wall-clock bound of one item's timed efficiency pass (``--efficiency time`` or ``both``: the
    prediction and the gold run one after the other, 100 times), from its start; past it the execution
    running is stopped and the item's ``efficiency.time_reason`` says so. None: ``timeout_s`` for each
    iteration, as the published script bounds an item (``meta_time_out * iterate_num``, ``--timeout``
    standing for its ``meta_time_out``). Each execution of the pass is bounded besides as any statement
    is (``max_steps``, ``timeout_s``, the worker's guard). A guard: the time ratio decides nothing."""
    judge: JudgeConfig | None = None
    """The LLM judges; None runs the deterministic stages only (items then await a judge)."""

    def with_(self, **changes: object) -> Self:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def time_pass_s(self, iterations: int) -> float:
        """The wall-clock bound of a timed pass of ``iterations`` (:attr:`efficiency_budget_s`)."""
        return self.efficiency_budget_s if self.efficiency_budget_s is not None else self.timeout_s * iterations

    @property
    def limits(self) -> Limits:
        """What one statement may take, on every engine."""
        return Limits(
            max_steps=self.max_steps,
            timeout_s=self.timeout_s,
            engine_timeout_s=self.server_timeout_s if self.server_timeout_s is not None else self.timeout_s,
            max_rows=self.max_rows,
            max_bytes=self.max_result_bytes,
            max_value_bytes=self.max_value_bytes,
            max_pattern_bytes=self.max_pattern_bytes,
            max_sql_chars=self.max_sql_chars,
            memory_bytes=max(16 * 2**20, min(self.engine_memory_bytes, self.worker_memory_bytes - INTERPRETER_BYTES)),
            temp_bytes=self.engine_temp_bytes,
            count_past_cap_steps=self.count_past_cap_steps,
            schema_steps=self.schema_max_steps,
        )


def console_config() -> Config:
    """The sandbox of ``rose review``'s page: the item's two queries and the annotator's own.

    The same read-only sandbox as ``rose run``, with interactive limits: a person waits for the answer,
    so a query gets about a second of work and a page of rows.
    """
    return Config(
        max_steps=SHORT_MAX_STEPS,
        timeout_s=10.0,
        max_rows=200,
        max_result_bytes=4 * 2**20,
        count_past_cap_steps=20_000_000,
        engine_memory_bytes=512 * 2**20,
        cache_cells=2_000_000,
        workers=2,  # worker processes: a query that runs away inside one SQLite call is stopped with its worker
        evidence=False,
    )


@dataclass(frozen=True, slots=True)
class RewardConfig:
    """Every constant of the reward, with its default. Built once and passed down."""

    preset: Preset = option(
        "rose",
        flags="--preset",
        help=(
            "The reward's formula: rose (syntax- and execution-aware, the default), or a published one: sql-r1, "
            "arctic, skyrl-sql, verl-text2sql, think2sql (docs/rewards.md)."
        ),
    )
    """``rose``: the reward this module describes; or a preset that computes what a published recipe computes
    (:mod:`rose_sql.reward.presets`): the other fields but the sandbox's bounds then do not apply."""
    match: float = 1.0
    """Execution reward when the results are equal under our comparator."""
    partial: float = 0.5
    """Execution reward for a near miss (see :func:`execution_outcome`)."""
    wrong: float = 0.0
    """Execution reward for a query that runs but returns other rows."""
    error: float = -1.0
    """Execution reward for a query that fails, is rejected by the sandbox, or when no SQL is found."""
    timeout: float = -0.5
    """Execution reward for a predicted query stopped at its step budget (``max_steps``) or the engine's
    memory limit, or confirmed to run away (stopped by its wall-clock guard twice, the second time alone
    with the guard doubled)."""
    partial_max_ratio: float = 4.0
    """Partial credit only when the larger row count is at most this times the smaller one: dropping a
    filter and returning the whole table is a superset of almost any gold."""
    partial_max_columns: int = 6
    """Column permutations are searched for partial credit up to this width (else columns as given)."""
    clause_weights: tuple[tuple[str, float], ...] = (
        ("select", 3.0),
        ("from", 3.0),
        ("where", 2.0),
        ("group", 1.0),
        ("having", 1.0),
        ("order", 1.0),
        ("limit", 0.5),
    )
    """Weight of each clause in the clause score (only clauses present in either query count)."""
    clause_mix: float = 0.4
    """Share of the clause score in the syntax reward; the rest is the whole-tree similarity."""
    max_ted_nodes: int = 300
    """Exact tree edit distance for clauses up to this many nodes; larger ones use the label-bag bound."""
    syntax: bool = True
    """Compute the syntax reward; False skips parsing and tree edit distance and weighs execution
    alone (alpha = 0, beta = 1): the cheapest reward, for when only results matter."""
    schedule: Schedule = option(
        "linear",
        flags="--schedule",
        help="How the syntax weight moves from --alpha-start to --alpha-end over --total-steps.",
    )
    """How alpha (the syntax weight) moves from ``alpha_start`` to ``alpha_end``; constant keeps alpha_start."""
    alpha_start: float = option(0.6, flags="--alpha-start", help="Syntax weight at step 0.")
    """Syntax weight at step 0 (syntax-heavy); beta = 1 - alpha weighs execution."""
    alpha_end: float = option(0.1, flags="--alpha-end", help="Syntax weight at the end.")
    """Syntax weight from ``total_steps`` on, and when no step is known (execution-heavy)."""
    total_steps: int = option(1000, flags="--total-steps", help="Steps of the schedule.")
    """Training steps over which the schedule moves."""
    clause_cap: float = 0.3
    """The clause part of the total may be at most this share of the total (none when the rest is <= 0)."""
    unscored: float = 0.0
    """What adapters that need a number (verl, OpenRLHF) give an unscored item; TRL gets None."""
    max_steps: int = option(
        SHORT_MAX_STEPS,
        flags="--max-steps",
        min=1000,
        help=(
            "SQLite steps one predicted query may take; past them it gets the timeout reward. The same on "
            "every machine (about 1-10 s of one core)."
        ),
    )
    """SQLite virtual-machine steps one predicted query may take; past them it is stopped and gets the
    ``timeout`` reward. Deterministic: the same on every machine and at any load (about 1-10 s of one
    core on a typical machine)."""
    gold_max_steps: int = 3_000_000_000
    """The same for a gold query (run once, then cached); past it the item is ``gold_error``."""
    timeout_s: float = option(
        15.0,
        flags="--timeout",
        min=0,
        min_open=True,
        help=(
            "Wall-clock guard, in seconds, of one predicted query (at most half of --deadline): past it the "
            "query is stopped, its worker process too if SQLite cannot interrupt it, and run again alone "
            "with the guard doubled; stopped again, it gets the timeout reward."
        ),
    )
    """Wall-clock guard of one predicted query, far behind its step budget: past it the query is stopped
    inside SQLite, or, inside a call SQLite cannot interrupt, by stopping its worker process
    ``guard_margin_s`` (5 s) later; then it runs again alone, in a fresh process, with the guard doubled. A
    runaway confirmed so gets the ``timeout`` reward, as one past its step budget does (a query that
    runs away never escapes its reward); one that then finishes is scored on that second run. Only a
    query left unrun by a deadline (the server's ``--deadline``) is unscored ``wall_guard``."""
    gold_timeout_s: float = 150.0
    """The same guard for a gold query; a gold confirmed to run away is ``gold_error``."""
    guard_margin_s: float = GUARD_MARGIN_S
    """Seconds past a query's own time limit after which its worker process is stopped (the wall guard)."""
    max_rows: int = 20_000
    """Rows kept per result; a gold past it is ``undecidable``, a prediction past it is ``wrong``."""
    max_sql_chars: int = 20_000
    """Longer extracted SQL is rejected (reward ``error``)."""
    float_digits: int = 12
    """Numbers compare after rounding to this many significant digits."""
    processes: int = option(
        factory=default_reward_processes,
        flags="--workers",
        min=1,
        help="Worker processes running the queries and scores (one per core, at most 8).",
    )
    """Worker processes running the queries, comparisons and syntax scores (at least 1: a query can only
    be stopped for sure in a process of its own). A batch goes to them in balanced chunks, a question's
    completions together, and each keeps its own caches. One per core by default, at most 8."""
    workers: int = option(
        2,
        flags="--query-threads",
        min=1,
        max=MAX_QUERY_THREADS,
        help="Threads running queries in each worker process (they join only while queries are slow).",
    )
    """Query threads of each worker process at most (1 to 16); SQLite releases the GIL while a query runs."""
    slow_query_s: float = 0.02
    """One thread runs a chunk's queries in turn; when every running query has taken this long,
    another thread joins (up to ``workers``), so slow queries overlap and fast ones do not contend."""
    memo_size: int = 50_000
    """Parses, (prediction, gold) syntax scores and clause-tree distances kept, each (LRU), so
    repeated completions cost nothing (0: none kept)."""
    cache_cells: int = 2_000_000
    """Result cells each of the two executors (gold, prediction) keeps cached (LRU beyond it)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.clause_cap < 1.0:
            raise ValueError("clause_cap must be in [0, 1)")
        if not 0.0 <= self.clause_mix <= 1.0:
            raise ValueError("clause_mix must be in [0, 1]")
        if self.schedule not in get_args(Schedule):
            raise ValueError(f"unknown schedule {self.schedule!r}")
        if self.preset not in get_args(Preset):
            raise ValueError(f"unknown reward preset {self.preset!r}: one of {', '.join(get_args(Preset))}")
        if self.total_steps <= 0 or self.slow_query_s < 0:
            raise ValueError("total_steps must be positive and slow_query_s not negative")
        if self.processes < 1:
            raise ValueError(
                "processes must be at least 1: queries run in worker processes, where a guard can stop them"
            )
        if not 1 <= self.workers <= MAX_QUERY_THREADS:
            raise ValueError(f"workers (query threads per process) must be between 1 and {MAX_QUERY_THREADS}")
        if min(self.max_steps, self.gold_max_steps) < 1000 or min(self.timeout_s, self.gold_timeout_s) <= 0:
            raise ValueError(
                "max_steps and gold_max_steps must be at least 1000, timeout_s and gold_timeout_s positive"
            )

    def sandbox(self, *, gold: bool) -> Config:
        """The sandbox of predictions (``gold`` false) or golds: a step budget that decides, a wall guard, and
        no counting past the row cap (a result past it is never equal: its exact size does not matter)."""
        return Config(
            max_steps=self.gold_max_steps if gold else self.max_steps,
            timeout_s=self.gold_timeout_s if gold else self.timeout_s,
            max_rows=self.max_rows,
            max_sql_chars=self.max_sql_chars,
            float_digits=self.float_digits,
            count_past_cap_steps=0,
            workers=1,
            cache_cells=self.cache_cells,
            guard_margin_s=self.guard_margin_s,
        )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RewardConfig:
        """A config from the keys of ``values`` that name fields (others are ignored)."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in values.items() if k in names}
        if isinstance(kw.get("clause_weights"), Mapping):
            kw["clause_weights"] = tuple(kw["clause_weights"].items())
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """How the reward server (``rose serve-reward``) listens and answers, and every bound it keeps."""

    db_root: Source
    """A folder holding ``<db_id>/<db_id>.sqlite`` (labels cannot name files outside it), or the URL of
    another engine's databases (labels name a db_id)."""
    host: str = option("127.0.0.1", flags="--host", help="Address to bind (loopback by default).")
    """Address to bind (loopback by default)."""
    port: int = option(5000, flags="--port", help="TCP port (0: any free one).")
    """TCP port (0 picks a free one)."""
    deadline_s: float = option(
        30.0,
        flags="--deadline",
        min=0,
        min_open=True,
        help=(
            "Seconds within which every request is answered once its body is in; items not scored by then "
            "are unscored with the reason, the others of the request scored."
        ),
    )
    """Every request is answered within this after its body arrived; an item not scored by then is
    unscored (``wall_guard``) with the reason, the others of the request are scored. No chunk of a
    request starts queries for more than half of it, and both wall guards of ``reward`` are capped at
    half of it, so a request that comes later waits for a worker at most about that long."""
    header_timeout_s: float = option(
        10.0,
        flags="--header-timeout",
        min=0,
        min_open=True,
        help="Seconds a request's head may take to arrive; idle kept-alive connections are closed after it.",
    )
    """A request's head (request line and headers) must arrive within this, counted from when the server
    starts waiting for it; a kept-alive connection idle that long is closed."""
    body_timeout_s: float = option(
        60.0,
        flags="--body-timeout",
        min=0,
        min_open=True,
        help="Seconds a request's whole body may take to arrive, whatever the pace (408 past it).",
    )
    """A request's whole body must arrive within this after its head, whatever the pace (408 past it);
    the answer must be taken by the client within it too."""
    max_head_bytes: int = 16 * 2**10
    """Larger request heads are refused (431)."""
    max_body_bytes: int = 32 * 2**20
    """Larger request bodies are refused (413), before they are read."""
    max_items: int = option(4096, flags="--max-items", min=1, help="Completions one request may hold (413 beyond).")
    """Completions one request may hold (413 beyond)."""
    max_json_values: int = 500_000
    """JSON values (strings, numbers, arrays, objects) one body may hold, counted before it is decoded
    (413 beyond): bounds the memory decoding takes (a tiny value costs 50-100 bytes once decoded)."""
    max_pending_bytes: int = 128 * 2**20
    """Request bodies held at once, from their head until their answer (503 with ``Retry-After``
    beyond): bounds the memory of many bodies streamed in slowly."""
    max_connections: int = option(
        256,
        flags="--max-connections",
        min=1,
        help="Open connections at once; past it new ones are answered 503 with Retry-After (health checks still 200).",
    )
    """Open connections at once. Past it a new connection has 1 s to send its head and is answered 503
    with ``Retry-After`` (a health check still gets its answer), then closed; past five times it, a
    connection is answered 503 and closed unread."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """The reward itself."""

    def __post_init__(self) -> None:
        if min(self.deadline_s, self.header_timeout_s, self.body_timeout_s) <= 0:
            raise ValueError("deadline_s, header_timeout_s and body_timeout_s must be positive")
        if min(self.max_head_bytes, self.max_body_bytes, self.max_items, self.max_json_values) < 1:
            raise ValueError("max_head_bytes, max_body_bytes, max_items and max_json_values must be positive")
        if self.max_pending_bytes < self.max_body_bytes or self.max_connections < 1:
            raise ValueError("max_pending_bytes must hold at least one body of max_body_bytes; max_connections >= 1")


MAX_INPUT_BYTES = 256 * 2**20
"""Largest prediction or gold file read (``rose run --max-input-mb``): 250 times BIRD dev's largest
prediction file, and small enough that parsing it stays within a few GiB of memory."""
BATCH_MAX_REQUESTS = 50_000
"""Requests one Batch API batch may hold (``rose run --batch``; OpenAI's limit)."""
BATCH_MAX_BYTES = 200 * 1024 * 1024
"""Bytes one Batch API batch's input file may have (OpenAI's limit: 200 MB)."""
BATCH_MAX_ATTEMPTS = 3
"""Times a request is sent in a batch before its call fails (the item: ``judge_error``)."""
BATCH_POLL_S = 30.0
"""Seconds between two polls of a batch (a batch takes minutes to hours)."""
SELECT_MAX_CANDIDATES = 300_000
"""Most candidates ``rose select`` scores (runs under policies, and their panels): measured, 57,650 candidates
over 322 items and 11 folds take 4.4 s and 90 MB, so this bound about 25 s of one core and a few hundred MB.
The published judges' ROSE-VEC BIRD runs in the o3-class pool, under four policies, panels of three, make 4,976."""
BATCH_LINE_ENVELOPE_BYTES = 64 * 2**10
"""Bytes a line of a Batch API output or error file may have besides the reply it carries: a line is read at most
the chat reply's cap (``JudgeConfig.max_reply_bytes``, 1 MiB) plus this. A longer line is read no further: its
request fails (``judge_error`` once its attempts are spent), as a chat reply past the cap does."""
BATCH_FILE_LINE_SLACK = 16
"""Lines of a batch's output or error file allowed besides one per request of the batch: each file is read at
most ``(requests + this)`` lines' caps, and at most :data:`BATCH_MAX_FILE_BYTES`; the requests it did not
answer by then fail (sent again in the next round)."""
BATCH_MAX_FILE_BYTES = 4 * 2**30
"""Bytes of a Batch API output or error file read at most, whatever the batch holds."""

MAX_RECORD_LINE_BYTES = 64 * 2**20
"""Bytes one line of a run's ``records.jsonl`` may have when it is read back (``rose compare``, ``diff``,
``report``, ``--resume``...): a record holds its judge calls, each reply read at most 1 MiB
(``JudgeConfig.max_reply_bytes``), four calls a stage at most without votes. A longer line is refused, naming
the file and line (exit 2), read no further: the reader's memory is bounded whatever the file's size."""
MAX_SUMMARY_BYTES = 64 * 2**20
"""Bytes a run's ``summary.json`` may have (figures, usage, the manifest: a few KiB to a few MiB)."""
MAX_MANIFEST_BYTES = 16 * 2**20
"""Bytes a run's ``manifest.json`` may have (the inputs, databases and options of a run: a few KiB)."""
MAX_TABLE_LINE_BYTES = 16 * 2**20
"""Bytes one line of a labels, ids or scores file in JSON Lines or CSV may have (a row holds a question and two
SQL texts)."""
MAX_LOG_LINE_BYTES = 16 * 2**20
"""Bytes one line of a run's ``batches.jsonl`` may have (an upload's custom ids, about 100 bytes a request)."""

GGUF_MAX_HEADER_BYTES = 64 * 2**20
"""Bytes of a GGUF file's header (metadata and tensor table, up to where the tensors' data begins) read at
most (``--judge-gguf``): a model's vocabulary makes it a few MiB."""
GGUF_MAX_ITEMS = 1_000_000
"""Metadata entries, tensors, array elements or dimensions a GGUF header may declare, each, at most."""
