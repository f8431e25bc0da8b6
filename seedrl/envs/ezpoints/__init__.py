"""EZPoints (README.md), verl-agent's ``gym_cards/EZPoints-v0``: the rules, the cards and the solver
(:mod:`.env`), the card images (:mod:`.cards`), its typed privileged state (:mod:`.state`), its oracle
(:mod:`.oracle`) and its static skill (``skills/general.md``)."""
