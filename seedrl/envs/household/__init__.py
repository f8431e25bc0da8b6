"""Household search in ALFWorld-style rooms, pure Python (README.md): the env, its placement priors and
skill-free searchers (:mod:`.env`), its typed privileged state (:mod:`.state`), its oracle (:mod:`.oracle`)
and static skills (``skills/``)."""
