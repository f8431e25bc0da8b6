"""SDAR-style static skills: one hand-written skill file per (environment, task type), no hindsight.

Files live in the env's own package, ``seedrl/envs/<env>/skills/<skill type>.md`` plus ``general.md``
(found through the registry: :func:`seedrl.envs.registry.env_folder`); the skill type is the env's
``Env.skill_types(task_id, task_text)``: by default its ``Env.task_type(task_id)`` (the part of the task
id before the first "-"); Search maps a Search-R1 data source (and the question) to SDAR's question
types. As SDAR's
``SkillProvider`` does, a task's skill is the general file followed by its task type's file, joined
by a blank line, each kept as written (stripped of outer whitespace only: the files are Markdown).
Pass ``skill_dir`` to use your own files.

``skill_dir`` may also be a skill folder of SDAR's own repository (``skills/<env>/`` of a ZJU-REAL/SDAR
checkout): it is recognised by its ``skill_mapping.json``, whose ``skill_files`` name the skill files
(``general_skills`` is the general one) and whose ``task_to_skill`` maps task types to skills (e.g.
ALFWorld's ``pick_two_obj_and_place`` -> ``pick_and_place``). A task's skill is then composed as SDAR's
``SkillProvider`` composes it: the general skills, a blank line, the mapped skill; a task type with no
mapping gets the general skills alone. SDAR picks the type of an ALFWorld game as the first
``task_to_skill`` key (in file order) found in the game file's path: that rule is ALFWorld's
(``Env.sdar_skills``); other envs look their skill type up exactly (Search's is SDAR's question type,
``get_privileged_info_from_data_source``).

:attr:`StaticSkillAnalyzer.source` says which skill text a run used (layout, folder, a hash of the
files' contents); the trainer logs it and writes it to ``skill_source.json`` in the run folder.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from seedrl.envs.registry import env_class, env_folder, env_names
from seedrl.errors import SeedRLError
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.base import AnalysisResult

#: the file that marks a folder as SDAR's layout, and SDAR's name of the general skill
SDAR_MAPPING = "skill_mapping.json"
SDAR_GENERAL = "general_skills"


def skills_dir(env_name: str) -> Path:
    """The static skill folder of a registered env: ``skills/`` in its package."""
    return env_folder(env_name) / "skills"


def _shipped() -> list[str]:
    return [n for n in env_names() if skills_dir(n).is_dir()]


class StaticSkillAnalyzer:
    name = "static"

    def __init__(self, env_name: str, skill_dir: str | Path | None = None) -> None:
        if skill_dir:
            self.dir = Path(skill_dir)
        elif env_name in env_names():
            self.dir = skills_dir(env_name)
        else:
            raise SeedRLError(f"no static skills for {env_name!r}: not a registered environment; shipped: "
                              f"{', '.join(_shipped())}")
        if not self.dir.is_dir():
            raise SeedRLError(f"no static skills for {env_name!r} in {self.dir}; shipped: {', '.join(_shipped())}")
        self.env_name = env_name
        #: "sdar" (a folder with SDAR's skill_mapping.json) or "seedrl" (general.md + <task type>.md)
        self.layout = "sdar" if (self.dir / SDAR_MAPPING).is_file() else "seedrl"
        #: SDAR layout: task type -> skill name (``task_to_skill``); empty for this project's layout
        self.task_to_skill: dict[str, str] = {}
        #: SDAR layout: task type -> keywords (``task_keywords``, where the mapping has them: WebShop's
        #: categories, ALFWorld's task types), for the envs whose SDAR route reads them
        self.task_keywords: dict[str, list[str]] = {}
        if self.layout == "sdar":
            files = self._load_sdar()
        else:
            files = sorted(self.dir.glob("*.md"))
            self.skills = {p.stem: p.read_text().strip() for p in files}
            self.general_key = "general"
        self.skills = {k: v for k, v in self.skills.items() if v}
        digest = hashlib.sha256()
        for p in files:
            digest.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
        #: which skill text this analyzer serves: its layout, folder, files and their contents' hash
        self.source = {"layout": self.layout, "dir": str(self.dir.resolve()),
                       "files": [p.name for p in files], "sha256": digest.hexdigest()}

    def _load_sdar(self) -> list[Path]:
        path = self.dir / SDAR_MAPPING
        try:
            mapping = json.loads(path.read_text())
            skill_files = dict(mapping["skill_files"])
            self.task_to_skill = {str(k): str(v) for k, v in mapping.get("task_to_skill", {}).items()}
            self.task_keywords = {str(k): [str(w) for w in v] for k, v in mapping.get("task_keywords", {}).items()}
        except (ValueError, KeyError, TypeError) as exc:
            raise SeedRLError(f"{path} is not an SDAR skill mapping (skill_files, task_to_skill): {exc}") from None
        missing = [f for f in skill_files.values() if not (self.dir / f).is_file()]
        if missing:
            raise SeedRLError(f"{path} names skill files that {self.dir} lacks: {', '.join(missing)}")
        self.skills = {name: (self.dir / f).read_text().strip() for name, f in skill_files.items()}
        self.general_key = SDAR_GENERAL
        return [path] + [self.dir / f for f in sorted(set(skill_files.values()))]

    def task_type(self, task_id: str) -> str:
        try:
            return env_class(self.env_name).task_type(task_id)
        except Exception:  # a custom skill_dir for an env that is not registered
            return task_id.split("-", 1)[0]

    def skill_names(self, task_id: str, task_text: str = "") -> list[str]:
        """The skills (besides the general one) of a task, in order: the files the env's skill types name
        (:meth:`seedrl.envs.base.Env.skill_types`: by default the task type; Search routes by data source
        as SDAR does, WebShop by the instruction's keywords), or SDAR's mapping as the env routes it
        (:meth:`seedrl.envs.base.Env.sdar_skills`); an unregistered env's exact task type.
        ``task_text``: the episode's task description."""
        try:
            env = env_class(self.env_name)
        except Exception:  # a custom skill_dir for an env that is not registered
            kind = self.task_type(task_id)
            names = [kind] if self.layout == "seedrl" else [self.task_to_skill[kind]] if kind in self.task_to_skill else []
        else:
            if self.layout == "seedrl":
                try:
                    names = list(env.skill_types(task_id, task_text))
                except Exception:  # a task id the env cannot type: as task_type's fallback
                    names = [task_id.split("-", 1)[0]]
            else:
                names = list(env.sdar_skills(task_id, self.task_to_skill, task_text, self.task_keywords))
        return [n for n in names if n != self.general_key]

    def skill_name(self, task_id: str, task_text: str = "") -> str | None:
        """The first of :meth:`skill_names` (None: the general skill alone)."""
        names = self.skill_names(task_id, task_text)
        return names[0] if names else None

    def skill_for(self, task_id: str, task_text: str = "") -> str | None:
        """The general skill, then each of :meth:`skill_names`, joined by a blank line (SDAR's
        ``_get_skill_text`` / ``get_privileged_info_from_prompt``)."""
        parts = [self.skills.get(self.general_key), *(self.skills.get(n) for n in self.skill_names(task_id, task_text))]
        return "\n\n".join(p for p in parts if p) or None

    def analyze(self, trajectories: list[Trajectory]) -> list[AnalysisResult]:
        out = []
        for t in trajectories:
            skill = self.skill_for(t.task_id, t.task_description)
            out.append(AnalysisResult(t.traj_id, skill, error=None if skill else "no static skill for task type"))
        return out
