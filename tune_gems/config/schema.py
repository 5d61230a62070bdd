"""The validated configuration of one training run. Every default is the embedded run on the
synthetic series; unknown keys are refused everywhere, so a typo never becomes a default."""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, field_validator, model_validator

from tune_gems.config.arms_section import ArmsConfig
from tune_gems.data.series import DEFAULT_EDGE
from tune_gems.data.segments import MAX_FOLDS
from tune_gems.data.histories import MAX_HISTORIES, SYNTHETIC_NAME, HistorySpec, specs_problem
from tune_gems.gems import registry
from tune_gems.contracts.paths import path_problem

DEFAULT_MOMENTUM_SPAN = 20.0
"""`evaluation.DEFAULT_MOMENTUM_SPAN`'s value (the config stays free of torch)."""

MAX_COUNT = 10**9
"""Upper bound of epoch / iteration / period counts: beyond it a run is a typo, not a plan."""

MAX_CHECKPOINT_INTERVAL_S = 1e9

MAX_TEXT = 4096
"""Longest string value in a config or spec: a longer one is a pasted file, not a setting."""


MAX_SYNTHETIC_N = 1_000_000
"""Most synthetic prices: the generator is a Python loop (about 3 s per million prices and path)."""

SUPPORT_LIMIT = 1e6
"""Largest |v_min|, |v_max| of the C51 support: beyond it the atom spacing overflows float32."""


def _yaml_switch(v: Any) -> Any:
    """YAML 1.1 reads bare `off` / `on` as booleans; where a choice is spelled off/on, map back."""
    return {False: "off", True: "on"}.get(v, v) if isinstance(v, bool) else v


GemMode = Annotated[Literal["off", "measure", "wire"], BeforeValidator(_yaml_switch)]


class _Strict(BaseModel):
    """Base of every config model: unknown keys, NaN, infinity and silent coercion refused."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True, str_max_length=MAX_TEXT)


def _edge_periods(v: Any) -> Any:
    """`[[start, edge], ...]`: starts strictly increasing fractions of the path, the first 0."""
    if v is None:
        return v
    if not isinstance(v, (list, tuple)) or not v or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in v):
        raise ValueError("give a list of [start_fraction, edge] pairs, e.g. [[0, 0.8], [0.5, 0]]")
    starts = [p[0] for p in v]
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) for p in v for x in p):
        raise ValueError("every start and edge must be a number")
    if starts[0] != 0 or any(not a < b for a, b in zip(starts, starts[1:])) or starts[-1] >= 1:
        raise ValueError(f"period starts must begin at 0, increase strictly and stay below 1, got {starts}")
    return [[float(x) for x in p] for p in v]


class SyntheticConfig(_Strict):
    """The seeded regime-switching series used when `data.source` is synthetic."""

    n: int = Field(6000, ge=200, le=MAX_SYNTHETIC_N, description="number of prices")
    seed: int = Field(7, ge=0, description="seed of the series (per_seed paths: of seed index 0, then +1 per index)")
    edge: float = Field(DEFAULT_EDGE, ge=0.0, le=1.0, description="strength of the learnable momentum edge (0: none)")
    paths: Literal["per_seed", "shared"] = Field(
        "per_seed",
        description="per_seed (default): seed index s trains and evaluates on its own path, seed "
        "`data.synthetic.seed + s`, the same in every arm, so the spread over seeds includes market noise "
        "(docs/data.md); shared: one path (seed `data.synthetic.seed`) for every member",
    )
    edge_periods: Annotated[list[list[float]] | None, BeforeValidator(_edge_periods)] = Field(
        None,
        description="regimes in time: [[start_fraction, edge], ...] (first start 0); from each start on the edge "
        "is that period's instead of `edge` (e.g. [[0, 0.8], [0.5, 0]]: an edge that vanishes half-way); none: `edge` throughout",
    )

    @model_validator(mode="after")
    def _period_edges(self) -> "SyntheticConfig":
        if self.edge_periods is not None and any(not 0.0 <= e <= 1.0 for _, e in self.edge_periods):
            raise ValueError("data.synthetic.edge_periods: every edge must lie in [0, 1]")
        return self


class FoldsConfig(_Strict):
    """Folds on the population axis (docs/data.md "Walk-forward folds" and "Purged
    cross-validation"): `k` validation periods before the test segment, one set of members per
    period, the test segment the same for every fold; k = 1 with the defaults is the plain
    train / validation / test split.

    `scheme: walk_forward` (the default): the history ends in `k` successive validation windows
    of `val_length` rows; fold k trains on the rows before its own window (less `gap`).
    `scheme: purged`: the history is cut into `k` groups of `val_length` rows; fold k validates on
    group k and trains on the rows before and after it, less a purge (the rows a training
    decision's observation window or n-step targets would share with the group: `env.window`
    and `trainer.n_step`) and `embargo` rows after it. Either way a fold is normalised on its own
    training rows."""

    k: int = Field(1, ge=1, le=MAX_FOLDS, description="number of folds (walk-forward windows, or purged groups)")
    scheme: Literal["walk_forward", "purged"] = Field(
        "walk_forward",
        description="walk_forward: successive validation windows, each fold trains on the rows before its own; "
        "purged: k groups, each fold validates on one and trains on the others (purged and embargoed)",
    )
    layout: Literal["expanding", "rolling"] = Field(
        "expanding",
        description="walk_forward only. expanding: fold k trains on every row before its validation window (less the gap); "
        "rolling: on the `train_length` rows before it",
    )
    val_length: int | None = Field(
        None,
        ge=2,
        description="rows per validation window or group (default walk_forward: the validation segment of data.splits; "
        "purged: the history before the test segment, less env.window rows, in k equal groups)",
    )
    gap: int = Field(0, ge=0, description="walk_forward only: rows left out between a fold's training window and its validation window")
    train_length: int | None = Field(
        None, ge=2, description="rolling only: rows of every training window (default: fold 0's, the longest all folds have)"
    )
    embargo: int = Field(
        0, ge=0, description="purged only: rows after each validation group that no training decision reads (beyond the purge)"
    )

    @model_validator(mode="after")
    def _keys_of_the_scheme(self) -> "FoldsConfig":
        if self.train_length is not None and self.layout != "rolling":
            raise ValueError("data.folds.train_length is for layout rolling only (an expanding window starts at row 0)")
        if self.scheme == "walk_forward" and self.embargo:
            raise ValueError("data.folds.embargo is for scheme purged only (walk-forward leaves rows out with data.folds.gap)")
        if self.scheme == "purged":
            if self.k < 2:
                raise ValueError("data.folds.k: scheme purged needs at least 2 groups (one validates while the others train)")
            if self.layout != "expanding":
                raise ValueError("data.folds.layout is for scheme walk_forward only (a purged fold trains on every other group)")
            if self.gap:
                raise ValueError("data.folds.gap is for scheme walk_forward only (purged folds drop the purge and data.folds.embargo)")
        return self


def _printable(v: str | None) -> str | None:
    """A path or column name without NUL or other control characters."""
    if v is not None and any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError("must not contain NUL or other control characters")
    return v


def _stem(path: str) -> str:
    """A file's name without its suffixes (`data/sp500.csv.gz` -> `sp500`)."""
    name = Path(path).name
    return name.split(".", 1)[0] or name


def _path_within_limits(v: str | None) -> str | None:
    """A path the filesystem takes (a URL is read by its own reader)."""
    problem = path_problem(v) if v is not None and "://" not in v else None
    if problem is not None:  # else `OSError: File name too long` from the first look at it
        raise ValueError(problem)
    return v


class HistoryConfig(_Strict):
    """One price history of a run (docs/data.md "Several price histories"): a file's price column,
    its own market on the population axis. Every key may be left out where `data` gives it."""

    name: str | None = Field(
        None, description="the history's name in the results (default: its file's stem when it has its own path, else its price column)"
    )
    path: str | None = Field(None, description="its CSV or Parquet file (default: data.path)")
    price_column: str | None = Field(None, description="its price column (default: data.price_column)")
    time_column: str | None = Field(None, description="its time column (default: data.time_column)")

    _text = field_validator("name", "path", "price_column", "time_column")(_printable)
    _path = field_validator("path")(_path_within_limits)


class DataConfig(_Strict):
    source: Literal["synthetic", "file"] = Field(
        "synthetic", description="synthetic: the seeded series of data.synthetic; file: the prices in data.path"
    )
    path: str | None = Field(None, description="CSV or Parquet file of prices (needs data.source=file; docs/data.md)")
    price_column: str = Field("close", description="column of the file holding the prices (case and spaces ignored)")
    time_column: str | None = Field(
        None, description="column of timestamps; none: a column named date, datetime, time or timestamp, else row numbers"
    )
    splits: list[Union[float, str, _dt.date]] = Field(
        default_factory=lambda: [0.7, 0.15, 0.15],
        description="train/val/test fractions summing to 1, or two dates: [val_start, test_start]",
    )
    price_columns: list[str] | None = Field(
        None,
        max_length=MAX_HISTORIES,
        description="several price histories from the one file data.path: one column each, sharing its time column "
        "(members = histories x folds x arms x seeds; docs/data.md); none: one history, data.price_column",
    )
    histories: list[HistoryConfig] | None = Field(
        None,
        max_length=MAX_HISTORIES,
        description="several price histories, one entry each ({name, path, price_column, time_column}, defaults from "
        "data.path, data.price_column, data.time_column): several files, or columns of one; each on its own dates or "
        "one calendar, every history as many rows (a fold is the same rows of each)",
    )
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig)
    folds: FoldsConfig = Field(default_factory=FoldsConfig)
    sealed: Union[int, float] = Field(
        0,
        description="rows kept from the search at the end of every history, a fraction (0.15) or a count (750); data.splits "
        "cut the rows before them; opened once by `tune-gems confirm --final` (docs/data.md \"The sealed segment\"); 0: none",
    )

    @field_validator("splits", mode="before")
    @classmethod
    def _check_splits(cls, v: list) -> list:
        if not isinstance(v, (list, tuple)):
            raise ValueError("give three fractions [train, val, test] or two ISO dates [val_start, test_start]")
        if len(v) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            if any(x <= 0 for x in v):
                raise ValueError("fractions must all be > 0")
            if abs(sum(v) - 1.0) > 1e-6:
                raise ValueError(f"fractions must sum to 1 (got {sum(v):g})")
            return [float(x) for x in v]
        if len(v) == 2 and all(isinstance(x, (str, _dt.date)) for x in v):
            try:
                a, b = (_dt.date.fromisoformat(str(x)[:10]) for x in v)
            except ValueError as e:
                raise ValueError(f"dates must be ISO dates YYYY-MM-DD ({e})") from None
            if not a < b:
                raise ValueError("validation start must be before test start")
            return [str(x)[:10] for x in v]
        raise ValueError("give three fractions [train, val, test] or two ISO dates [val_start, test_start]")

    @field_validator("sealed", mode="before")
    @classmethod
    def _check_sealed(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < (1 if isinstance(v, float) else math.inf):
            raise ValueError("give a fraction of the rows in [0, 1) or a whole number of rows >= 0")
        return v

    _text = field_validator("path", "price_column", "time_column")(_printable)
    _path = field_validator("path")(_path_within_limits)

    @property
    def price_histories(self) -> tuple[HistorySpec, ...]:
        """The price histories this config names, in order (the members' history index; no file is read): the synthetic
        series, or `path`'s `price_column` (one history), or one per `price_columns` entry (named after its column; the
        file, time column shared), or one per `histories` entry (its path, price and time columns defaulting to `path`,
        `price_column`, `time_column`; named `name`, else its file's stem when it has its own file, else its column).
        The validation refuses duplicate or malformed names."""
        if self.source == "synthetic":
            return (HistorySpec(SYNTHETIC_NAME, None, self.price_column, None),)
        if self.price_columns:
            return tuple(HistorySpec(c.strip(), self.path, c, self.time_column) for c in self.price_columns)
        if not self.histories:
            return (HistorySpec(_stem(self.path) if self.path else self.price_column, self.path, self.price_column, self.time_column),)
        out = []
        for h in self.histories:
            column = h.price_column or self.price_column
            name = h.name if h.name is not None else _stem(h.path) if h.path else column
            out.append(HistorySpec(name.strip(), h.path or self.path, column, self.time_column if h.time_column is None else h.time_column))
        return tuple(out)

    @property
    def histories_key(self) -> str:
        """The config key that lists the histories (for messages): `data.price_columns`,
        `data.histories`, or `data.path` for one history."""
        return "data.price_columns" if self.price_columns else "data.histories" if self.histories else "data.path"

    @field_validator("price_columns")
    @classmethod
    def _columns_printable(cls, v: list[str] | None) -> list[str] | None:
        for column in v or ():
            _printable(column)
        return v

    @model_validator(mode="after")
    def _histories(self) -> "DataConfig":
        """Several histories: a file source, one way of listing them, a name each (no two alike)."""
        if self.price_columns is None and self.histories is None:
            return self
        key = "data.price_columns" if self.price_columns is not None else "data.histories"
        if self.price_columns is not None and self.histories is not None:
            raise ValueError("data.price_columns and data.histories: give one (price_columns: columns of data.path; "
                             "histories: one entry per file or column)")
        if self.source != "file":
            raise ValueError(f"{key} needs data.source=file (the synthetic series is one history; data.synthetic.paths "
                             "gives each seed index its own path)")
        if not (self.price_columns or self.histories):
            raise ValueError(f"{key}: an empty list; name at least one history (or drop the key)")
        if self.price_columns is not None:
            if not self.path:
                raise ValueError("data.price_columns: the columns are read from data.path, which is not set")
            if self.price_column != DataConfig.model_fields["price_column"].default:
                raise ValueError(f"data.price_column ({self.price_column!r}) and data.price_columns: give one "
                                 "(price_columns lists every history's column)")
        problem = specs_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _path_for_file(self) -> "DataConfig":
        if self.source == "file" and not self.path:
            without = [i for i, h in enumerate(self.histories or ()) if not h.path]
            if not self.histories:
                raise ValueError("data.path is required when data.source is file")
            if without:
                raise ValueError(f"data.histories.{without[0]}.path is required when data.source is file "
                                 "(or set data.path, the file of every entry without one)")
        if self.sealed and self.source != "file":
            raise ValueError("data.sealed seals rows of a price file (data.source=file); a synthetic series is regenerated "
                             "from its seed, and confirm gives per-seed paths the search never saw")
        if self.source == "file" and self.synthetic.edge_periods is not None:  # else ignored without a word
            raise ValueError("data.synthetic.edge_periods shapes the synthetic series, but data.source is file: "
                             "drop it (a price file has its own regimes)")
        if self.source == "synthetic" and self.path:  # else the run would quietly train on the synthetic series
            raise ValueError(
                f"data.path is set ({self.path!r}) but data.source is synthetic: add data.source=file to train on "
                "the file (or drop data.path)"
            )
        return self


class EnvConfig(_Strict):
    window: int = Field(32, ge=2, le=1024, description="past log returns in an observation")
    episode_length: int = Field(256, ge=8, description="steps before an environment restarts")
    cost: float = Field(5e-4, ge=0.0, lt=0.1, description="transaction cost, fraction of |position change|")
    reward_scale: float = Field(100.0, gt=0.0, le=1e6, description="reward multiplier for learning (returns are tiny)")
    directions: list[float] = Field(default_factory=lambda: [-1.0, 0.0, 1.0],
        description="position directions of the first action branch, each in [-1, 1]")
    sizes: list[float] = Field(default_factory=lambda: [1 / 3, 2 / 3, 1.0],
        description="position sizes of the second action branch, each in (0, 1]; position = direction x size")
    periods_per_year: float = Field(252.0, gt=0.0, le=1e8, description="price periods per year, to annualise Sharpe ratios (252: daily)")
    momentum_span: float = Field(DEFAULT_MOMENTUM_SPAN, ge=1.0, le=1e6, description="EWMA span (steps) of the momentum baseline")

    @model_validator(mode="after")
    def _same_width(self) -> "EnvConfig":
        if len(self.directions) != len(self.sizes) or len(self.directions) < 2:
            raise ValueError("env.directions and env.sizes must have the same length (>= 2): one sub-action each")
        if any(abs(d) > 1 for d in self.directions) or any(not 0 < s <= 1 for s in self.sizes):
            raise ValueError("env.directions must lie in [-1, 1] and env.sizes in (0, 1]")
        return self


class ModelConfig(_Strict):
    hidden: int = Field(128, ge=4, description="trunk width (latent h)")
    trunk_layers: int = Field(2, ge=1, le=8, description="layers of the shared trunk")
    stream_hidden: int = Field(64, ge=4, description="width of value/advantage stream features (G6's D)")
    atoms: int = Field(51, ge=3, le=1024, description="atoms of the C51 return distribution")
    v_min: float = Field(-5.0, ge=-SUPPORT_LIMIT, le=SUPPORT_LIMIT, description="lowest return of the C51 support")
    v_max: float = Field(5.0, ge=-SUPPORT_LIMIT, le=SUPPORT_LIMIT, description="highest return of the C51 support")
    spectral_norm: bool = Field(True, description="spectral normalisation of the trunk's weights (a per-member key, arms may differ)")
    noisy: bool = Field(True, description="NoisyNet layers in the value and advantage streams (off: epsilon-greedy; a per-member key)")
    noisy_sigma0: float = Field(0.5, gt=0.0, le=100.0, description="initial NoisyNet noise scale (sigma = sigma0 / sqrt(inputs))")
    predictor_hidden: int = Field(128, ge=4, description="hidden width of the G12 predictor head")
    layer_kernel: Literal["auto", "torch", "triton"] = Field("auto",
        description="the layers' products: torch (batched matmuls in member blocks; the reference) or triton (Triton kernels with the "
        "NoisyNet weight, spectral norm's 1/sigma, bias and ReLU fused and no member blocks; needs the triton package, and CUDA or "
        "TRITON_INTERPRET=1); auto: triton on CUDA where the triton package is installed (faster there), else torch")

    @model_validator(mode="after")
    def _support(self) -> "ModelConfig":
        if not self.v_min < self.v_max:
            raise ValueError("model.v_min must be below model.v_max")
        return self


class GemConfig(_Strict):
    mode: GemMode = Field("measure",
        description="off: not computed; measure: computed and logged, training untouched; wire: weight x value added to the loss")
    weight: float = Field(0.1, ge=0.0, le=1e3, description="the gem's loss weight when wired (unused otherwise)")


def gems_model(plugins: tuple[str, ...] = ()) -> type[_Strict]:
    """The `gems` section of a run with these plug-ins: a GemConfig per gem, in registry order."""
    names = tuple(g.name for g in registry.run_gems(plugins))
    key = (tuple(plugins), names)
    if key not in _GEMS_MODELS:
        fields: dict[str, Any] = {
            g.name: (GemConfig, Field(default_factory=GemConfig, description=g.description))
            for g in registry.run_gems(plugins)
        }
        _GEMS_MODELS[key] = create_model("GemsConfig", __base__=_Strict, __doc__="Per-gem mode and weight.", **fields)
    return _GEMS_MODELS[key]


_GEMS_MODELS: dict[tuple, type[_Strict]] = {}
GemsConfig = gems_model()


class TrainerConfig(_Strict):
    population: int = Field(4, ge=1, le=4096,
        description="seeds per arm and fold: a run trains P = folds x arms x population members in lockstep")
    epochs: int = Field(6, ge=1, le=MAX_COUNT, description="epochs of the run; each ends with a validation pass")
    iterations_per_epoch: int = Field(150, ge=1, le=MAX_COUNT, description="training iterations (collect + learn) per epoch")
    batch_size: int = Field(64, ge=2, description="replay transitions per member per learning step")
    n_envs: int = Field(8, ge=1, description="environments per member")
    replay_capacity: int = Field(20000, ge=64, description="transitions per member")
    learning_starts: int = Field(512, ge=0, description="transitions per member collected before learning")
    n_step: int = Field(3, ge=1, le=64, description="steps of the n-step return in the C51 target")
    gamma: float = Field(0.97, gt=0.0, le=1.0, description="discount factor per step")
    lr: float = Field(5e-4, gt=0.0, le=10.0, description="Adam learning rate (a per-member key, arms may differ)")
    adam_eps: float = Field(1.5e-4, gt=0.0, le=1.0, description="Adam's epsilon")
    replay_stream: int = Field(0, ge=0, le=2**20,
        description="nuisance stream of replay sampling: 0 = the member seed's own draws; another value samples the replay batches from an "
        "independent stream, everything else equal (an A/A arm: the learner's own null spread, docs/analysis.md)")
    grad_clip: float = Field(10.0, gt=0.0, le=1e6,
        description="max gradient norm, per member and per group (the shared network; each gem head)")
    target_update: int = Field(200, ge=1, le=MAX_COUNT, description="hard target update period in iterations (used when tau is 0)")
    tau: float = Field(0.0, ge=0.0, le=1.0, description="Polyak rate per iteration; 0 = hard updates")
    epsilon_start: float = Field(1.0, ge=0.0, le=1.0, description="epsilon-greedy start (NoisyNets off only)")
    epsilon_end: float = Field(0.05, ge=0.0, le=1.0, description="epsilon-greedy floor (NoisyNets off only)")
    epsilon_decay_iterations: int = Field(2000, ge=1, le=MAX_COUNT,
        description="iterations over which epsilon falls linearly from epsilon_start to epsilon_end")
    precision: Literal["fp32", "tf32", "bf16"] = Field("tf32",
        description="matmul precision on CUDA (tensor cores; fp32 for exact comparisons); gem, loss and optimizer math stay fp32; CPU "
        "always runs fp32")
    graph: Annotated[Literal["auto", "on", "off"], BeforeValidator(_yaml_switch)] = Field("auto", description="CUDA graph capture of the iteration")
    checkpoint_interval_s: float = Field(300.0, ge=0.0, le=MAX_CHECKPOINT_INTERVAL_S,
        description="seconds of training between checkpoints: one is written at the first epoch boundary this long after the last (0: no "
        "time trigger); one is always written at the end and on SIGTERM/SIGINT (docs/checkpoints.md)")
    checkpoint_every: int = Field(0, ge=0, le=MAX_COUNT,
        description="also checkpoint every this many epochs (0: no epoch trigger; 1: every epoch)")
    divergence_threshold: float = Field(1e6, gt=0.0, le=1e30, description="|loss| above this counts as diverged")
    objective_last_k: int = Field(3, ge=1, description="epochs averaged by the *_lastk search objectives (the last min(k, epochs so far))")

    @model_validator(mode="after")
    def _fits(self) -> "TrainerConfig":
        if self.replay_capacity < self.n_envs * (self.n_step + 1):
            raise ValueError("trainer.replay_capacity must hold at least n_envs * (n_step + 1) transitions")
        if self.learning_starts > self.replay_capacity:
            raise ValueError("trainer.learning_starts cannot exceed trainer.replay_capacity")
        return self


MAX_SEED_INDEX = 2**31


class Config(_Strict):
    seed: int = Field(0, ge=0, description="seed of the member seeds: runs with the same seed pair their members seed by seed")
    first_seed_index: int = Field(0, ge=0, le=MAX_SEED_INDEX,
        description="the design's seed index of this run's first seed: the run trains seed indices [first_seed_index, first_seed_index + "
        "trainer.population), and seed index s gets the member seed, synthetic path and `seed_index` of seed index s of a run with every "
        "seed (a seed block, docs/cluster.md)")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="where to train; auto: the current CUDA device if there is one, else the CPU")
    kernels: Literal["auto", "cuda", "reference"] = Field("auto",
        description="gem ops: cuda (the built kernels), reference (plain torch); auto: cuda where it builds, else reference")
    data: DataConfig = Field(default_factory=DataConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    gems: GemsConfig = Field(default_factory=GemsConfig)
    plugins: list[str] = Field(default_factory=list, description="modules imported before validation; each registers gems (docs/gems.md)")
    arms: ArmsConfig | None = Field(None,
        description="several configurations on the population axis (tune_gems.design.arms); none: one arm")

    def gem(self, name: str) -> GemConfig:
        return getattr(self.gems, name)

    def gem_names(self) -> tuple[str, ...]:
        """The gems this run knows (built-ins, then its plug-ins'), in registry order."""
        return tuple(type(self.gems).model_fields)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (aliases as in YAML; no `arms` key without arms): build_config(to_dict()) == self."""
        d = self.model_dump(mode="json", by_alias=True)
        if d.get("arms") is None:
            d.pop("arms", None)
        return d

    def label(self) -> str:
        """The configuration a run belongs to for analysis: gem modes and switches (weights are columns)."""
        gems = " ".join(f"{n}={self.gem(n).mode}" for n in self.gem_names())
        onoff = {True: "on", False: "off"}
        return f"{gems} sn={onoff[self.model.spectral_norm]} noisy={onoff[self.model.noisy]}"
