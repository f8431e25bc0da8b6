"""tools/mutants.py, the gate of `make mutants`: how it reads the equivalent-mutant list and groups mutants
by module (a wrong split would count a live mutant as equivalent, or report a share per function)."""

from __future__ import annotations

import pytest

from tests.helpers import load_script


@pytest.fixture(scope="module")
def tool():
    return load_script("tools/mutants.py")


def test_an_entry_whose_mutated_line_holds_the_separator_keeps_it_whole(tool, tmp_path):
    f = tmp_path / "eq.txt"
    f.write_text("# a comment\n\n"
                 "m.x_f__mutmut_1 | a: list[float] | None = None, b: float = 1.0, | only read with a\n"
                 "m.xǁCǁg__mutmut_2 | return b\"XX\" | the same constant for every sample\n")
    assert tool.read_equivalent(f) == {
        "m.x_f__mutmut_1": ("a: list[float] | None = None, b: float = 1.0,", "only read with a"),
        "m.xǁCǁg__mutmut_2": ('return b"XX"', "the same constant for every sample")}
    f.write_text("m.x_f__mutmut_1 | no reason\n")
    with pytest.raises(SystemExit, match="expected '<mutant> | <mutated line> | <reason>'"):
        tool.read_equivalent(f)


def test_every_mutant_of_a_module_counts_to_that_module_methods_included(tool):
    assert tool.module_of("seedrl.algos.losses.x_kl_k3__mutmut_1") == "seedrl.algos.losses"
    assert tool.module_of("seedrl.train.update.xǁUpdaterǁ_micro_batch_loss__mutmut_8") == "seedrl.train.update"
