from fakegpu.profiles.matching import closest, distance, normalise


def test_normalise() -> None:
    assert normalise("  NVIDIA A100_SXM4 80GB ") == "a100-sxm4-80gb"


def test_look_alike_characters_cost_less() -> None:
    assert distance("a10o", "a100") < distance("a10o", "a10")
    assert distance("h1oo", "h100") == 1.0


def test_closest_ranks_and_refuses_nonsense() -> None:
    assert closest("a10O", ["a10", "a100", "h100"])[0] == "a100"
    assert closest("completely-different", ["a100", "t4"]) == []
    assert closest("", ["a100"]) == []
