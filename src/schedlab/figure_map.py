"""The figure map (``workflow/report/figure_map.yaml``): every figure a notebook saves, what it
shows, the paper figure it reproduces and the rules it draws on. The report takes its captions
from it, the documentation renders it, and the tests hold it against the notebooks and rules."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from schedlab.errors import SchedlabError


@dataclass(frozen=True)
class Figure:
    """One mapped figure: ``results/figures/<notebook>/<name>.png`` (``name`` may hold a
    ``{part}`` that the run fills in, e.g. ``torch_profile_{model}``)."""

    notebook: str
    name: str
    caption: str
    reproduces: str | None = None
    rules: tuple[str, ...] = field(default_factory=tuple)

    @property
    def label(self) -> str:
        """What the figure shows, led by the paper figure it reproduces: the report's caption."""
        return f"{self.reproduces} {self.caption}" if self.reproduces else self.caption

    def matches(self, stem: str) -> bool:
        """Whether a saved figure's file stem is this figure (its ``{part}`` matching any text)."""
        parts = re.split(r"\{[^}]*\}", self.name)
        return re.fullmatch(".+".join(map(re.escape, parts)), stem) is not None


def load(path: str | Path) -> dict[str, dict]:
    """The map as written: notebook -> ``title``, ``figures`` (name -> ``caption``,
    ``reproduces``, ``rules``) and ``tables``; a missing caption is an error."""
    data = yaml.safe_load(Path(path).read_text())
    for notebook, entry in data.items():
        for name, fig in (entry.get("figures") or {}).items():
            if not (fig or {}).get("caption"):
                raise SchedlabError(f"{path}: figure {notebook}/{name} has no caption")
    return data


def figures(path: str | Path) -> list[Figure]:
    """Every mapped figure, in the map's order."""
    return [
        Figure(notebook, name, fig["caption"], fig.get("reproduces"), tuple(fig.get("rules") or ()))
        for notebook, entry in load(path).items()
        for name, fig in (entry.get("figures") or {}).items()
    ]


def label(mapped: list[Figure], notebook: str, stem: str) -> str:
    """The caption of the saved figure ``stem`` of ``notebook`` ("" when it is not mapped)."""
    return next((f.label for f in mapped if f.notebook == notebook and f.matches(stem)), "")
