"""A small study shared by the sweep tests: 2 policies x 2 cluster sizes x 2 seeds on 200 Philly jobs."""

from __future__ import annotations

from pathlib import Path

SMALL_STUDY = """\
name: small
traces:
  - {name: philly, limit: 200}
policies:
  - kant
  - name: volcano-binpack
    label: binpack
clusters: ["2x8:V100,leaf=1,spine=1", "4x8:V100,leaf=2,spine=1"]
seeds: [0, 1]
"""


def write_study(folder: Path, text: str = SMALL_STUDY, name: str = "study.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path

# the grid, 4 policies x 3 cluster sizes x 3 seeds = 36 runs, on a small slice of Philly
GRID_STUDY = """\
name: grid
traces:
  - {name: philly, limit: 100}
policies: [kant, volcano-binpack, k8s-default, random]
clusters: ["2x8:V100,leaf=1,spine=1", "3x8:V100,leaf=2,spine=1", "4x8:V100,leaf=2,spine=1"]
seeds: [0, 1, 2]
"""
