"""A scratch copy of what release_model reads and writes: stack files, the model repository and
an empty publication index, so no test touches the committed files."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Workspace:
    pulumi: Path
    repository: Path
    index: Path

    def stack(self, env: str) -> Path:
        return self.pulumi / f"Pulumi.{env}.yaml"

    def args(self) -> list[str]:
        return ["--pulumi-dir", str(self.pulumi), "--index", str(self.index)]

    def snapshot(self) -> dict[str, bytes]:
        """Every file of the stack folder and the index: to prove that nothing changed."""
        return {
            str(path): path.read_bytes()
            for folder in (self.pulumi, self.index)
            for path in sorted(folder.rglob("*"))
            if path.is_file()
        }


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    pulumi = tmp_path / "pulumi"
    pulumi.mkdir()
    for stack in (ROOT / "pulumi").glob("Pulumi.*.yaml"):
        shutil.copy(stack, pulumi / stack.name)
    (tmp_path / "inventories").symlink_to(ROOT / "inventories")  # the stacks' fleetInventory: ../inventories/<env>
    repository = tmp_path / "model_repository"
    shutil.copytree(ROOT / "model_repository", repository)
    index = tmp_path / "model_releases"
    index.mkdir()
    return Workspace(pulumi=pulumi, repository=repository, index=index)
