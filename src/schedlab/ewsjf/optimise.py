"""Bayesian meta-optimisation beside the engine (optuna's TPE sampler, ask/tell).

The tuner runs as it would beside a server: the policy asks it for parameters, runs one
trial of ``trial_s`` seconds (of the engine's clock) with them, and hands back the trial's
reward terms; the tuner scores the trial (:func:`.reward.reward`), tells optuna, and asks for
the next parameters. After ``max_trials`` it keeps the best parameters found.
"""

from __future__ import annotations

import math

import optuna
import pandas as pd
from optuna.distributions import FloatDistribution, IntDistribution

from schedlab.errors import SchedlabError
from schedlab.ewsjf.policy import Params
from schedlab.ewsjf.reward import Lambdas, reward
from schedlab.ewsjf.score import Weights

#: The search space: the urgency and fairness weights' slopes (per 1,000 tokens) and
#: intercepts, alpha and max_queues. The base weight stays 1: the score's scale is arbitrary.
SPACE = {
    "a_urg": FloatDistribution(-1.0, 1.0),
    "b_urg": FloatDistribution(0.01, 10.0, log=True),
    "a_fair": FloatDistribution(-1.0, 1.0),
    "b_fair": FloatDistribution(0.01, 10.0, log=True),
    "alpha": FloatDistribution(1.5, 8.0),
    "max_queues": IntDistribution(4, 32),
}
WEIGHTS = ("a_urg", "b_urg", "a_fair", "b_fair")


def params_of(values: dict) -> Params:
    return Params(Weights(**{k: values[k] for k in WEIGHTS}), values["alpha"], int(values["max_queues"]))


def checked_params(values, source) -> Params:
    """EWSJF parameters read from ``source`` (the tuning study's ``--out-params``): exactly the
    keys of :data:`SPACE`, each a number (``max_queues`` a whole one) within the range the study
    searches, where the score has been tried; one line naming the key otherwise."""
    if not isinstance(values, dict):
        raise SchedlabError(f"{source}: not EWSJF parameters (a JSON object of {', '.join(SPACE)})")
    wrong = sorted(set(SPACE) ^ set(values))
    if wrong:
        what = "unknown" if wrong[0] in values else "missing"
        raise SchedlabError(f"{source}: not EWSJF parameters ({what} key {wrong[0]!r}; the keys are {', '.join(SPACE)})")
    for key, space in SPACE.items():
        value, whole = values[key], isinstance(space, IntDistribution)
        number = isinstance(value, int) if whole else isinstance(value, (int, float)) and math.isfinite(value)
        if isinstance(value, bool) or not number or not space.low <= value <= space.high:
            raise SchedlabError(f"{source}: key {key!r} must be a {'whole number' if whole else 'number'} from "
                                f"{space.low:g} to {space.high:g} (the tuning study's range), got {value!r}")
    return params_of(values)


def values_of(params: Params) -> dict:
    w = params.weights
    return {**{k: getattr(w, k) for k in WEIGHTS}, "alpha": params.alpha, "max_queues": params.max_queues}


class Tuner:
    """Trials of ``trial_s`` seconds; ``n_startup`` random trials, then TPE (multivariate)."""

    def __init__(
        self,
        trial_s: float,
        *,
        lambdas: Lambdas = Lambdas(),
        seed: int = 0,
        n_startup: int = 4,
        max_trials: int | None = None,
        start: Params | None = None,
    ) -> None:
        if not trial_s > 0:
            raise SchedlabError(f"trial_s must be positive, got {trial_s}")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup, multivariate=True)
        self.study = optuna.create_study(direction="maximize", sampler=sampler)
        if start is not None:
            self.study.enqueue_trial(values_of(start))
        self.trial_s, self.lambdas, self.max_trials = trial_s, lambdas, max_trials
        self.start_s: float | None = None
        self.end_s: float | None = None
        self.history: list[dict] = []
        self._trial = None

    def _ask(self, now: float) -> Params:
        self.start_s = now
        if self.max_trials is not None and len(self.history) >= self.max_trials:
            self._trial, self.end_s = None, math.inf
            return self.best()
        self._trial = self.study.ask(SPACE)
        self.end_s = now + self.trial_s
        return params_of(self._trial.params)

    def begin(self, now: float) -> Params:
        return self._ask(now)

    def extend(self, now: float) -> None:
        self.end_s = now + self.trial_s

    def end(self, now: float, terms: dict) -> Params:
        """Score the trial that ends at ``now`` and return the next trial's parameters."""
        r = reward(terms, self.lambdas)
        self.study.tell(self._trial, r)
        self.history.append({
            "trial": len(self.history), "start_s": self.start_s, "end_s": now, "reward": r,
            **{k: terms[k] for k in ("C", "L", "S", "U", "n")}, **self._trial.params,
        })
        return self._ask(now)

    def best(self) -> Params:
        """The best trial's parameters (the starting point before any trial is scored)."""
        done = [t for t in self.study.trials if t.value is not None]
        return params_of(self.study.best_params) if done else params_of(self.study.trials[0].params)

    def table(self) -> pd.DataFrame:
        """One row per finished trial: reward, its terms, the parameters, best so far."""
        out = pd.DataFrame(self.history)
        if not out.empty:
            out["best_reward"] = out["reward"].cummax()
        return out
